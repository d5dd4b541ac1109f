"""PortableRunner with separate SDK worker processes: the embedded job server, and an ``EXTERNAL``
environment served by a worker pool the test starts from its own interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _external_job import JOB_TIMEOUT_S, ROOT, assert_stored, run_job
from _worker_pool import worker_pool

from beam_nominal.server import LocalServer


@pytest.mark.timeout(JOB_TIMEOUT_S + 180)
def test_portable_runner_with_an_external_worker_pool(tmp_path: Path) -> None:
    rid = "ri.test.external"
    with LocalServer(tmp_path / "data", port=0) as server:
        # The workers import this checkout's beam_nominal, as the launcher does.
        with worker_pool(sys.executable, cwd=tmp_path, log=tmp_path / "pool.log", pythonpath=[str(ROOT)]) as pool:
            run_job(server.target, rid, pool)
        assert_stored(server.store, rid)
