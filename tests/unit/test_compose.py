"""FallbackTarget, TeeTarget and target_from_url, with real Avro files and fault-injecting targets."""

from __future__ import annotations

import pathlib
import threading
from collections import Counter

import numpy as np
import pytest

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.errors import TargetError
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.targets import target_from_url
from beam_nominal.targets.avro import AvroFileTarget, read_avro_file
from beam_nominal.targets.base import Request, Target
from beam_nominal.targets.compose import FallbackTarget, TeeError, TeeTarget, with_fallback

RID = "ri.catalog.main.dataset.compose"


def request(channel: str, start: int, n: int, seq: int = 0) -> Request:
    ts = np.arange(start, start + n, dtype=np.int64)
    return Request(RID, [SeriesBatch(SeriesKey.of(channel), ValueType.INT64, ts, ts.copy())], seq=seq)


class Recording:
    """Accepts everything and remembers which requests (by seq) it saw."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.closed = 0
        self._lock = threading.Lock()

    def send(self, request: Request, timeout: float | None = None) -> None:
        with self._lock:
            self.seen.append(request.seq)

    def close(self) -> None:
        self.closed += 1


class Failing:
    """Fails the first ``times`` sends (forever if None) with the given retryability."""

    def __init__(
        self,
        *,
        retryable: bool,
        times: int | None = None,
        code: str = "UNAVAILABLE",
        close_fails: bool = False,
    ) -> None:
        self.retryable = retryable
        self.close_fails = close_fails
        self.times = times
        self.code = code
        self.calls = 0
        self.closed = 0

    def send(self, request: Request, timeout: float | None = None) -> None:
        self.calls += 1
        if self.times is None or self.calls <= self.times:
            raise TargetError(f"injected failure {self.calls}", retryable=self.retryable, code=self.code)

    def close(self) -> None:
        self.closed += 1
        if self.close_fails:
            raise RuntimeError("close failed")


def deliver(target: FallbackTarget, req: Request, attempts: int = 3) -> str:
    """What the uploader does: retry retryable errors, then hand the request to the fallback."""
    for attempt in range(attempts):
        try:
            target.send(req)
            return "primary"
        except TargetError as exc:
            if exc.retryable and attempt + 1 < attempts:
                continue
            target.send_fallback(req, reason=exc)
            return "fallback"
    raise AssertionError("unreachable")


def test_permanently_failing_primary_sends_exactly_its_points_to_the_fallback(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "fallback.avro"
    target = with_fallback(Failing(retryable=False, code="INVALID_ARGUMENT"), path, dataset_rid=RID)
    routes = [deliver(target, request(f"c{i % 2}", i * 10, 10, seq=i)) for i in range(5)]
    target.primary = Recording()  # type: ignore[misc]
    routes.append(deliver(target, request("c9", 0, 3, seq=5)))
    target.close()
    assert routes == ["fallback"] * 5 + ["primary"]
    assert target.fallback_points == 50 and target.fallback_requests == 5
    assert target.fallback_location == str(path)
    got = read_avro_file(path)
    assert set(got) == {SeriesKey("c0"), SeriesKey("c1")}
    assert got[SeriesKey("c0")].values == [*range(0, 10), *range(20, 30), *range(40, 50)]
    assert got[SeriesKey("c1")].values == [*range(10, 20), *range(30, 40)]


def test_fallback_after_retries_run_out_and_not_before(tmp_path: pathlib.Path) -> None:
    primary = Failing(retryable=True, times=4)
    fallback = Recording()
    target = FallbackTarget(primary, fallback)
    assert deliver(target, request("c", 0, 1, seq=1), attempts=3) == "fallback"  # calls 1-3 fail
    assert deliver(target, request("c", 0, 1, seq=2), attempts=3) == "primary"  # call 4 fails, 5 succeeds
    assert primary.calls == 5
    assert fallback.seen == [1]
    assert target.fallback_points == 1


def test_a_refusing_fallback_raises_with_both_reasons() -> None:
    target = FallbackTarget(Failing(retryable=False, code="PERMISSION_DENIED"), Failing(retryable=True))
    with pytest.raises(TargetError) as info:
        deliver(target, request("c", 0, 4))
    assert info.value.retryable is True
    assert "refused 4 points" in str(info.value) and "injected failure 1" in str(info.value)
    assert target.fallback_points == 0 and target.fallback_requests == 0


def test_fallback_close_closes_both_once_even_if_one_fails() -> None:
    primary, fallback = Failing(retryable=True, close_fails=True), Recording()
    target = FallbackTarget(primary, fallback)
    with pytest.raises(RuntimeError, match="close failed"):
        target.close()
    target.close()
    assert (primary.closed, fallback.closed) == (1, 1)


def test_tee_sends_to_all_and_retries_only_the_failed_target(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tee.avro"
    avro = AvroFileTarget(path)
    flaky = Failing(retryable=True, times=2)
    tee = TeeTarget(avro, flaky)
    req = request("c", 100, 5)
    for _ in range(2):
        with pytest.raises(TeeError) as info:
            tee.send(req)
        assert info.value.retryable is True
        assert [i for i, _ in info.value.failures] == [1]
    tee.send(req)  # flaky succeeds on its third call
    tee.send(request("c", 200, 1))
    tee.close()
    assert flaky.calls == 4
    # The Avro file got the retried request once, not three times.
    assert read_avro_file(path)[SeriesKey("c")].values == [100, 101, 102, 103, 104, 200]


def test_tee_error_is_retryable_only_if_every_failure_is() -> None:
    tee = TeeTarget(Failing(retryable=True), Recording(), Failing(retryable=False, code="INVALID_ARGUMENT"))
    with pytest.raises(TeeError) as info:
        tee.send(request("c", 0, 1))
    assert info.value.retryable is False
    assert info.value.code == "multiple"
    assert [i for i, _ in info.value.failures] == [0, 2]
    assert "2 of 3 targets" in str(info.value)
    all_retryable = TeeTarget(Failing(retryable=True), Failing(retryable=True))
    with pytest.raises(TeeError) as info:
        all_retryable.send(request("c", 0, 1))
    assert info.value.retryable is True and info.value.code == "UNAVAILABLE"


def test_tee_from_many_threads_lands_every_point_once_in_each_file(tmp_path: pathlib.Path) -> None:
    a, b = AvroFileTarget(tmp_path / "a.avro"), AvroFileTarget(tmp_path / "b.avro")
    tee = TeeTarget(a, b)

    def work(t: int) -> None:
        for s in range(20):
            tee.send(request(f"t{t}", (t * 20 + s) * 10, 10))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    tee.close()
    for path in (tmp_path / "a.avro", tmp_path / "b.avro"):
        values = Counter(v for s in read_avro_file(path).values() for v in s.values)
        assert sorted(values) == list(range(6 * 20 * 10)) and set(values.values()) == {1}


def test_tee_needs_a_target() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TeeTarget()


def test_target_from_url(tmp_path: pathlib.Path) -> None:
    by_path = target_from_url(str(tmp_path / "x.avro"), dataset_rid=RID)
    assert isinstance(by_path, AvroFileTarget) and by_path.dataset_rid == RID
    by_path.close()
    by_url = target_from_url(f"file://{tmp_path}/y.data", codec="null")
    assert isinstance(by_url, AvroFileTarget) and by_url.codec == "null"
    by_url.close()
    mine = Recording()
    assert target_from_url(mine) is mine
    with pytest.raises(ValueError, match=r"grpc://host:port"):
        target_from_url(str(tmp_path / "x.parquet"))
    with pytest.raises(ValueError, match="cannot tell"):
        target_from_url("ftp://example.invalid/x")
    with pytest.raises(ValueError, match=r"https://host/api"):
        target_from_url("example.invalid/api")


def test_target_from_url_grpc_is_the_grpc_target() -> None:
    grpc_mod = pytest.importorskip("beam_nominal.targets.grpc")
    target: Target = target_from_url("grpc://127.0.0.1:1", dataset_rid=RID, token="t")
    try:
        assert isinstance(target, grpc_mod.GrpcTarget)
    finally:
        target.close()
