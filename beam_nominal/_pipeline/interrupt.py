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
"""

from __future__ import annotations

import signal
import threading
import weakref
from types import FrameType
from typing import Protocol

__all__ = ["POLL", "Interruptible", "register", "unregister"]

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


# Open streams by id. The handler reads it with one ``list(...)`` (atomic in CPython) and never
# takes _lock, so an interrupt that lands while the main thread holds _lock cannot deadlock.
_open: dict[int, weakref.ref[Interruptible]] = {}
_lock = threading.Lock()


def register(stream: Interruptible) -> None:
    """Track an open stream; installs the handler when called from the main thread while SIGINT
    has Python's default handler."""
    with _lock:
        _open[id(stream)] = weakref.ref(stream)
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            signal.signal(signal.SIGINT, _on_sigint)


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
    streams = [s for ref in list(_open.values()) if (s := ref()) is not None]
    if not streams:
        raise KeyboardInterrupt
    for s in streams:
        s.mark_interrupted()
    if _in_stateful_code(frame):
        return  # the stream raises KeyboardInterrupt once its state is whole again
    for s in streams:
        s.drain_interrupted()
    raise KeyboardInterrupt
