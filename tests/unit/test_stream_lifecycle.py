"""States, close bounds, draining on exceptions, finaliser, SIGINT, backpressure, linger."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import warnings

import numpy as np
import pytest
from _stream_fakes import BlockingTarget, RecordingTarget, permanent

from beam_nominal.errors import BackpressureError, DeliveryError, StreamClosedError
from beam_nominal.model import SeriesKey
from beam_nominal.stream import NominalStream, StreamState


def test_states_and_writes_after_close() -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    assert s.state is StreamState.OPEN
    s.enqueue("a", 1, 1.0)
    report = s.close()
    assert s.state is StreamState.CLOSED and report.points == 1
    for write in (
        lambda: s.enqueue("a", 2, 2.0),
        lambda: s.enqueue_batch("a", [3], [3.0]),
        lambda: s.enqueue_from_dict(4, {"a": 4.0}),
        lambda: s.enqueue_float_array("f", 5, [1.0]),
        lambda: s.enqueue_struct("st", 5, {"a": 1}),
    ):
        with pytest.raises(StreamClosedError, match="closed"):
            write()
    assert isinstance(StreamClosedError("x"), RuntimeError)
    assert s.close() == report  # idempotent
    assert target.points() == {SeriesKey("a"): [(1, 1.0)]}


def test_close_is_bounded_against_a_target_that_never_answers() -> None:
    target = BlockingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None, attempt_timeout=30.0)
    s.enqueue_batch("a", np.arange(10), np.ones(10))
    s.enqueue("b", 1, "x")
    with pytest.raises(DeliveryError, match=r"close timed out after 0\.2s") as info:
        s.close(timeout=0.2)
    assert info.value.undelivered == {SeriesKey("a"): 10, SeriesKey("b"): 1}
    assert s.state is StreamState.FAILED
    assert target.entered.is_set()
    target.release.set()  # the late acknowledgement must not change what was reported
    assert s.close().failed_points == 11


def test_leaving_with_on_an_exception_drains_and_propagates_the_original() -> None:
    target = RecordingTarget()
    with pytest.raises(ZeroDivisionError), NominalStream(target, dataset_rid="ri.x.1", linger=None) as s:
        s.enqueue("a", 1, 1.0)
        1 / 0  # noqa: B018
    assert s.state is StreamState.CLOSED
    assert target.points() == {SeriesKey("a"): [(1, 1.0)]}


def test_delivery_failure_while_an_exception_propagates_is_attached_as_a_note() -> None:
    with pytest.raises(KeyError) as info, NominalStream(RecordingTarget(permanent), dataset_rid="ri.x.1") as s:
        s.enqueue("a", 1, 1.0)
        raise KeyError("original")
    assert any("1 points of 1 series were not delivered" in n for n in info.value.__notes__)


def test_dropped_stream_drains_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=0.5)
    s.enqueue("a", 1, 1.0)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("WARNING", logger="beam_nominal.stream"):
        warnings.simplefilter("always")
        del s
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    # Python's default filters hide ResourceWarning; the log shows it.
    assert any("dropped without close()" in r.getMessage() for r in caplog.records)
    assert target.points() == {SeriesKey("a"): [(1, 1.0)]}


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_sigint_stops_writes_drains_then_raises_and_restores_the_handler() -> None:
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("another SIGINT handler is installed")
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    s.enqueue("a", 1, 1.0)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait(5)  # the handler raises before this returns
    assert s.state is StreamState.CLOSED
    assert target.points() == {SeriesKey("a"): [(1, 1.0)]}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(StreamClosedError):
        s.enqueue("a", 2, 2.0)


def _interrupt_main_when(event: threading.Event, times: int = 1, between: threading.Event | None = None) -> None:
    """From another thread: once ``event`` is set, send SIGINT to this process ``times`` times
    (waiting for ``between`` after the first, so the signals do not coalesce)."""

    def run() -> None:
        assert event.wait(10)
        os.kill(os.getpid(), signal.SIGINT)
        if times > 1:
            assert between is not None and between.wait(10)
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=run, daemon=True).start()


def _needs_main_thread_and_default_handler() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("another SIGINT handler is installed")


def test_sigint_while_flush_waits_on_a_hung_target_interrupts_the_wait() -> None:
    _needs_main_thread_and_default_handler()
    target = BlockingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None, max_attempts=1)
    s.enqueue("a", 1, 1.0)
    _interrupt_main_when(target.entered)
    with pytest.raises(KeyboardInterrupt):
        s.flush()  # no timeout: only the signal can end it, and it lands while the flush waits
    assert s.state is StreamState.CLOSING
    target.release.set()
    assert s.close().points == 1  # the interrupted stream still drains what it buffered
    assert target.points() == {SeriesKey("a"): [(1, 1.0)]}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_during_close_drains_then_raises_and_a_second_one_cuts_the_drain() -> None:
    _needs_main_thread_and_default_handler()
    target = BlockingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None, max_attempts=1)
    s.enqueue("a", 1, 1.0)
    first_seen = threading.Event()
    core = s._sender
    mark = core.mark_interrupted

    def marked() -> None:
        mark()
        first_seen.set()

    core.mark_interrupted = marked  # type: ignore[method-assign]
    _interrupt_main_when(target.entered, times=2, between=first_seen)
    with pytest.raises(KeyboardInterrupt) as info:
        s.close(timeout=None)  # unbounded: only the second Ctrl+C ends it
    assert isinstance(info.value.__cause__, DeliveryError)
    assert "interrupted by Ctrl+C" in str(info.value.__cause__)
    assert info.value.__cause__.undelivered == {SeriesKey("a"): 1}
    assert s.state is StreamState.FAILED
    target.release.set()


def test_sigint_inside_stream_code_is_deferred_to_the_next_write() -> None:
    _needs_main_thread_and_default_handler()
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    s.enqueue("a", 1, 1.0)
    # What the handler does when the interrupt lands inside the stream: mark, raise nothing.
    s._sender.mark_interrupted()
    with pytest.raises(KeyboardInterrupt):
        s.enqueue("a", 2, 2.0)
    with pytest.raises(StreamClosedError):
        s.enqueue("a", 3, 3.0)
    assert s.close().points == 1
    assert target.points() == {SeriesKey("a"): [(1, 1.0)]}


def test_the_handler_defers_only_inside_stream_modules() -> None:
    from beam_nominal._pipeline import interrupt

    assert not interrupt._in_stateful_code(sys._getframe())
    seen: list[bool] = []

    class Probe(RecordingTarget):
        def send(self, request, timeout=None):  # type: ignore[no-untyped-def]
            seen.append(interrupt._in_stateful_code(sys._getframe()))
            super().send(request, timeout)

    with NominalStream(Probe(), dataset_rid="ri.x.1", linger=None, max_in_flight=1) as s:
        s.enqueue("a", 1, 1.0)
    assert seen == [True]  # an uploader thread's stack runs through the stream's modules


def test_sigint_handler_holds_no_strong_reference() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread")
    s = NominalStream(RecordingTarget(), dataset_rid="ri.x.1", linger=None)
    handler = signal.getsignal(signal.SIGINT)
    assert handler is not signal.default_int_handler
    core = s._sender
    refs = [c.cell_contents for c in (handler.__closure__ or ())]  # type: ignore[union-attr]
    assert s not in refs and core not in refs
    s.close()


def test_backpressure_raises_when_not_blocking() -> None:
    target = BlockingTarget()
    s = NominalStream(
        target,
        dataset_rid="ri.x.1",
        linger=None,
        max_request_bytes=1024,
        max_buffered_bytes=4096,
        block_on_full=False,
    )
    s.enqueue_batch("a", np.arange(1000), np.ones(1000))  # cut and stuck in flight
    assert target.entered.wait(5)
    with pytest.raises(BackpressureError, match="max_buffered_bytes"):
        s.enqueue("a", 2000, 1.0)
    target.release.set()
    assert s.close().points == 1000


def test_wide_records_of_long_strings_meet_backpressure() -> None:
    s = NominalStream(
        RecordingTarget(),
        dataset_rid="ri.x.1",
        linger=None,
        max_request_bytes=1 << 20,
        max_buffered_bytes=4 << 20,
        block_on_full=False,
    )
    big = "x" * 1_000_000
    try:
        with pytest.raises(BackpressureError):
            for i in range(100):  # 100 MB against a 4 MiB budget
                s.enqueue_from_dict(i, {"s": big})
    finally:
        s.close(timeout=30)


def test_backpressure_blocks_until_room() -> None:
    target = BlockingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None, max_request_bytes=1024, max_buffered_bytes=4096)
    s.enqueue_batch("a", np.arange(1000), np.ones(1000))
    done = threading.Event()

    def writer() -> None:
        s.enqueue("a", 5000, 2.0)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    assert not done.wait(0.2)  # blocked while the request is stuck
    target.release.set()
    assert done.wait(5)
    t.join()
    assert s.close().points == 1001


def test_linger_cuts_partial_buffers_by_the_injected_clock() -> None:
    now = [100.0]
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=1.0, clock=lambda: now[0])
    s.enqueue("a", 1, 1.0)
    s._sender.poll_linger()
    assert s._sender.seq == 0  # nothing cut before the linger passed
    now[0] += 1.0
    s._sender.poll_linger()
    assert s._sender.seq == 1  # the partial buffer was cut by the timer, not by flush
    assert s.flush().points == 1 and s._sender.seq == 1
    s.close()


def test_unknown_setting_is_rejected() -> None:
    with pytest.raises(TypeError, match="NominalStream got an unknown setting max_batch=3"):
        NominalStream(RecordingTarget(), dataset_rid="ri.x.1", max_batch=3)
    with pytest.raises(ValueError, match="at least twice"):
        NominalStream(RecordingTarget(), dataset_rid="ri.x.1", max_request_bytes=4096, max_buffered_bytes=4096)
