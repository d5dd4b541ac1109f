"""PortableRunner with separate SDK worker processes: the embedded job server, and an ``EXTERNAL``
environment served by a worker pool the test starts from its own interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _external_job import expected
from _worker_pool import worker_pool

from beam_nominal.server import LocalServer

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_external_job.py")
JOB_TIMEOUT_S = 180


def run_job(target: str, rid: str, pool: str) -> None:
    """Launch the job from this environment and checkout; a job that hangs fails the test, it does
    not hang it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    python = sys.executable
    cmd = [python, str(JOB), f"--target={target}", f"--rid={rid}", f"--pool={pool}", f"--timeout={JOB_TIMEOUT_S}"]
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S + 60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the launcher did not exit within {JOB_TIMEOUT_S + 60} s: {exc.stderr!r:.3000}")
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"


def assert_stored(server: LocalServer, rid: str) -> None:
    want = expected()
    infos = {(i.channel, tuple(sorted(i.tags.items()))): i for i in server.store.list_series(rid)}
    assert sorted(infos) == sorted(want)
    for key, points in want.items():
        table = server.store.read(rid, key[0], dict(key[1]))
        got = sorted(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
        assert got == points and infos[key].count == len(points), key


@pytest.mark.timeout(JOB_TIMEOUT_S + 180)
def test_portable_runner_with_an_external_worker_pool(tmp_path: Path) -> None:
    rid = "ri.test.external"
    with LocalServer(tmp_path / "data", port=0) as server:
        # The workers import this checkout's beam_nominal, as the launcher does (cwd first on its path).
        with worker_pool(sys.executable, cwd=tmp_path, log=tmp_path / "pool.log", pythonpath=[str(ROOT)]) as pool:
            run_job(server.target, rid, pool)
        assert_stored(server, rid)
