"""Upload threads shared by many short-lived streams (WriteToNominal: one stream per bundle)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import numpy as np
import pytest

from beam_nominal._pipeline import uploader
from beam_nominal._pipeline.uploader import WorkerPool
from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.stream import NominalStream
from tests.unit._stream_fakes import BlockingTarget, RecordingTarget


def test_streams_on_a_shared_pool_start_no_threads_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []

    class CountingThread(threading.Thread):
        def start(self) -> None:
            started.append(self.name)
            super().start()

    monkeypatch.setattr(uploader.threading, "Thread", CountingThread)
    pool = WorkerPool(2)
    target = RecordingTarget()
    try:
        for i in range(50):  # fifty bundles
            with NominalStream(target, dataset_rid="ri.x", workers=pool, linger=None) as stream:
                stream.enqueue_batch(f"c{i % 3}", np.arange(10, dtype=np.int64) + 10 * i, np.ones(10))
            assert stream.report().points == 10
        assert 1 <= len(started) <= 2, started
    finally:
        pool.close()
    assert sum(len(pts) for pts in target.points().values()) == 500


def test_abandoning_one_stream_leaves_another_on_the_same_pool_delivering() -> None:
    pool = WorkerPool(2)
    stuck = BlockingTarget()  # never answers until released
    fine = RecordingTarget()
    try:
        a = NominalStream(stuck, dataset_rid="ri.a", workers=pool, linger=None)
        a.enqueue("x", 1, 1.0)
        # a's request occupies one thread until its attempt deadline; closing with timeout 0
        # writes it off and stops a's retries, not the pool.
        try:
            a.close(timeout=0)
        except Exception as exc:  # DeliveryError: the point was written off
            assert "not delivered" in str(exc) or "timed out" in str(exc)
        with NominalStream(fine, dataset_rid="ri.b", workers=pool, linger=None) as b:
            b.enqueue("y", 2, 2.0)
        assert b.report().points == 1
    finally:
        stuck.release.set()
        pool.close()


def test_a_stream_retrying_on_a_shared_pool_stops_when_closed() -> None:
    pool = WorkerPool(1)
    attempted = threading.Event()

    def fail(request: object, n: int) -> TargetError:
        attempted.set()
        return TargetError("down", retryable=True)

    try:
        s = NominalStream(
            RecordingTarget(fail=fail),
            dataset_rid="ri.x",
            workers=pool,
            linger=None,
            initial_backoff=30.0,
            max_backoff=30.0,
        )
        s.enqueue("x", 1, 1.0)
        flushing = threading.Thread(target=_quietly, args=(s.flush, 30.0), daemon=True)
        flushing.start()
        assert attempted.wait(10)  # the request failed once and now waits 30 s to retry
        # Closing ends that wait at once (the stream's own stop event), freeing the only thread
        # of the pool for the next stream.
        _quietly(s.close, 0.5)
        with NominalStream(RecordingTarget(), dataset_rid="ri.y", workers=pool, linger=None, attempt_timeout=5.0) as b:
            b.enqueue("y", 2, 2.0)
        assert b.report().points == 1
        flushing.join(10)
        assert not flushing.is_alive()
    finally:
        pool.close()


def _quietly(call: Callable[[float], object], timeout: float) -> None:
    with contextlib.suppress(DeliveryError):  # the written-off point, which the test expects
        call(timeout)
