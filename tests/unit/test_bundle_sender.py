"""Bundle senders: one per bundle over a DoFn instance's target and uploader (WriteToNominal
opens one per bundle); the uploader's threads are shared, each sender stops on its own, and
none touches the process's SIGINT handler."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from beam_nominal._pipeline import interrupt, uploader
from beam_nominal._pipeline.staging import PointBatch
from beam_nominal._pipeline.uploader import Uploader
from beam_nominal.beam._dofn import SinkConfig, WriteDoFn
from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.settings import resolve
from beam_nominal.stream import Sender, bundle_sender
from beam_nominal.targets.avro import read_avro_file
from beam_nominal.targets.compose import with_fallback
from tests.unit._stream_fakes import BlockingTarget, RecordingTarget, permanent


def _sender(target: object, up: Uploader, rid: str, **settings: object) -> Sender:
    return bundle_sender(target, up, rid, resolve(**settings), PointBatch())  # type: ignore[arg-type]


def _uploader(target: object, size: int = 2, **settings: object) -> Uploader:
    s = resolve(max_in_flight=size, **settings)
    return Uploader(target, s.upload, s.retry)  # type: ignore[arg-type]


def test_senders_on_one_uploader_start_no_threads_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []

    class CountingThread(threading.Thread):
        def start(self) -> None:
            started.append(self.name)
            super().start()

    monkeypatch.setattr(uploader.threading, "Thread", CountingThread)
    target = RecordingTarget()
    up = _uploader(target)
    try:
        for i in range(50):  # fifty bundles
            sender = _sender(target, up, "ri.x")
            sender.staged.add_series(f"c{i % 3}", np.arange(10, dtype=np.int64) + 10 * i, np.ones(10))
            sender.handover()
            assert sender.flush(None).points == 10
            sender.close(None)
        assert 1 <= len(started) <= 2, started
    finally:
        up.shutdown()
    assert sum(len(pts) for pts in target.points().values()) == 500


def test_abandoning_one_sender_leaves_another_on_the_same_uploader_delivering() -> None:
    stuck = BlockingTarget()  # never answers until released
    up = _uploader(stuck)
    try:
        a = _sender(stuck, up, "ri.a")
        a.staged.add_point("x", 1, 1.0, None)
        a.handover()
        a.cut_and_register(final=True)
        a.submit(a.take_submits())
        # a's request occupies one thread until its attempt deadline; closing with timeout 0
        # writes it off and stops a's retries, not the uploader.
        with pytest.raises(DeliveryError, match="timed out"):
            a.close(0)
        b = _sender(stuck, up, "ri.b")
        stuck.release.set()
        b.staged.add_point("y", 2, 2.0, None)
        assert b.flush(10).points == 1
        b.close(None)
    finally:
        stuck.release.set()
        up.shutdown()


def test_a_sender_retrying_stops_when_closed_and_frees_the_thread() -> None:
    attempted = threading.Event()

    def fail(request: object, n: int) -> TargetError:
        attempted.set()
        return TargetError("down", retryable=True)

    failing = RecordingTarget(fail=fail)
    up = _uploader(failing, size=1, initial_backoff=30.0, max_backoff=30.0)
    s = _sender(failing, up, "ri.x")
    try:
        s.staged.add_point("x", 1, 1.0, None)
        flushing = threading.Thread(target=_quietly, args=(s.flush, 30.0), daemon=True)
        flushing.start()
        assert attempted.wait(10)  # the request failed once and now waits 30 s to retry
        # Closing ends that wait at once (the sender's own stop), freeing the only thread of
        # the uploader for the next bundle.
        _quietly(s.close, 0.5)
        failing.fail = None  # the target is back
        b = _sender(failing, up, "ri.y")
        b.staged.add_point("y", 2, 2.0, None)
        assert b.flush(10).points == 1
        flushing.join(10)
        assert not flushing.is_alive()
    finally:
        up.shutdown()


def test_a_bundle_opens_no_stream_and_installs_no_sigint_handler() -> None:
    """WriteToNominal's bundles run inside a runner's worker: the handler is the runner's."""
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT)
    target = RecordingTarget()
    fn = WriteDoFn(SinkConfig(target=lambda: target, dataset_rid="ri.x"))
    fn.setup()
    try:
        for bundle in range(3):
            fn.start_bundle()
            assert signal.getsignal(signal.SIGINT) is before and not interrupt._open
            assert list(fn.process(("c", bundle + 1, 1.5))) == []
            assert fn.finish_bundle() is None
            assert signal.getsignal(signal.SIGINT) is before and not interrupt._open
    finally:
        fn.teardown()
    assert [p for pts in target.points().values() for p in pts] == [(1, 1.5), (2, 1.5), (3, 1.5)]


