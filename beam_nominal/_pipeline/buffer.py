"""Per-series columnar buffers of a stream: what is checked and waiting to be cut into requests.

Points arrive here already checked and converted, as per-series chunks (``PointBatch.take()``,
see ``staging.py``): numpy chunks for timestamps and numeric values, lists for strings and arrays.
A series' type is pinned by its first chunk. The packer takes points off in first-seen series
order (its deterministic order), joining a series' chunks once.

Nothing here is thread-safe; the stream serialises access with its lock.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal._pipeline import blocks
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import SeriesKey, ValueType

__all__ = ["Buffer", "SeriesBuffer"]

#: Estimated encoded bytes of one timestamp (the fast encoder writes fixed-width timestamps).
TS_BYTES = 16
#: Estimated encoded bytes of one series' header in a request, plus its name.
SERIES_OVERHEAD = 24

I64 = npt.NDArray[np.int64]


def _tag_bytes(tags: tuple[tuple[str, str], ...]) -> int:
    """Estimated request bytes of a series' tags (part of its per-series overhead)."""
    return sum(len(k) + len(v) + 4 for k, v in tags)


class SeriesBuffer:
    """The buffered points of one series, as column chunks, plus its pinned type."""

    __slots__ = ("dtype", "key", "nbytes", "overhead", "points", "ts_chunks", "val_chunks", "vtype")

    def __init__(self, key: SeriesKey, vtype: ValueType) -> None:
        self.key = key
        self.vtype = vtype
        #: numpy dtype of the value column, or None for object columns.
        self.dtype = vtype.numpy_dtype
        self.ts_chunks: list[I64] = []
        self.val_chunks: list[Any] = []
        self.points = 0
        self.nbytes = 0
        self.overhead = SERIES_OVERHEAD + len(key.channel) + _tag_bytes(key.tags)

    def conflict(self, got: str) -> SeriesTypeError:
        return SeriesTypeError(
            f"series {self.key.describe()} is pinned to {self.vtype.value} by its first value; "
            f"got {got}. Nothing from this call was buffered."
        )

    def _consolidate(self) -> tuple[I64, Any]:
        if len(self.ts_chunks) == 1:
            return self.ts_chunks[0], self.val_chunks[0]
        ts = _joined(self.ts_chunks, self.points)
        chunks = self.val_chunks
        if self.dtype is not None:
            vals: Any = _joined(chunks, self.points)
        elif _same_width_matrices(chunks):
            vals = _joined(chunks, self.points)
        else:
            vals = [v for chunk in chunks for v in chunk]
        self.ts_chunks = [ts]
        self.val_chunks = [vals]
        return ts, vals

    def take(self, n: int) -> tuple[I64, Any, int]:
        """Remove and return the first ``n`` points: (timestamps, values, estimated bytes)."""
        ts, vals = self._consolidate()
        if n >= self.points:
            nbytes = self.nbytes
            self.ts_chunks, self.val_chunks = [], []
            self.points = 0
            self.nbytes = 0
            return ts, vals, nbytes
        nbytes = self.nbytes * n // self.points
        self.ts_chunks, self.val_chunks = [ts[n:]], [vals[n:]]
        self.points -= n
        self.nbytes -= nbytes
        return ts[:n], vals[:n], nbytes


class Buffer:
    """All series of a stream, in first-seen order (the packer's deterministic order)."""

    def __init__(self) -> None:
        self.series: dict[SeriesKey, SeriesBuffer] = {}
        self.points = 0
        self.nbytes = 0

    def add(self, key: SeriesKey, vtype: ValueType, timestamps: I64, values: Any, nbytes: int) -> None:
        """Append a column chunk (values in SeriesBatch form for ``vtype``; a ``Chunk``'s fields)
        to the series of a key whose names are already checked, created with ``vtype`` if new;
        SeriesTypeError if it exists with another type."""
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = SeriesBuffer(key, vtype)
        elif s.vtype is not vtype:
            raise s.conflict(vtype.value)
        n = len(timestamps)
        s.ts_chunks.append(timestamps)
        s.val_chunks.append(values)
        s.points += n
        s.nbytes += nbytes
        self.points += n
        self.nbytes += nbytes

    def pending(self) -> Iterator[SeriesBuffer]:
        """Series with buffered points, in first-seen order."""
        return (s for s in self.series.values() if s.points)


def _joined(chunks: list[Any], rows: int) -> Any:
    """``numpy.concatenate(chunks)`` (1-D columns, or matrices of one width, ``rows`` in all); a
    large one of chunks of one dtype in memory from :mod:`blocks`, reused once its request is
    gone."""
    first = chunks[0]
    shape = (rows, *first.shape[1:])
    size = math.prod(shape)
    if size * first.dtype.itemsize < blocks.MIN_BYTES or any(c.dtype != first.dtype for c in chunks):
        return np.concatenate(chunks)
    return np.concatenate(chunks, out=blocks.empty(size, first.dtype).reshape(shape))


def _same_width_matrices(chunks: list[Any]) -> bool:
    """Whether every chunk is a 2-D double-array column of one width (so they concatenate)."""
    widths = {c.shape[1] if isinstance(c, np.ndarray) and c.ndim == 2 else -1 for c in chunks}
    return len(widths) == 1 and -1 not in widths
