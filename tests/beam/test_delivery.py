"""WriteToNominal delivery: bundle retries leave no duplicates, refusals fail the pipeline, options."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import apache_beam as beam
import grpc
import numpy as np
import pytest
from _first_contact import grpc_probe
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.util import Secret  # on every Beam we allow; apache_beam.utils.secret isn't in 2.72

from beam_nominal._wire import metadata as md
from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer

BASE = 1_700_000_000_000_000_000
POINTS = 1000


class Faults(grpc.ServerInterceptor):  # type: ignore[misc]
    """Aborts the write calls whose 1-based numbers are in ``fail``; ``always`` aborts every write."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen = 0
        self.fail: set[int] = set()
        self.always: grpc.StatusCode | None = None
        self.code = grpc.StatusCode.INVALID_ARGUMENT

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method != md.WRITE_COLUMN_BATCHES or grpc_probe(details):
            return continuation(details)
        with self.lock:
            self.seen += 1
            code = self.always or (self.code if self.seen in self.fail else None)
        if code is None:
            return continuation(details)

        def abort(_request: bytes, context: grpc.ServicerContext) -> bytes:
            context.abort(code, "injected fault")

        return grpc.unary_unary_rpc_method_handler(abort)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Any:
    faults = Faults()
    with LocalServer(tmp_path_factory.mktemp("beam-delivery"), interceptors=[faults]) as srv:
        yield srv, faults


def _series(_: Any) -> Any:
    # Three series of POINTS points each, generated in the pipeline.
    ts = BASE + np.arange(POINTS, dtype=np.int64) * 1000
    for i in range(3):
        yield f"retry.{i}", ts, np.arange(POINTS, dtype=np.float64) + i


def _pipeline(target: str, rid: str) -> beam.Pipeline:
    p = beam.Pipeline(runner=FnApiRunner())
    _ = (
        p
        | beam.Impulse()
        | beam.FlatMap(_series)
        # 100 points a request, one at a time in flight: a bundle makes 30 requests in order.
        | WriteToNominal(target, dataset_rid=rid, max_request_points=100, max_in_flight=1, max_attempts=1)
    )
    return p


def test_retried_bundle_after_partial_acknowledgement_stores_no_duplicates(faulty: Any) -> None:
    server, faults = faulty
    rid = "ri.test.retry"
    with faults.lock:
        start = faults.seen
        faults.fail = {start + 7}  # the 7th request of the bundle fails once, permanently
    with pytest.raises(Exception, match="not delivered") as info:
        _pipeline(server.target, rid).run().wait_until_finish()
    assert "retry." in str(info.value)
    stored_after_failure = sum(s.count for s in server.store.list_series(rid))
    # At least the six requests before the failed one were acknowledged and stored.
    assert 600 <= stored_after_failure < 3 * POINTS
    with faults.lock:
        before_retry = faults.seen
    # The runner's retry of the bundle: the same elements, the same requests, the same keys.
    _pipeline(server.target, rid).run().wait_until_finish()
    with faults.lock:
        assert faults.seen - before_retry == 30  # all sent again, the acknowledged ones included
    for i in range(3):
        table = server.store.read(rid, f"retry.{i}")
        ts = table.column("timestamp").to_numpy()
        assert ts.tolist() == (BASE + np.arange(POINTS, dtype=np.int64) * 1000).tolist()
        assert table.column("value").to_numpy().tolist() == (np.arange(POINTS, dtype=np.float64) + i).tolist()


def test_a_server_that_refuses_everything_fails_the_pipeline(faulty: Any) -> None:
    server, faults = faulty
    rid = "ri.test.refused"
    with faults.lock:
        faults.always = grpc.StatusCode.PERMISSION_DENIED
    try:
        with pytest.raises(Exception, match="not delivered") as info:
            _pipeline(server.target, rid).run().wait_until_finish()
    finally:
        with faults.lock:
            faults.always = None
    message = str(info.value)
    assert "PERMISSION_DENIED" in message
    assert "retry.0" in message
    assert server.store.list_series(rid) == []


class _Token(Secret):  # type: ignore[misc]
    def __init__(self, value: str) -> None:
        self.value = value

    def get_secret_bytes(self) -> bytes:
        return self.value.encode()


def test_secret_token_cross_bundle_batching_metrics_and_display_data(tmp_path: Path) -> None:
    token = "s3cr3t-token-value"
    with LocalServer(tmp_path / "data", token=token) as server:
        transform = WriteToNominal(
            server.target,
            dataset_rid="ri.test.batched",
            token=_Token(token),
            cross_bundle_batching=True,
            batch_size=7,
            max_buffering_duration_secs=1.0,
        )
        shown = transform.display_data()
        assert shown == {"target": server.target, "dataset_rid": "ri.test.batched"}
        assert token not in repr(transform) and token not in repr(shown)
        elements = [(f"b.{i % 4}", BASE + i, float(i)) for i in range(40)] + [("b.0", "bad-ts", 1.0)]
        p = beam.Pipeline(runner=FnApiRunner())
        result = p | beam.Create(elements) | transform
        _ = result.failed | beam.Map(lambda f: f.reason) | "CountFailed" >> beam.combiners.Count.Globally()
        run = p.run()
        run.wait_until_finish()
        for c in range(4):
            table = server.store.read("ri.test.batched", f"b.{c}")
            assert table.column("timestamp").to_pylist() == [BASE + i for i in range(c, 40, 4)]
            assert table.column("value").to_pylist() == [float(i) for i in range(c, 40, 4)]
        metrics = run.metrics().query(MetricsFilter().with_namespace("beam_nominal"))
        counters = {m.key.metric.name: m.committed for m in metrics["counters"]}
        assert counters["points"] == 40
        assert counters["failed_elements"] == 1
        assert counters["requests"] >= 1 and counters["bytes"] > 40 * 8
        dists = {m.key.metric.name: m.committed for m in metrics["distributions"]}
        assert dists["request_points"].sum == 40
        assert dists["request_latency_ms"].count == counters["requests"]


def test_no_target_on_a_remote_runner_is_a_clear_error() -> None:
    from apache_beam.runners.portability.portable_runner import PortableRunner

    # A job server elsewhere with Docker workers (a Flink cluster, say): nothing is run here.
    options = PipelineOptions(job_endpoint="flink.example:8099", environment_type="DOCKER")
    p = beam.Pipeline(runner=PortableRunner(), options=options)
    with pytest.raises(ValueError, match="runs on remote workers"):
        _ = p | beam.Create([("a", BASE, 1.0)]) | WriteToNominal()


def test_a_target_needs_a_dataset() -> None:
    with pytest.raises(ValueError, match="dataset_rid"):
        WriteToNominal("grpc://127.0.0.1:1")


def test_avro_file_target_one_file_per_writer(tmp_path: Path) -> None:
    import fastavro

    elements = [("f.x", BASE + i, float(i)) for i in range(50)] + [("f.s", BASE, "text")]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create(elements) | WriteToNominal(str(tmp_path / "out.avro"), dataset_rid="ri.test.avro")
    files = sorted(tmp_path.glob("out-*.avro"))
    assert files, list(tmp_path.iterdir())
    records = []
    for path in files:
        with open(path, "rb") as f:
            reader = fastavro.reader(f)
            assert reader.metadata["nominal.dataset_rid"] == "ri.test.avro"
            records.extend(reader)
    points = sorted(
        (r["channel"], t, v) for r in records for t, v in zip(r["timestamps"], r["values"], strict=True)
    )
    assert points == sorted([("f.s", BASE, "text"), *((c, t, v) for c, t, v in elements if c == "f.x")])
