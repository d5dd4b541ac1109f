"""Keep freed memory in the process for reuse: for the ``beam-nominal serve`` process only.

Each request allocates a few request-sized arrays (decoded columns, the commit table). With
glibc's defaults, blocks that large are mmapped, or trimmed back to the kernel when freed, so
every request faults its pages in afresh, and the faults can cost more than the decoding.
Raising the mmap and trim thresholds makes freed blocks serve the next request. The cost is that
the process keeps its peak heap, which for a server is a few in-flight requests' worth.

Not applied to an embedded ``LocalServer``: it would change malloc for the host process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory"]

# mallopt parameters (glibc malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc caps the mmap threshold at 32 MiB on 64-bit (HEAP_MAX_SIZE / 2); larger values fail.
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; True if applied (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success.
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