def _quietly(call: Callable[[float], object], timeout: float) -> None:
    with contextlib.suppress(DeliveryError):  # the written-off point, which the test expects
        call(timeout)


def _points(channel: str, n: int, channels: int = 300) -> list[tuple[str, int, float]]:
    return [(f"{channel}{k % channels}", 10**18 + k, float(k)) for k in range(n)]


def test_tearing_down_a_failed_bundle_sends_nothing_it_had_not_sent() -> None:
    """A bundle whose process raised is torn down and retried elsewhere: whatever it still
    buffered must not be sent, since those requests are not the ones the retry cuts (their
    points would be stored twice). Everything it sent is a request the retry sends too."""
    settings = {"max_request_points": 100, "max_in_flight": 4}
    elements = _points("c", 30_000)
    retried = RecordingTarget()
    fn = WriteDoFn(SinkConfig(target=lambda: retried, dataset_rid="ri.x", settings=settings))
    fn.setup()
    fn.start_bundle()
    for e in elements:
        fn.process(e)
    fn.finish_bundle()
    fn.teardown()
    keys_of_the_retry = {r.key for r in retried.acked}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # idle upload threads take a submitted request at once
    try:
        for _ in range(3):
            failed = RecordingTarget()
            fn = WriteDoFn(SinkConfig(target=lambda: failed, dataset_rid="ri.x", settings=settings))  # noqa: B023
            fn.setup()
            fn.start_bundle()
            fn.process(("warm", 1, 1.0))
            fn.finish_bundle()  # the upload threads now wait, idle
            fn.start_bundle()
            for e in elements[:15_000]:
                fn.process(e)
            fn.teardown()  # process raised: the runner shuts the instance down
            sent = {c[1] for c in failed.calls if c[0].points and "warm" not in {k.channel for k in _keys(c[0])}}
            assert sent <= keys_of_the_retry, f"{len(sent - keys_of_the_retry)} requests the retry never sends"
    finally:
        sys.setswitchinterval(interval)


def _keys(request: object) -> set[SeriesKey]:
    return {b.key for b in request.batches}  # type: ignore[attr-defined]


def test_a_bundle_left_open_is_ended_by_the_next_start_bundle() -> None:
    """A runner that keeps an instance after a bundle failed calls start_bundle again: the
    failed bundle's requests not yet sending are written off, not sent under the new bundle."""
    target = BlockingTarget()
    target.release.set()  # first contact answers
    settings = {"max_request_points": 100, "max_in_flight": 1}
    fn = WriteDoFn(SinkConfig(target=lambda: target, dataset_rid="ri.x", settings=settings))
    fn.setup()
    target.release.clear()
    try:
        fn.start_bundle()
        for e in _points("a", 40_000):  # more than a hand-over: requests are cut and submitted
            fn.process(e)
        assert target.entered.wait(10)  # one request of the bundle is sending, the rest wait
        fn.start_bundle()  # no finish_bundle: process raised
        target.release.set()
        for e in _points("b", 1_000):
            fn.process(e)
        fn.finish_bundle()
    finally:
        target.release.set()
        fn.teardown()
    got = target.points()
    a_points = sum(len(v) for k, v in got.items() if k.channel.startswith("a"))
    b_points = sum(len(v) for k, v in got.items() if k.channel.startswith("b"))
    assert b_points == 1_000
    assert a_points <= 100, f"{a_points} points of the ended bundle were sent after it ended"


def test_a_fallback_target_takes_what_the_primary_refuses_under_the_dofn(tmp_path: Path) -> None:
    primary = RecordingTarget(permanent)
    wrapped = with_fallback(primary, tmp_path / "fallback.avro", dataset_rid="ri.x")
    fn = WriteDoFn(SinkConfig(target=lambda: wrapped, dataset_rid="ri.x"))
    fn.setup()
    try:
        fn.start_bundle()
        for e in _points("c", 10):
            fn.process(e)
        assert fn.finish_bundle() is None  # delivered: to the fallback
    finally:
        fn.teardown()
        wrapped.close()
    assert primary.calls and not primary.acked
    assert sum(len(series.values) for series in read_avro_file(tmp_path / "fallback.avro").values()) == 10
