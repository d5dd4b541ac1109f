"""WriteToNominal on Prism, the portable runner Beam's ``DirectRunner`` runs first.

Batch: the plain ``DirectRunner`` (which hands the job to Prism, its workers in this process), and a
shared Prism job server with ``EXTERNAL`` workers from a worker pool, over gRPC and HTTP: every
element shape with bad ones amid them (``tests/_catalogue.py``) and 3 M points as series elements
and Arrow tables, read back exactly, and exactly the bad elements in ``failed``. Streaming: an
unbounded ``PeriodicImpulse`` that stops at a known element, cross-bundle batching left unset
(off on Prism) and off, read back exactly once the job has drained.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import apache_beam as beam
import pytest
from _catalogue import SEEDS, SaveFailed, check_failed, check_store, generate, read_failed
from _jobs import (
    BULK_BASE,
    BULK_ELEMENTS,
    BULK_RID,
    RID,
    STREAM_RID,
    TICK_S,
    TICKS,
    bulk,
    check_bulk,
    tick_points,
)
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import portable_runner
from apache_beam.runners.portability.prism_runner import PrismRunner
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer


def _batch_pipeline(p: beam.Pipeline, target: str, failed_dir: Path) -> None:
    # No lone surrogates: Beam's coders cannot encode them, and a portable runner fails the bundle
    # that samples such an element's size (at random) or sends it to another stage.
    seeds = p | "Seeds" >> beam.Create(list(range(SEEDS)))
    shapes = seeds | "Generate" >> beam.FlatMap(generate, surrogates=False)
    result = shapes | "WriteShapes" >> WriteToNominal(target, dataset_rid=RID)
    _ = result.failed | "SaveFailed" >> beam.ParDo(SaveFailed(str(failed_dir)))
    bulk_failed = (
        p
        | "Bulk" >> beam.Create(list(range(BULK_ELEMENTS)))
        | "Reshuffle" >> beam.Reshuffle()
        | "Make" >> beam.FlatMap(bulk)
        | "WriteBulk" >> WriteToNominal(target, dataset_rid=BULK_RID)
    ).failed
    _ = bulk_failed | "SaveBulkFailed" >> beam.ParDo(SaveFailed(str(failed_dir / "bulk")))


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("runner", "wire"), [("direct", "grpc"), ("direct", "http"), ("prism-external", "grpc")])
def test_batch_every_shape_exact(
    runner: str, wire: str, tmp_path: Path, request: pytest.FixtureRequest, prism_binary: str
) -> None:
    failed_dir = tmp_path / "failed"
    (failed_dir / "bulk").mkdir(parents=True)
    with LocalServer(tmp_path / "data", port=0, http_port=0) as server:
        target = server.target if wire == "grpc" else server.http_url
        if runner == "direct":
            # What a user types: no runner named. The DirectRunner hands the job to Prism.
            p = beam.Pipeline(options=PipelineOptions([f"--prism_location={prism_binary}"]))
        else:
            job_server = request.getfixturevalue("prism_job_server")
            pool = request.getfixturevalue("external_workers")
            p = beam.Pipeline(
                runner=portable_runner.PortableRunner(),
                options=PipelineOptions(
                    [f"--job_endpoint={job_server}", "--environment_type=EXTERNAL", f"--environment_config={pool}"]
                ),
            )
        _batch_pipeline(p, target, failed_dir)
        result = p.run()
        # Prism ran it: a portable job's result, not the DirectRunner's fallback.
        assert isinstance(result, portable_runner.PipelineResult), type(result)
        assert result.wait_until_finish() == "DONE"
        check_store(server.store, RID)
        assert check_bulk(server.store) == 3_000_000
    check_failed(read_failed(failed_dir), surrogates=False)
    assert read_failed(failed_dir / "bulk") == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cross_bundle", [None, False], ids=["default", "off"])
def test_streaming_periodic_impulse_exact(cross_bundle: bool | None, tmp_path: Path, prism_binary: str) -> None:
    failed_dir = tmp_path / "failed"
    failed_dir.mkdir()
    options = PipelineOptions([f"--prism_location={prism_binary}", "--streaming"])
    with LocalServer(tmp_path / "data", port=0) as server:
        with beam.Pipeline(runner=PrismRunner(), options=options) as p:
            # start_timestamp's default is when Beam was imported: all ticks would be due at once.
            ticks = p | PeriodicImpulse(start_timestamp=time.time(), data=list(range(TICKS)), fire_interval=TICK_S)
            result = (
                ticks
                | beam.FlatMap(tick_points)
                | WriteToNominal(server.target, dataset_rid=STREAM_RID, cross_bundle_batching=cross_bundle)
            )
            _ = result.failed | beam.ParDo(SaveFailed(str(failed_dir)))
        store = server.store
        doubles = store.read(STREAM_RID, "stream.double")
        assert sorted(
            zip(doubles.column("timestamp").to_pylist(), doubles.column("value").to_pylist(), strict=True)
        ) == [(BULK_BASE + i * 1_000, i / 7) for i in range(TICKS)]
        ints = store.read(STREAM_RID, "stream.int", {"unit": "count"})
        assert sorted(zip(ints.column("timestamp").to_pylist(), ints.column("value").to_pylist(), strict=True)) == [
            (BULK_BASE + i * 1_000, 2**53 + i) for i in range(TICKS)
        ]
        states = store.read(STREAM_RID, "stream.state")
        assert sorted(zip(states.column("timestamp").to_pylist(), states.column("value").to_pylist(), strict=True)) == [
            (BULK_BASE + i * 1_000, f"state {i}") for i in range(0, TICKS, 4)
        ]
        assert sum(s.count for s in store.list_series(STREAM_RID)) == 2 * TICKS + TICKS // 4
        requests = len(os.listdir(tmp_path / "data" / STREAM_RID / "commits"))
    failed = read_failed(failed_dir)
    assert sorted(repr(f.element) for f in failed) == sorted(
        repr(("stream.double", BULK_BASE + i * 1_000 + 1, f"not a double {i}")) for i in range(0, TICKS, 97)
    )
    assert all("SeriesTypeError" in f.error and "pinned to double" in f.reason for f in failed), failed
    # Prism gave the stream in many small bundles, a request each (165 for the 1,000 ticks here):
    # cross-bundle batching stays off on Prism even for this unbounded input.
    assert requests >= 20, requests
