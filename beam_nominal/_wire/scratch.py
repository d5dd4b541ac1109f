"""Byte buffers a thread reuses from one request to the next (the Avro and row encoders').

Request-sized arrays that are fresh each time cost more in first-touch page faults than the
encoding itself (measured ~2 us per 4 KiB page on this kind of VM: ~5 ms per 8 MiB request), so
encoders take their largest temporaries from their thread's scratch buffers instead. Each buffer
only grows, up to ``_KEEP_MAX``: one larger is made fresh and not kept, so one huge request does
not pin its memory in the thread. A buffer is valid until the thread's next use of its name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

join_into: Callable[[list[Any], Any], int] | None
try:
    from beam_nominal._pipeline._fastpath import join_into
except ImportError:  # built without the C extension: every join makes a new bytes object
    join_into = None

__all__ = ["Scratch", "joined_transient", "thread_scratch"]

U8 = npt.NDArray[np.uint8]


class Scratch:
    """One thread's byte buffers by name (see the module's docstring)."""

    def __init__(self) -> None:
        self._bufs: dict[str, U8] = {}

    def get(self, name: str, size: int) -> U8:
        buf = self._bufs.get(name)
        if buf is None or buf.shape[0] < size:
            buf = np.empty(size + size // 4, dtype=np.uint8)
            if buf.shape[0] <= _KEEP_MAX:
                self._bufs[name] = buf
            else:
                self._bufs.pop(name, None)
        return buf[:size]


_KEEP_MAX = 64 << 20
_LOCAL = threading.local()


def thread_scratch() -> Scratch:
    """This thread's scratch buffers, shared by every target the thread sends to."""
    scratch: Scratch | None = getattr(_LOCAL, "scratch", None)
    if scratch is None:
        scratch = _LOCAL.scratch = Scratch()
    return scratch


def joined_transient(parts: list[Any], size: int, name: str) -> bytes | memoryview:
    """``b"".join(parts)`` (``size`` bytes in all), written into this thread's scratch buffer
    ``name``: valid until the thread's next use of that name, so for a body that is digested and
    compressed at once.

    The bytes object a join makes is as large as the request and fresh each time (glibc hands
    such blocks back to the kernel when they are freed); filling a reused buffer instead cut the
    client's CPU a point on float_array_64 by ~1/6 (docs/benchmarks.md, "session 24"). Without
    the C extension, the join itself.
    """
    if join_into is None:
        return b"".join(parts)
    buf = thread_scratch().get(name, size)
    if join_into(parts, buf) != size:
        raise AssertionError(f"joined parts are not {size} bytes")
    return buf.data
