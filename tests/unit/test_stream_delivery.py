"""Delivery accounting, retries, idempotency keys and fallback, over fake targets at the seam."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _stream_fakes import RecordingTarget, permanent, unavailable

from beam_nominal._pipeline.uploader import Outcome, Uploader
from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.settings import RetrySettings, UploadSettings
from beam_nominal.stream import NominalStream
from beam_nominal.targets.base import Request
from beam_nominal.targets.compose import with_fallback

FAST_RETRY = {"initial_backoff": 0.001, "max_backoff": 0.002, "linger": None}


def test_report_counts_what_was_acknowledged() -> None:
    target = RecordingTarget()
    with NominalStream(target, dataset_rid="ri.x.1", **FAST_RETRY) as s:
        s.enqueue_batch("a", np.arange(1000), np.ones(1000))
        s.enqueue("b", 5, "x", tags={"k": "v"})
        report = s.flush()
    assert (report.points, report.series, report.requests, report.retries) == (1001, 2, 1, 0)
    assert report.bytes == len(target.acked[0].body)
    assert report.ok and report.failed_points == 0
    assert not target.closed  # a target object passed in is left open


def test_transient_failures_are_retried_with_the_same_key() -> None:
    target = RecordingTarget(unavailable(3))
    with NominalStream(target, dataset_rid="ri.x.1", max_request_points=400, **FAST_RETRY) as s:
        s.enqueue_batch("a", np.arange(1000), np.arange(1000.0))
        report = s.flush()
    assert report.points == 1000 and report.requests == 3 and report.retries == 9
    keys: dict[int, set[str]] = {}
    for req, key, timeout in target.calls:
        keys.setdefault(id(req), set()).add(key)
        assert timeout is not None and timeout > 0
    assert len(target.calls) == 12 and all(len(k) == 1 for k in keys.values())
    assert [v for _, v in sorted(target.points()[SeriesKey("a")])] == [float(i) for i in range(1000)]


def test_permanent_errors_are_not_retried_and_flush_names_the_loss() -> None:
    target = RecordingTarget(permanent)
    s = NominalStream(target, dataset_rid="ri.x.1", **FAST_RETRY)
    s.enqueue_batch("a", np.arange(300), np.ones(300), tags={"site": "x"})
    s.enqueue("b", 1, 7)
    with pytest.raises(DeliveryError) as info:
        s.flush()
    err = info.value
    assert len(target.calls) == 1
    assert err.undelivered == {SeriesKey("a", (("site", "x"),)): 300, SeriesKey("b"): 1}
    assert err.points == 301 and err.report.points == 0 and err.report.failed_points == 301
    assert "301 points of 2 series" in str(err) and "INVALID_ARGUMENT" in str(err) and "site=x" in str(err)
    assert s.close().failed_points == 301  # already raised once: close reports without raising again
    assert s.state.value == "failed"


def test_retries_exhausted_give_up_with_the_reason() -> None:
    target = RecordingTarget(unavailable(100))
    s = NominalStream(target, dataset_rid="ri.x.1", max_attempts=4, **FAST_RETRY)
    s.enqueue("a", 1, 1.0)
    with pytest.raises(DeliveryError, match="gave up after 4 attempts") as info:
        s.close()
    assert len(target.calls) == 4 and info.value.points == 1


def test_fallback_takes_finally_refused_requests_and_report_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from beam_nominal.targets.avro import read_avro_file

    fallback = tmp_path / "fb.avro"
    primary = RecordingTarget(permanent)
    with NominalStream(primary, dataset_rid="ri.x.1", fallback=fallback, **FAST_RETRY) as s:
        s.enqueue_batch("a", np.arange(50), np.arange(50.0))
        report = s.flush()
    assert report.points == 0 and report.failed_points == 0
    assert (report.fallback_points, report.fallback_requests) == (50, 1)
    assert report.fallback_path == str(fallback)
    got = read_avro_file(fallback)
    assert got[SeriesKey("a")].timestamps.tolist() == list(range(50))
    assert not primary.closed  # we closed only the fallback file we opened


def test_uploader_backoff_uses_injected_clock_and_sleep() -> None:
    sleeps: list[float] = []
    now = [0.0]

    def sleep(d: float) -> bool:
        sleeps.append(d)
        now[0] += d
        return False

    outcomes: list[Outcome] = []
    target = RecordingTarget(unavailable(5))
    up = Uploader(
        target,
        UploadSettings(attempt_timeout=2.0),
        RetrySettings(initial_backoff=1.0, max_backoff=4.0, jitter=0.0, total_timeout=9.5),
        lambda r, o: outcomes.append(o),
        clock=lambda: now[0],
        rand=lambda: 0.0,
        sleep=sleep,
    )
    outcome = up._deliver(Request("ri.x.1", []))
    # 1 + 2 + 4 = 7 s of backoff; the next (4 s) would pass the 9.5 s budget.
    assert sleeps == [1.0, 2.0, 4.0]
    assert not outcome.acknowledged and "9.5s retry budget" in outcome.reason and outcome.retries == 3
    # Attempt deadlines shrink to what is left of the total budget.
    assert [t for _, _, t in target.calls] == [2.0, 2.0, 2.0, 2.0]


def test_non_target_exceptions_are_permanent_failures() -> None:
    def boom(request: Request, attempt: int) -> TargetError | None:
        raise RuntimeError("encoder bug")

    s = NominalStream(RecordingTarget(boom), dataset_rid="ri.x.1", **FAST_RETRY)
    s.enqueue("a", 1, 1.0)
    with pytest.raises(DeliveryError, match="encoder bug"):
        s.close()


def test_with_fallback_wrapper_object_is_used_by_the_uploader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    primary = RecordingTarget(permanent)
    wrapped = with_fallback(primary, tmp_path / "f.avro", dataset_rid="ri.x.1")
    with NominalStream(wrapped, dataset_rid="ri.x.1", **FAST_RETRY) as s:
        s.enqueue("a", 1, 1.0)
        assert s.flush().fallback_points == 1
    wrapped.close()


class _SmallRequests(RecordingTarget):
    preferred_request_bytes = 64 * 1024


def test_a_target_may_prefer_a_request_size_and_a_keyword_overrides_it() -> None:
    target = _SmallRequests()
    with NominalStream(target, dataset_rid="ri.x.1", linger=None) as s:
        s.enqueue_batch("a", np.arange(20_000), np.ones(20_000))
    assert len(target.acked) > 4 and all(len(r.body) <= 64 * 1024 for r in target.acked)
    target = _SmallRequests()
    with NominalStream(target, dataset_rid="ri.x.1", linger=None, max_request_bytes=1 << 20) as s:
        s.enqueue_batch("a", np.arange(20_000), np.ones(20_000))
    assert len(target.acked) == 1


def _deliver_through_outage(outage: float, jitter_draw: float) -> Outcome:
    """One request under default settings against a target that is down for ``outage`` seconds
    of an injected clock (which the backoff sleeps advance)."""
    now = [0.0]

    def sleep(d: float) -> bool:
        now[0] += d
        return False

    def down(request: Request, attempt: int) -> TargetError | None:
        if now[0] < outage:
            return TargetError("connection refused", retryable=True, code="UNAVAILABLE")
        return None

    up = Uploader(
        RecordingTarget(down),
        UploadSettings(),
        RetrySettings(),
        lambda r, o: None,
        clock=lambda: now[0],
        rand=lambda: jitter_draw,
        sleep=sleep,
    )
    return up._deliver(Request("ri.x.1", []))


@pytest.mark.parametrize(("outage", "delivered"), [(10.0, True), (60.0, True), (100.0, True), (130.0, False)])
@pytest.mark.parametrize("jitter_draw", [0.0, 0.999])
def test_default_retries_ride_out_outages_by_time_not_by_attempt_count(
    outage: float, delivered: bool, jitter_draw: float
) -> None:
    """With the default settings the time bound (120 s) decides whether an outage is ridden out, not
    an attempt count, with the worst jitter either way."""
    outcome = _deliver_through_outage(outage, jitter_draw)
    assert outcome.acknowledged is delivered, outcome
    if not delivered:
        assert "120.0s retry budget" in outcome.reason


def test_retry_settings_need_a_bound_and_an_attempt_cap_is_still_honoured() -> None:
    with pytest.raises(ValueError, match="retried for ever"):
        RetrySettings(max_attempts=None, total_timeout=None)
    assert RetrySettings().max_attempts is None and RetrySettings().total_timeout == 120.0
    target = RecordingTarget(unavailable(10))
    up = Uploader(
        target, UploadSettings(), RetrySettings(max_attempts=3, initial_backoff=0.0, max_backoff=0.0), lambda r, o: None
    )
    outcome = up._deliver(Request("ri.x.1", []))
    assert not outcome.acknowledged and "gave up after 3 attempts" in outcome.reason


def test_a_refusal_naming_batches_the_request_does_not_have_splits_nothing() -> None:
    """Indices past the request's batches mean the naming is not about this request: the whole
    request fails with the server's reason, nothing is re-sent as if some batches were fine."""
    sent: list[int] = []

    class Target(RecordingTarget):
        def send(self, request: Request, timeout: float | None = None) -> None:
            sent.append(len(request.batches))
            raise TargetError("refused", retryable=False, code="HTTP 400", rejected={0: "bad", 99: "bad"})

    s = NominalStream(Target(), dataset_rid="ri.x.1", linger=None)
    s.enqueue("a", 1, 1.0)
    s.enqueue("b", 1, 2.0)
    with pytest.raises(DeliveryError) as info:
        s.close()
    assert sent == [2]  # one attempt, not split
    assert info.value.undelivered == {SeriesKey("a"): 1, SeriesKey("b"): 1}
    assert info.value.rejected == {}


