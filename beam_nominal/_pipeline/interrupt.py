"""Ctrl+C while streams are open: never torn state, never a hang, buffered points drained.

Python runs a SIGINT handler in the main thread between any two bytecodes. A
``KeyboardInterrupt`` raised there can land after ``lock.acquire()`` and before the ``try`` that
releases it (the lock is then held for ever: uploader threads block in their completion callback
and ``close`` blocks), or half-way through an update of a series' columns (close then writes the
series off). So the one handler here never raises while the main thread is inside the code that
holds stream state; it marks every open stream interrupted and returns, and the stream raises
``KeyboardInterrupt`` itself at a point where its state is whole: the gate of the next write, the
next slice of a wait (``POLL`` seconds), or the end of ``close()``. When the interrupt lands in
the user's own code, the handler drains every open stream first (bounded by its
``close_timeout``) and raises at once, as Python's default handler would. A second Ctrl+C while
a stream drains cuts the drain short (its unacknowledged points are reported undelivered).

The handler is installed by the first stream opened in the main thread while SIGINT has Python's
default handler, and put back when the last stream closes; with no open stream it behaves as the
default handler does.

A deferred Ctrl+C is owed to the main thread, as Python raises ``KeyboardInterrupt`` only there:
a stream raises it only in the main thread (other threads' writes see a closed stream), and a
watcher thread re-sends SIGINT to the main thread once it is back in its own code without having
raised it (it may never touch a stream again: it was polling ``report()``, draining a dropped
stream's finaliser, or opening another stream), so the handler drains and raises there.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Protocol

__all__ = ["POLL", "Interruptible", "raised", "register", "unregister"]

#: Longest a wait inside a stream goes without noticing a Ctrl+C, in seconds.
POLL = 0.05

#: Modules whose frames may hold stream state half-updated: the handler defers while any of
#: them is on the main thread's stack. Not the CLI or the server, whose loops wait in their own
#: frames for as long as they run.
_STATEFUL = (
    "beam_nominal.stream",
    "beam_nominal._pipeline.",
    "beam_nominal._wire.",
    "beam_nominal.targets.",
    "beam_nominal.model",
    "beam_nominal.beam.",
)


class Interruptible(Protocol):
    def mark_interrupted(self) -> None:
        """Called by the handler on every Ctrl+C: plain attribute stores only (no locks)."""

    def drain_interrupted(self) -> None:
        """Called by the handler when user code was interrupted: close, bounded, never raise."""

    def interrupt_owed(self) -> bool:
        """Whether a KeyboardInterrupt for a press is still to be raised (plain reads only)."""


# Open streams by id. The handler reads it with one ``list(...)`` (atomic in CPython) and never
# takes _lock, so an interrupt that lands while the main thread holds _lock cannot deadlock.
_open: dict[int, weakref.ref[Interruptible]] = {}
_lock = threading.Lock()

#: A Ctrl+C was deferred and no KeyboardInterrupt has reached the main thread since. Plain
#: stores only (the handler sets it between any two bytecodes).
_owed = False
#: The watcher sent SIGINT and its handler has not run yet (so it is not counted as a press).
_resent = False
#: A watcher thread is running.
_watching = False
#: Seconds the watcher outlives the last open stream.
_LINGER = 1.0


def raised() -> None:
    """The main thread is raising the owed KeyboardInterrupt (a stream's gate, wait or close)."""
    global _owed
    _owed = False


def register(stream: Interruptible) -> None:
    """Track an open stream; installs the handler when called from the main thread while SIGINT
    has Python's default handler."""
    global _resent
    with _lock:
        _open[id(stream)] = weakref.ref(stream)
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            # A watcher's SIGINT the default handler took must not make a press look re-sent.
            _resent = False
            signal.signal(signal.SIGINT, _on_sigint)
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            _start_watcher()


def unregister(stream: Interruptible) -> None:
    """Forget a closed stream; the last one out puts Python's default handler back (if it is
    still ours and this is the main thread)."""
    with _lock:
        _open.pop(id(stream), None)
        if (
            not _open
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is _on_sigint
        ):
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _in_stateful_code(frame: FrameType | None) -> bool:
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if isinstance(name, str) and name.startswith(_STATEFUL):
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _owed, _resent
    resent, _resent = _resent, False
    if resent and not _owed:
        return  # the watcher's SIGINT, but a stream raised the owed interrupt meanwhile
    streams = [s for ref in list(_open.values()) if (s := ref()) is not None]
    if _in_stateful_code(frame):
        if resent:
            return  # back in stream code: its gate raises, or the watcher sends again
        if streams:
            for s in streams:
                s.mark_interrupted()
            if any(s.interrupt_owed() for s in streams):
                _owed = True  # the watcher sends SIGINT again once the main thread is outside
            return  # the stream raises it once its state is whole (or the press only cut a drain)
        raise KeyboardInterrupt
    _owed = False
    if not resent:  # a press (the watcher's SIGINT only delivers one already counted)
        for s in streams:
            s.mark_interrupted()
    for s in streams:
        s.drain_interrupted()
    raise KeyboardInterrupt


def _start_watcher() -> None:
    """With ``_lock`` held, in the main thread's ordinary code (never from the handler, which
    takes no lock: the main thread may hold any lock it interrupted)."""
    global _watching
    if not _watching:
        _watching = True
        threading.Thread(target=_watch_loop, name="beam-nominal-sigint", daemon=True).start()


def _frame_of(ident: int) -> FrameType | None:
    """A thread's current frame. ``sys._current_frames`` holds the interpreter's thread-list lock
    while it makes frame objects; in CPython releases without the fix of gh-106883 (3.11.7 among
    them) a collection they trigger may free a ``threading.local``, whose clearing takes that
    lock too, and the process hangs for good with the GIL held (seen in CI, in the Ctrl+C tests).
    So the collector is paused around the call, as that fix does, if it was running (a thread
    that disables it in those few bytecodes finds it enabled again: a rare, harmless loss, where
    the hang loses the process)."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return sys._current_frames().get(ident)
    finally:
        if paused:
            gc.enable()


def _watch_loop() -> None:
    """While streams are open: whenever a Ctrl+C is owed and the main thread is outside stream
    code, send SIGINT to the main thread. Plain reads of ``_owed`` (the handler sets it without a
    lock); lingers a second after the last stream closes, as a program may open one after another."""
    global _watching, _resent, _owed
    main = threading.main_thread()
    idle = 0.0
    while True:
        time.sleep(POLL)
        if _owed and main.ident is not None:
            frame = _frame_of(main.ident)
            if frame is not None and not _in_stateful_code(frame):
                if signal.getsignal(signal.SIGINT) is _on_sigint:
                    _resent = True
                else:
                    _owed = False  # the last stream closed and put the default handler back: it raises
                if hasattr(signal, "pthread_kill"):
                    signal.pthread_kill(main.ident, signal.SIGINT)  # a real signal: ends a blocking call
                else:  # pragma: no cover - Windows
                    import _thread

                    _thread.interrupt_main()
                time.sleep(POLL)  # let the handler run before looking again
                continue
        if _open or _owed:
            idle = 0.0
            continue
        idle += POLL
        if idle >= _LINGER:
            with _lock:
                if not _open and not _owed:
                    _watching = False
                    return
