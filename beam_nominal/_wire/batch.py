"""The in-memory form of one ``ColumnBatch``: what the encoder takes and the decoder gives."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from beam_nominal.model import KeyTuple, SeriesKey, ValueType, series_key


@dataclass(frozen=True, slots=True)
class SeriesBatch:
    """All points of one series in one request, as columns.

    ``values`` by type: DOUBLE/INT64/UINT64 a 1-D ndarray of float64/int64/uint64; STRING and
    STRUCT (JSON text) a list of str; DOUBLE_ARRAY a list of 1-D float64 ndarrays, or one
    (rows, width) float64 matrix when all rows share a width; STRING_ARRAY a sequence of sequences
    of str (a list, or the row decoder's :class:`StringRows`). ``len(values) == len(timestamps)``
    always.
    """

    key: SeriesKey
    value_type: ValueType
    timestamps: npt.NDArray[np.int64]
    values: Any

    def __len__(self) -> int:
        return len(self.timestamps)


# A batch made without the frozen dataclass's __init__, which sets each field through
# object.__setattr__: the slot descriptors set them directly, which shows where thousands of
# batches are made at once.
_NEW_BATCH = SeriesBatch.__new__
_SET_KEY, _SET_TYPE, _SET_TS, _SET_VALUES = (
    SeriesBatch.__dict__[f].__set__ for f in ("key", "value_type", "timestamps", "values")
)


_DOUBLE = ValueType.DOUBLE  # looked up once: Python 3.11's EnumType runs Python code for each


def new_batch(key: SeriesKey, value_type: ValueType, timestamps: Any, values: Any) -> SeriesBatch:
    """``SeriesBatch(key, value_type, timestamps, values)``, for fields already in its form."""
    b = _NEW_BATCH(SeriesBatch)
    _SET_KEY(b, key)
    _SET_TYPE(b, value_type)
    _SET_TS(b, timestamps)
    _SET_VALUES(b, values)
    return b


class DoubleBatches(Sequence[SeriesBatch]):
    """The batches of many double series, as columns: each series' key (a SeriesKey or a
    :data:`~beam_nominal.model.KeyTuple`) and point count, and one timestamps and one values
    column holding every series' points back to back, in key order.

    It reads as a sequence of :class:`SeriesBatch` (each made when read, its columns views of
    these), so every encoder takes it; what reads many series at once (the Avro encoder, the
    stream's counters) reads the columns whole, with no object made per series. The packer cuts
    single points of many series into these.
    """

    __slots__ = ("counts", "keys", "starts", "timestamps", "values")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self, keys: list[KeyTuple], counts: npt.NDArray[np.int64], timestamps: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
    ) -> None:
        if len(keys) != len(counts) or int(counts.sum()) != len(timestamps) or len(values) != len(timestamps):
            raise ValueError(
                f"{len(keys)} keys, {len(counts)} counts summing to {int(counts.sum())}, "
                f"{len(timestamps)} timestamps and {len(values)} values do not match"
            )
        if len(counts) and int(counts.min()) < 0:
            raise ValueError(f"a negative point count ({int(counts.min())}) in the counts of {len(keys)} series")
        self.keys = keys
        self.counts = counts
        #: Where each series' points start in the columns.
        self.starts = np.cumsum(counts) - counts
        self.timestamps = timestamps
        self.values = values

    @property
    def points(self) -> int:
        return len(self.timestamps)

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> SeriesBatch: ...

    @overload
    def __getitem__(self, index: slice) -> list[SeriesBatch]: ...

    def __getitem__(self, index: int | slice) -> SeriesBatch | list[SeriesBatch]:
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(len(self.keys)))]
        k = operator.index(index)
        key = series_key(self.keys[k])  # (IndexError for an index out of range, negative ones counted back)
        k %= len(self.keys)
        a = int(self.starts[k])
        b = a + int(self.counts[k])
        return new_batch(key, _DOUBLE, self.timestamps[a:b], self.values[a:b])

    def __iter__(self) -> Iterator[SeriesBatch]:
        starts = self.starts.tolist()
        ends = (self.starts + self.counts).tolist()
        ts, vals = self.timestamps, self.values
        return map(
            new_batch,
            map(series_key, self.keys),
            itertools.repeat(_DOUBLE),
            map(ts.__getitem__, map(slice, starts, ends)),
            map(vals.__getitem__, map(slice, starts, ends)),
        )

    def __repr__(self) -> str:
        return f"DoubleBatches(<{len(self.keys)} series, {len(self.timestamps)} points>)"


class MalformedBatchError(ValueError):
    """A request that cannot be stored as sent; names the batch index and its channel.

    ``rejected`` maps every batch index known to be refused to its reason (at least ``index``):
    a server that finds several (type conflicts with stored series) names them all, so a client
    can send the other batches again and report these.
    """

    def __init__(self, index: int, channel: str, reason: str, rejected: dict[int, str] | None = None) -> None:
        more = f" (and {len(rejected) - 1} more rejected batches)" if rejected and len(rejected) > 1 else ""
        super().__init__(f"batches[{index}] (channel {channel[:200]!r}): {reason}{more}")
        self.index = index
        self.channel = channel
        self.reason = reason
        self.rejected = dict(rejected) if rejected else {index: reason}


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    dataset_rid: str
    source_name: str | None
    batches: list[SeriesBatch]


class StringRows(Sequence[list[str]]):
    """STRING_ARRAY values as the row decoder gives them: three columns, not a str per string.

    ``data`` holds the UTF-8 bytes of every string back to back (checked to be valid), string k
    is ``data[offsets[k]:offsets[k + 1]]``, and row j of this view holds strings
    ``rows[lo + j]`` to ``rows[lo + j + 1]``. A row is made (a list of str) only when read; the
    local server hands the columns to Arrow as they are, so a request of a million short strings
    costs no Python object per string. A slice is a view sharing the columns (``lo``, ``hi``
    into the same ``rows``), so the series of one decoded region stay contiguous views of it.
    """

    __slots__ = ("data", "hi", "lo", "offsets", "rows")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                 lo: int = 0, hi: int | None = None) -> None:
        self.data = data
        self.offsets = offsets
        self.rows = rows
        self.lo = lo
        self.hi = rows.shape[0] - 1 if hi is None else hi

    def __len__(self) -> int:
        return self.hi - self.lo

    @overload
    def __getitem__(self, index: int) -> list[str]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[list[str]]: ...

    def __getitem__(self, index: int | slice) -> list[str] | Sequence[list[str]]:
        n = self.hi - self.lo
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return [self[k] for k in range(start, stop, step)]
            return StringRows(self.data, self.offsets, self.rows, self.lo + start, self.lo + max(start, stop))
        k = operator.index(index)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("StringRows index out of range")
        return self._strings(self.lo + k, self.lo + k + 1)[0]

    def __iter__(self) -> Iterator[list[str]]:
        return iter(self._strings(self.lo, self.hi))

    def _strings(self, lo: int, hi: int) -> list[list[str]]:
        """Rows ``lo`` to ``hi`` (of ``rows``) as lists of str, decoded in one pass."""
        first, last = int(self.rows[lo]), int(self.rows[hi])
        offsets = self.offsets[first : last + 1]
        base = int(offsets[0]) if offsets.shape[0] else 0
        text = self.data[base : int(offsets[-1]) if offsets.shape[0] else 0].tobytes()
        bounds = (offsets - base).tolist()
        strings = [text[a:b].decode("utf-8") for a, b in itertools.pairwise(bounds)]
        ends = (self.rows[lo : hi + 1] - first).tolist()
        return [strings[a:b] for a, b in itertools.pairwise(ends)]

    def __eq__(self, other: object) -> bool:
        # As the list of its rows compares: equal to a list of equal lists, or to StringRows.
        if isinstance(other, StringRows):
            other = list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"StringRows({list(self)!r})" if len(self) <= 8 else f"StringRows(<{len(self)} rows>)"
