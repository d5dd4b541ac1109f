"""WriteToNominal on Beam's DaskRunner, with a LocalCluster of two worker processes.

DaskRunner runs each ParDo per Dask partition: it pickles the DoFn with the task, calls setup,
start_bundle, process for every element, then takes the outputs, and only then calls finish_bundle
and teardown (so whatever a DoFn outputs from finish_bundle is dropped). A consumer of one tagged
output receives every output of the producing ParDo. It computes only the bag of the pipeline's
last transform, so the failed output is consumed by the last transform here, and it is collected
through files because a Dask pipeline has no assert_that.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from _catalogue import SEEDS, SaveFailed, check_failed, check_store, generate, read_failed
from apache_beam.options.pipeline_options import PipelineOptions

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer

distributed = pytest.importorskip("dask.distributed")

from apache_beam.runners.dask.dask_runner import DaskRunner  # noqa: E402  (needs dask)

PARTITIONS = 8
RID = "ri.test.dask"


@pytest.fixture
def dask_client(tmp_path: Path) -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,
        local_directory=str(tmp_path / "dask"),
    ) as cluster:
        # Not the default client (nor the context's current one): the default is then the client
        # DaskRunner makes, which the test closes.
        client = distributed.Client(cluster, set_as_default=False)
        try:
            yield client
        finally:
            client.close()


@pytest.mark.timeout(300)
def test_write_to_nominal_on_dask_runner_local_cluster(tmp_path: Path, dask_client: Any) -> None:
    failed_dir = tmp_path / "failed"
    failed_dir.mkdir()
    dask_client.wait_for_workers(2, timeout=120)
    workers = set(dask_client.run(os.getpid).values())
    assert len(workers) == 2 and os.getpid() not in workers
    address = dask_client.scheduler.address
    opts = PipelineOptions([f"--dask_client_address={address}", f"--dask_npartitions={PARTITIONS}"])
    with LocalServer(tmp_path / "server", port=0) as server:
        p = beam.Pipeline(runner=DaskRunner(), options=opts)
        result = (
            p
            | beam.Create(list(range(SEEDS)))
            | "Generate" >> beam.FlatMap(generate)
            | WriteToNominal(server.target, dataset_rid=RID)
        )
        _ = result.failed | "SaveFailed" >> beam.ParDo(SaveFailed(str(failed_dir)))
        try:
            p.run().wait_until_finish()
        finally:
            # DaskRunner never closes the client it makes, which would outlive the cluster; a run
            # that fails to compute does not even return it.
            with contextlib.suppress(ValueError):
                distributed.default_client().close()

        check_store(server.store, RID)

    files = sorted(failed_dir.glob("*.pkl"))
    # Written by the cluster's workers, not by this process.
    assert {int(f.name.split("-")[0]) for f in files} <= workers
    check_failed(read_failed(failed_dir))
