"""Byte buffers a thread reuses from one request to the next (the Avro and row encoders').

Request-sized arrays that are fresh each time cost more in first-touch page faults than the
encoding itself, so encoders take their largest temporaries from their thread's scratch buffers instead. Each buffer
only grows, up to ``_KEEP_MAX``: one larger is made fresh and not kept, so one huge request does
not pin its memory in the thread. A buffer is valid until the thread's next use of its name, and
no longer than the thread itself (see below): use it on the thread that got it, before it ends.

A thread's buffers outlive it: when it ends they go to a small process-wide pool, and the next
thread to ask for scratch takes them from there. A stream's upload threads end with the stream,
and a new stream's threads would otherwise fault in their buffers again, which glibc had just
handed back to the kernel with the old ones.
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

    def nbytes(self) -> int:
        return sum(b.shape[0] for b in self._bufs.values())

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
#: Most scratches of ended threads kept for new ones (a stream's upload threads), and most bytes
#: of them (a thread's buffers for 8 MiB requests take ~30 MiB).
_POOL_MAX = 4
_POOL_BYTES = 128 << 20
_POOL: list[Scratch] = []
_LOCAL = threading.local()


class _Lease:
    """A thread's hold on one scratch: CPython clears a thread's ``threading.local`` values when
    the thread ends, and this gives the scratch back to the pool then."""

    __slots__ = ("scratch",)

    def __init__(self) -> None:
        # list.pop and list.append are atomic under the GIL: no lock, so that __del__, which
        # may run wherever a reference is dropped, can never wait for one.
        try:
            self.scratch = _POOL.pop()
        except IndexError:
            self.scratch = Scratch()

    # Bound as defaults: at interpreter exit this may run after the module's globals are gone.
    def __del__(self, pool: list[Scratch] = _POOL, keep: int = _POOL_MAX, most: int = _POOL_BYTES) -> None:
        if len(pool) < keep and sum(s.nbytes() for s in pool) + self.scratch.nbytes() <= most:
            pool.append(self.scratch)


def thread_scratch() -> Scratch:
    """This thread's scratch buffers, shared by every target the thread sends to."""
    lease: _Lease | None = getattr(_LOCAL, "lease", None)
    if lease is None:
        lease = _LOCAL.lease = _Lease()
    return lease.scratch


def joined_transient(parts: list[Any], size: int, name: str) -> bytes | memoryview:
    """``b"".join(parts)`` (``size`` bytes in all), written into this thread's scratch buffer
    ``name``: valid until the thread's next use of that name or its end, so for a body that is digested and
    compressed at once.

    The bytes object a join makes is as large as the request and fresh each time (glibc hands
    such blocks back to the kernel when they are freed, so each one is faulted in again). Without
    the C extension, the join itself.
    """
    if join_into is None:
        return b"".join(parts)
    buf = thread_scratch().get(name, size)
    if join_into(parts, buf) != size:
        raise AssertionError(f"joined parts are not {size} bytes")
    return buf.data
