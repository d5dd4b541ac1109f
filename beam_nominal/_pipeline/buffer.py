"""Per-series columnar buffers of a stream: what is checked and waiting to be cut into requests.

Points arrive here already checked and converted, as per-series columns (the (SeriesBatch,
bytes) pairs of ``PointBatch.take()``, see ``staging.py``): numpy arrays for timestamps and
numeric values, lists for strings and arrays. A series keeps its columns as they arrived, chunks
of its points, and its type is pinned by the first. The packer takes points off in first-seen
series order (its deterministic order), joining a series' chunks once.

Single double points of many series arrive instead as loose points (``add_loose``): three
columns (series code, int ns, float) in arrival order, codes numbered by the staging batch that
made them, appended as they come with nothing made per series. The packer groups them once per
cut (one stable sort by code, which is first-seen series order), so a point costs the same over
a million series as over a hundred. A column added while loose points are pending first
spills them into their series' buffers (``_spill_loose``), so that each series keeps its arrival
order; the packer spills them too when both kinds are pending.

Nothing here is thread-safe; the stream serialises access with its lock.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal._pipeline import blocks
from beam_nominal._pipeline.sizes import double_bytes, series_overhead
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import KeyTuple, SeriesKey, ValueType, series_key

__all__ = ["Buffer", "SeriesBuffer"]

I64 = npt.NDArray[np.int64]
# ValueType.DOUBLE looked up once: Python 3.11's EnumType has a __getattr__ on every lookup.
_DOUBLE = ValueType.DOUBLE
#: Runs in code order up to which loose points are merged by timsort rather than sorted by radix.
_MERGED_RUNS = 32


class SeriesBuffer:
    """The buffered points of one series, as column chunks, plus its pinned type."""

    __slots__ = (
        "dtype",
        "key",
        "nbytes",
        "overhead",
        "points",
        "ts_chunks",
        "val_chunks",
        "vtype",
    )

    def __init__(self, key: SeriesKey, vtype: ValueType) -> None:
        self.key = key
        self.vtype = vtype
        #: numpy dtype of the value column, or None for object columns.
        self.dtype = vtype.numpy_dtype
        self.ts_chunks: list[I64] = []
        self.val_chunks: list[Any] = []
        self.points = 0
        self.nbytes = 0
        self.overhead = series_overhead(key)

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
        #: Loose points in arrival order: (codes, int ns, float64 values) column triples, all
        #: coded by ``loose_series``, a staging batch's series keys by code (double series
        #: only), which only grows while points refer to it.
        self.loose: list[tuple[I64, I64, Any]] = []
        self.loose_series: Sequence[KeyTuple] = ()
        self.loose_points = 0
        self.loose_nbytes = 0

    def add_loose(self, series: Sequence[KeyTuple], codes: I64, timestamps: I64, values: Any, nbytes: int) -> None:
        """Append single double points of many series (``codes`` index ``series``, their keys;
        arrays the buffer now owns), after everything added before."""
        if self.loose and series is not self.loose_series:
            self._spill_loose()
        self.loose_series = series
        self.loose.append((codes, timestamps, values))
        n = len(codes)
        self.loose_points += n
        self.loose_nbytes += nbytes
        self.points += n
        self.nbytes += nbytes

    def take_loose(self) -> tuple[I64, I64, Any]:
        """Remove the loose points: (codes, timestamps, values), each series' points in arrival
        order and the series in code order (a stable sort by code)."""
        loose, self.loose = self.loose, []
        self.points -= self.loose_points
        self.nbytes -= self.loose_nbytes
        self.loose_points = self.loose_nbytes = 0
        if len(loose) == 1:
            codes, ts, vals = loose[0]
        else:
            codes = np.concatenate([p[0] for p in loose])
            ts = np.concatenate([p[1] for p in loose])
            vals = np.concatenate([p[2] for p in loose])
        runs = 1 + int(np.count_nonzero(codes[1:] < codes[:-1])) if len(codes) > 1 else 1
        if runs > 1:
            # A few runs in code order (hand-overs of wide rows) merge fastest by numpy's stable
            # sort of int64, a timsort; points in arrival order by its radix sort of codes below
            # 2**16 (nearly always), in O(n).
            radix = runs > _MERGED_RUNS and len(self.loose_series) <= 65536
            order = (codes.astype(np.uint16) if radix else codes).argsort(kind="stable")
            codes, ts, vals = codes[order], ts[order], vals[order]
        return codes, ts, vals

    def put_back_loose(self, codes: I64, timestamps: I64, values: Any, nbytes: int) -> None:
        """Return the part of ``take_loose``'s points a cut left, ahead of any added since."""
        self.loose.insert(0, (codes, timestamps, values))
        n = len(codes)
        self.loose_points += n
        self.loose_nbytes += nbytes
        self.points += n
        self.nbytes += nbytes

    def _spill_loose(self) -> None:
        """Move the loose points into their series' buffers (before a column of any series, so
        that every series keeps its arrival order)."""
        series = self.loose_series
        nbytes = self.loose_nbytes
        codes, ts, vals = self.take_loose()
        self.points += len(codes)
        self.nbytes += nbytes
        ends = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        starts = [0, *ends.tolist()]
        stops = [*ends.tolist(), len(codes)]
        for start, stop, code in zip(starts, stops, codes[starts].tolist(), strict=True):
            s = self._series(series_key(series[code]), _DOUBLE)
            s.ts_chunks.append(ts[start:stop])
            s.val_chunks.append(vals[start:stop])
            s.points += stop - start
            s.nbytes += double_bytes(stop - start)

    def add(self, key: SeriesKey, vtype: ValueType, timestamps: I64, values: Any, nbytes: int) -> None:
        """Append a column chunk (a SeriesBatch's fields and its estimated bytes: values in its
        form for ``vtype``) to the series of a key whose names are already checked, created with ``vtype`` if new;
        SeriesTypeError if it exists with another type."""
        if self.loose:
            self._spill_loose()
        s = self._series(key, vtype)
        n = len(timestamps)
        s.ts_chunks.append(timestamps)
        s.val_chunks.append(values)
        s.points += n
        s.nbytes += nbytes
        self.points += n
        self.nbytes += nbytes

    def _series(self, key: SeriesKey, vtype: ValueType) -> SeriesBuffer:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = SeriesBuffer(key, vtype)
        elif s.vtype is not vtype:
            raise s.conflict(vtype.value)
        return s

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