def test_a_request_written_off_at_close_is_not_also_sent_to_the_fallback() -> None:
    attempted = threading.Event()
    down = unavailable(10**9)

    def fail(request: object, attempt: int) -> object:
        attempted.set()
        return down(request, attempt)  # type: ignore[arg-type]

    primary = RecordingTarget(fail=fail)  # type: ignore[arg-type]
    fallback = RecordingTarget()
    s = NominalStream(
        primary,
        dataset_rid="ri.x.1",
        fallback=fallback,
        linger=None,
        initial_backoff=2.0,
        max_backoff=2.0,
        jitter=0.0,
    )
    s.enqueue_batch("a", [1, 2, 3], [1.0, 2.0, 3.0])
    s._sender.cut_and_register(final=True)
    s._sender.submit(s._sender.take_submits())
    assert attempted.wait(5)  # the first attempt failed; the worker now waits 2 s to retry
    with pytest.raises(Exception, match="close timed out"):
        s.close(timeout=0.3)
    assert s.report().failed_points == 3
    for t in threading.enumerate():  # the woken worker ends its job, then its thread exits
        if t.name.startswith("beam-nominal-upload"):
            t.join(10)
            assert not t.is_alive()
    assert fallback.points() == {}, "reported failed, yet stored in the fallback"
