"""Large arrays whose memory is reused once nothing refers to it any more.

A stream makes request-sized arrays over and over: each series' chunks joined when a request is
cut, the rows of a double-array tail packed into one matrix. They live until their request is
acknowledged, so a thread's scratch (``_wire/scratch.py``) cannot hold them. Made fresh, each one
costs more in the kernel than in our code: glibc hands large freed blocks back to the kernel and
numpy asks for huge pages for them, so every new one is faulted in and zeroed again (float_array_64
through HTTP, the client's CPU a point, medians of 30 runs: ~2,300 ns, ~1,150 of it the kernel's;
docs/benchmarks.md, "session 26").

:func:`empty` takes such an array's memory from a block of this module's pool, an anonymous
memory mapping. The array is made over the mapping (``numpy.frombuffer``), so every view numpy
makes of it refers to that array, not to the mapping (numpy collapses a view's base only through
arrays that are themselves views of arrays): when the last of them is gone, a weak reference's
callback puts the block back in the pool. Nothing that still sees the memory can see it reused
(what holds ``array.base`` itself, the mapping, would: nothing here does). Small arrays are plain
``numpy.empty``. The pool keeps at most 64 MiB of idle blocks.
"""

from __future__ import annotations

import mmap
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_BYTES", "empty"]

#: Arrays smaller than this come from malloc's heap, which reuses them without the kernel.
MIN_BYTES = 1 << 20
#: Blocks are sized in powers of two from MIN_BYTES up to this; a larger array is made fresh.
_MAX_BLOCK = 1 << 26



class _Pool:
    """Idle blocks by size, and the block of every array lent out.

    Releases run wherever the last view of an array happens to be dropped, on any thread, so
    nothing here takes a lock (a release could wait for one its own thread holds): dict and
    list operations are atomic under the GIL, and ``idle`` has every size from the start, so it
    never changes size while another thread reads it. The array's weak reference, not
    ``weakref.finalize``: finalizers run at interpreter exit for arrays still alive (while daemon
    threads may use them) and share one registry that exit iterates.
    """

    #: Most bytes of idle blocks kept, all sizes together (a stream's requests of 8 MiB use
    #: blocks of 16 MiB: four of them), and most idle blocks of one size. Without a lock the
    #: bound can be passed by a block when two threads give one back at the same moment.
    IDLE_BYTES = 64 << 20
    KEEP = 4

    def __init__(self) -> None:
        sizes = range(MIN_BYTES.bit_length() - 1, _MAX_BLOCK.bit_length())
        self.idle: dict[int, list[mmap.mmap]] = {1 << k: [] for k in sizes}
        #: id of the weak reference to each array lent -> (that reference, its block); by id:
        #: a reference to an ndarray cannot be hashed.
        self.lent: dict[int, tuple[weakref.ref[Any], mmap.mmap]] = {}

    def empty(self, count: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        size = 1 << max(count * dtype.itemsize - 1, 1).bit_length()
        try:
            block = self.idle[size].pop()
        except IndexError:
            # An anonymous mapping of its own, not numpy's allocation: numpy asks for huge pages
            # for 4 MiB and more, which would make a block that is partly written resident in
            # whole 2 MiB pages; a block dropped from the pool is unmapped at once.
            block = mmap.mmap(-1, size)
        out = np.frombuffer(block, dtype=dtype, count=count)
        ref = weakref.ref(out, self.release)
        self.lent[id(ref)] = (ref, block)
        return out

    def release(self, ref: weakref.ref[Any]) -> None:
        block = self.lent.pop(id(ref))[1]
        size = len(block)
        idle = self.idle[size]
        if len(idle) < self.KEEP and sum(s * len(b) for s, b in self.idle.items()) + size <= self.IDLE_BYTES:
            idle.append(block)


_POOL = _Pool()


def empty(count: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
    """A 1-D array of ``count`` items of ``dtype``, uninitialised, like ``numpy.empty``; its
    memory comes from a reused block when it is large (see the module's docstring)."""
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or nbytes > _MAX_BLOCK:
        return np.empty(count, dtype=dtype)
    return _POOL.empty(count, dtype)
