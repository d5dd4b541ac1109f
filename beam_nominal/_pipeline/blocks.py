"""Large arrays whose memory is reused once nothing refers to it any more.

A stream makes request-sized arrays over and over: each series' chunks joined when a request is
cut, the rows of a double-array tail packed into one matrix. They live until their request is
acknowledged, so a thread's scratch (``_wire/scratch.py``) cannot hold them. Made fresh, each one
costs more in the kernel than in our code: glibc hands large freed blocks back to the kernel and
numpy asks for huge pages for them, so every new one is faulted in and zeroed again (float_array_64
through HTTP, the client's CPU a point, medians of 30 runs: ~2,300 ns, ~1,150 of it the kernel's;
docs/benchmarks.md, "session 26").

:func:`empty` takes such an array's memory from a block of this module's pool. The array is a view
of its block through a ``memoryview`` (``block.data``), so every view numpy makes of it refers to that array, not
to the block (numpy collapses a view's base only through arrays that are themselves views of
arrays): when the last of them is gone, a finalizer puts the block back in the pool. Nothing
that still sees the memory can see it reused. Small arrays are plain ``numpy.empty``.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_BYTES", "empty"]

#: Arrays smaller than this come from malloc's heap, which reuses them without the kernel.
MIN_BYTES = 1 << 20
#: Blocks are sized in powers of two from MIN_BYTES up to this; a larger array is made fresh.
_MAX_BLOCK = 1 << 26
#: Idle blocks kept per size: up to four, and no more than 32 MiB of them (one of 64 MiB), so
#: the pool holds at most ~190 MiB however a process's requests are sized, ~32 MiB for one stream.
_IDLE_BYTES = 32 << 20
_KEEP = 4

# size -> idle blocks. list.pop and list.append are atomic under the GIL: no lock, so that the
# finalizer, which runs wherever the last view happens to be dropped, never waits for one.
_IDLE: dict[int, list[npt.NDArray[np.uint8]]] = {}


def _block_size(nbytes: int) -> int:
    return 1 << max(nbytes - 1, 1).bit_length()


def _give_back(block: npt.NDArray[np.uint8], idle: list[npt.NDArray[np.uint8]], keep: int) -> None:
    if len(idle) < keep:
        idle.append(block)


def empty(count: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
    """A 1-D array of ``count`` items of ``dtype``, uninitialised, like ``numpy.empty``; its
    memory comes from a reused block when it is large (see the module's docstring)."""
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or nbytes > _MAX_BLOCK:
        return np.empty(count, dtype=dtype)
    size = _block_size(nbytes)
    idle = _IDLE.setdefault(size, [])
    try:
        block = idle.pop()
    except IndexError:
        block = np.empty(size, dtype=np.uint8)
    out = np.frombuffer(block.data, dtype=dtype, count=count)
    # Not at exit: atexit would give back blocks still in use while daemon threads may run.
    weakref.finalize(out, _give_back, block, idle, max(1, min(_KEEP, _IDLE_BYTES // size))).atexit = False
    return out
