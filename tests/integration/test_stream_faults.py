"""NominalStream against a real LocalServer with faults injected by gRPC server interceptors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from _first_contact import grpc_probe

from beam_nominal._wire import metadata as md
from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream, StreamState
from beam_nominal.targets.grpc import GrpcTarget

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.faults-1"
T = 1_700_000_000_000_000_000
FAST = {"linger": None, "initial_backoff": 0.01, "max_backoff": 0.05}


class Faults(grpc.ServerInterceptor):  # type: ignore[misc]
    """Fails WriteColumnBatches: the first ``fail_first`` calls before they are stored, or every
    call (``always``), or the first ``lose_ack`` calls *after* they are stored (the client sees
    UNAVAILABLE for a write that committed), or blocks every call until ``gate`` is set."""

    def __init__(
        self, fail_first: int = 0, always: bool = False, lose_ack: int = 0, gate: threading.Event | None = None
    ) -> None:
        self.fail_first, self.always, self.lose_ack, self.gate = fail_first, always, lose_ack, gate
        self.lock = threading.Lock()
        self.calls = 0
        self.entered = threading.Event()

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method != md.WRITE_COLUMN_BATCHES or grpc_probe(details):
            return continuation(details)
        with self.lock:
            self.calls += 1
            fail = self.always or self.fail_first > 0
            self.fail_first -= self.fail_first > 0
            lose = not fail and self.lose_ack > 0
            self.lose_ack -= lose
        real = continuation(details)

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            self.entered.set()
            if self.gate is not None:
                self.gate.wait(60)
            if fail:
                context.abort(grpc.StatusCode.UNAVAILABLE, "injected: before commit")
            reply = real.unary_unary(request, context)
            if lose:
                context.abort(grpc.StatusCode.UNAVAILABLE, "injected: ack lost after commit")
            return reply  # type: ignore[no-any-return]

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=real.request_deserializer, response_serializer=real.response_serializer
        )


def _values(data: Path, channel: str, tags: dict[str, str] | None = None) -> list[Any]:
    return LocalStore(data).read(RID, channel, tags).column("value").to_pylist()  # type: ignore[no-any-return]


def test_a_server_that_fails_everything_gives_the_exact_undelivered_count(tmp_path: Path) -> None:
    faults = Faults(always=True)
    with LocalServer(tmp_path / "data", interceptors=[faults]) as srv:
        s = NominalStream(srv.target, dataset_rid=RID, max_attempts=3, max_request_points=1000, **FAST)
        s.enqueue_batch("a", np.arange(T, T + 2500), np.ones(2500), tags={"k": "v"})
        s.enqueue("b", T, 1)
        with pytest.raises(DeliveryError) as info:
            s.flush()
        err = info.value
        assert err.points == 2501
        assert err.undelivered == {SeriesKey("a", (("k", "v"),)): 2500, SeriesKey("b"): 1}
        assert "UNAVAILABLE" in str(err) and "gave up after 3 attempts" in str(err)
        assert err.report.points == 0 and err.report.failed_points == 2501
        assert faults.calls == 3 * 3  # three requests, three attempts each
        s.close()
        assert s.state is StreamState.FAILED
        assert LocalStore(srv.store.data_dir).list_series(RID) == []


def test_fallback_file_holds_exactly_the_undelivered_points(tmp_path: Path) -> None:
    from beam_nominal.targets.avro import read_avro_file

    with LocalServer(tmp_path / "data", interceptors=[Faults(always=True)]) as srv:
        fb = tmp_path / "fallback.avro"
        with NominalStream(srv.target, dataset_rid=RID, fallback=fb, max_attempts=2, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 100), np.arange(100.0))
            s.enqueue("i", T, 2**53 + 1)
            report = s.flush()
        assert (report.points, report.fallback_points, report.failed_points) == (0, 101, 0)
        got = read_avro_file(fb)
        assert got[SeriesKey("a")].timestamps.tolist() == list(range(T, T + 100))
        assert list(got[SeriesKey("a")].values) == [float(v) for v in range(100)]
        assert list(got[SeriesKey("i")].values) == [2**53 + 1]


def test_transient_failures_and_lost_acks_land_every_point_once(tmp_path: Path) -> None:
    faults = Faults(fail_first=3, lose_ack=2)
    with LocalServer(tmp_path / "data", interceptors=[faults]) as srv:
        with NominalStream(srv.target, dataset_rid=RID, max_request_points=5_000, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 20_000), np.arange(20_000.0))
            report = s.flush()
        assert report.points == 20_000 and report.retries == 5
        assert _values(srv.store.data_dir, "a") == [float(v) for v in range(20_000)]


class _Watched:
    """The real GrpcTarget, noting when a send failed (so the test restarts the server after)."""

    def __init__(self, url: str) -> None:
        self.inner = GrpcTarget(url)
        self.failed = threading.Event()

    def send(self, request: Any, timeout: float | None = None) -> None:
        try:
            self.inner.send(request, timeout)
        except TargetError:
            self.failed.set()
            raise

    def close(self) -> None:
        self.inner.close()


def test_server_killed_and_restarted_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    # A real process killed with SIGKILL, restarted on the same data dir and port.
    from test_server_process import Serve

    data = tmp_path / "data"
    first = Serve(data)
    port = first.target.rsplit(":", 1)[1]
    n_batches, size = 40, 1_000
    target = _Watched(first.target)
    s = NominalStream(target, dataset_rid=RID, max_request_points=2_000, total_timeout=60, max_attempts=1000, **FAST)
    second = None
    try:
        for b in range(n_batches):
            s.enqueue_batch("a", np.arange(T + b * size, T + (b + 1) * size), np.full(size, float(b)))
            if b == 10:
                first.kill()
            if b == 20:
                assert target.failed.wait(10), "no send met the dead server"
                second = Serve(data, "--port", port)
                assert second.target == first.target
        report = s.close()
    finally:
        first.kill()
        if second is not None:
            second.kill()
        target.close()
    assert report.points == n_batches * size and report.failed_points == 0
    assert report.retries > 0
    table = LocalStore(data).read(RID, "a")
    assert table.column("timestamp").to_pylist() == list(range(T, T + n_batches * size))
    assert table.column("value").to_pylist() == [float(b) for b in range(n_batches) for _ in range(size)]


def test_close_is_bounded_against_a_server_that_never_answers(tmp_path: Path) -> None:
    gate = threading.Event()
    faults = Faults(gate=gate)
    with LocalServer(tmp_path / "data", interceptors=[faults]) as srv:
        s = NominalStream(srv.target, dataset_rid=RID, attempt_timeout=60, **FAST)
        s.enqueue_batch("a", np.arange(T, T + 10), np.ones(10))
        with pytest.raises(DeliveryError, match="close timed out") as info:
            s.close(timeout=0.5)
        assert faults.entered.is_set()
        assert info.value.undelivered == {SeriesKey("a"): 10}
        assert s.state is StreamState.FAILED
        gate.set()


def test_flush_timeout_reports_what_is_still_in_flight(tmp_path: Path) -> None:
    gate = threading.Event()
    with LocalServer(tmp_path / "data", interceptors=[Faults(gate=gate)]) as srv:
        s = NominalStream(srv.target, dataset_rid=RID, attempt_timeout=60, **FAST)
        s.enqueue_batch("a", np.arange(T, T + 10), np.ones(10))
        with pytest.raises(DeliveryError, match="flush timed out") as info:
            s.flush(timeout=0.3)
        assert info.value.undelivered == {SeriesKey("a"): 10}
        gate.set()
        assert s.close(timeout=30).points == 10
        assert _values(srv.store.data_dir, "a") == [1.0] * 10
