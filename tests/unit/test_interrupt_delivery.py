"""A Ctrl+C the handler deferred (it landed inside stream code) reaches the main thread, whatever
the main thread does next: not raised in a writer thread that next passes a stream's gate while
the main thread polls ``report()`` and runs on, and not lost when a dropped stream's finaliser
drained in the main thread, which then never touches a stream again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from typing import Any

import pytest
from _stream_fakes import RecordingTarget

from beam_nominal.errors import StreamClosedError
from beam_nominal.stream import NominalStream, StreamState

pytestmark = pytest.mark.timeout(60)


def _needs_main_thread_and_default_handler() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("another SIGINT handler is installed")


class _InterruptingClock:
    """A monotonic clock that, once armed, sends SIGINT to this process from the main thread's
    next call: the stream calls it under its lock, so the interrupt lands inside stream code."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.sent = threading.Event()

    def __call__(self) -> float:
        if self.armed.is_set() and not self.sent.is_set() and threading.current_thread() is threading.main_thread():
            self.sent.set()
            os.kill(os.getpid(), signal.SIGINT)
        return time.monotonic()


def test_a_deferred_ctrl_c_reaches_the_main_thread_not_a_writer_thread() -> None:
    _needs_main_thread_and_default_handler()
    clock = _InterruptingClock()
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None, clock=clock)
    writer_ended: list[BaseException] = []
    writing = threading.Event()

    def write() -> None:
        n = 0
        try:
            while True:
                s.enqueue("a", n, float(n))
                n += 1
                writing.set()
        except BaseException as exc:  # the test looks at which one
            writer_ended.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert writing.wait(10)
    clock.armed.set()
    with pytest.raises(KeyboardInterrupt):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            s.report()  # the main thread polls the stream; the interrupt lands in here
    assert clock.sent.is_set()
    writer.join(10)
    assert len(writer_ended) == 1 and isinstance(writer_ended[0], StreamClosedError), writer_ended
    s.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _InterruptingTarget(RecordingTarget):
    """Sends SIGINT to this process on its first send (from an uploader thread), while the main
    thread waits in a drain, and acknowledges only once the handler has marked the stream."""

    def __init__(self) -> None:
        super().__init__()
        self.marked = threading.Event()

    def watch(self, s: NominalStream) -> None:
        core = s._sender
        mark = core.mark_interrupted

        def marked() -> None:
            mark()
            self.marked.set()

        core.mark_interrupted = marked  # type: ignore[method-assign]

    def send(self, request: Any, timeout: float | None = None) -> None:
        first = not self.calls
        super().send(request, timeout)
        if first:
            os.kill(os.getpid(), signal.SIGINT)
            assert self.marked.wait(10)  # the handler ran while the drain was still waiting


def test_a_ctrl_c_during_a_dropped_streams_finaliser_drain_is_raised_after_it() -> None:
    _needs_main_thread_and_default_handler()
    target = _InterruptingTarget()

    def job() -> None:
        s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
        target.watch(s)
        s.enqueue("a", 1, 1.0)
        # dropped without close(): the finaliser drains here, in the main thread

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        with pytest.raises(KeyboardInterrupt):
            job()
            threading.Event().wait(10)  # user code: the owed interrupt arrives here
    assert len(target.acked) == 1  # the drain finished first
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_after_the_first_was_raised_is_raised_too() -> None:
    _needs_main_thread_and_default_handler()
    clock = _InterruptingClock()
    s = NominalStream(RecordingTarget(), dataset_rid="ri.x.1", linger=None, clock=clock)
    clock.armed.set()
    with pytest.raises(KeyboardInterrupt):
        s.enqueue("a", 1, 1.0)  # the stream reads the clock: the press lands in here, deferred
        s.enqueue("a", 2, 2.0)  # ... and this write's gate raises it
    assert clock.sent.is_set()
    if s.state not in (StreamState.OPEN, StreamState.CLOSING):  # not drained by the handler
        pytest.skip("the watcher delivered the first press before the second write")  # microseconds
    # The caller caught it and polls on; a second press lands inside report(): no drain to cut,
    # so it owes a KeyboardInterrupt too.
    clock.sent.clear()
    with pytest.raises(KeyboardInterrupt):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            s.report()
    assert clock.sent.is_set()
    clock.armed.clear()
    assert s.close().points == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


_FRAMES_UNDER_COLLECTION = """
import gc, sys, threading
from beam_nominal._pipeline import interrupt

main = threading.main_thread()
stop = threading.Event()

class Holder:
    pass

def waiting(depth):
    return waiting(depth - 1) if depth else stop.wait()

for _ in range(20):  # threads whose frames sys._current_frames makes under its lock
    threading.Thread(target=waiting, args=(5,), daemon=True).start()
gc.set_threshold(5, 1, 1)  # a collection every few objects, of every generation
for _ in range(2000):
    for _ in range(3):  # garbage holding a threading.local, freed by whichever collection runs
        holder = Holder()
        holder.local, holder.me = threading.local(), holder
    interrupt._frame_of(main.ident)
print("done")
"""


def test_the_watcher_reads_the_main_threads_frame_whatever_the_collector_frees() -> None:
    # The watcher reads the main thread's frame with sys._current_frames, which in CPython 3.11.7
    # hangs the process for good if a collection it triggers frees a threading.local (CPython
    # gh-106883). Without the collector paused this child never ends.
    done = subprocess.run(
        [sys.executable, "-c", _FRAMES_UNDER_COLLECTION], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.split() == ["done"]
