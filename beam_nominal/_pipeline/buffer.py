"""Per-series columnar buffers with the value type pinned by each series' first value.

Points are held as columns: numpy chunks for timestamps and numeric values, plain lists for
strings and arrays. Single-point appends go to a short staging tail per series that is turned into
a numpy chunk every ``_TAIL_MAX`` points, because appending one value to a numpy array costs more
than the whole rest of a scalar enqueue.

Wide records (one timestamp, many channels) whose channel set repeats are appended as rows of a
:class:`WideBlock` and transposed once when the block is materialised: appending to thousands of
series one value at a time would dominate the cost.

Nothing here is thread-safe; the stream serialises access with its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal._pipeline.values import (
    FIXED_VALUE_BYTES,
    SCALAR_CONVERTERS,
    Mismatch,
    check_texts,
    double_rows_column,
    type_name,
    value_bytes,
)
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import MAX_NAME_CHARS, SeriesKey, ValueType

__all__ = [
    "Buffer",
    "Frozen",
    "SeriesBuffer",
    "WideBlock",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
_TAIL_MAX = 4096
#: Single-point appends between two settles of the buffer's accounting.
SETTLE_EVERY = 512

#: Estimated encoded bytes of one timestamp (the fast encoder writes fixed-width timestamps).
TS_BYTES = 16
#: Estimated encoded bytes of one series' header in a request, plus its name.
SERIES_OVERHEAD = 24

I64 = npt.NDArray[np.int64]


_TYPE_INFO: dict[ValueType, tuple[Callable[[Any], Any] | None, Any, type | None, int]] = {
    vt: (
        SCALAR_CONVERTERS.get(vt),
        vt.numpy_dtype,
        float if vt is ValueType.DOUBLE else None,
        FIXED_VALUE_BYTES.get(vt, 0),
    )
    for vt in ValueType
}


def _tag_bytes(tags: tuple[tuple[str, str], ...]) -> int:
    """Estimated request bytes of a series' tags (part of its per-series overhead)."""
    return sum(len(k) + len(v) + 4 for k, v in tags)


class SeriesBuffer:
    """The buffered points of one series, as columns, plus its pinned type.

    Single points are appended to ``ts_tail`` / ``val_tail`` by the stream's hot path without any
    accounting; :meth:`settle_tail` counts them later (the buffer does so every few hundred points
    and before every cut), so ``points`` and ``nbytes`` exclude the unsettled part of the tail.
    """

    __slots__ = (
        "block",
        "col",
        "conv",
        "dtype",
        "fast_type",
        "key",
        "nbytes",
        "overhead",
        "points",
        "tail_counted",
        "ts_chunks",
        "ts_tail",
        "val_chunks",
        "val_tail",
        "value_bytes",
        "vtype",
    )

    def __init__(self, key: SeriesKey, vtype: ValueType, tag_bytes: int | None = None) -> None:
        self.key = key
        self.vtype = vtype
        # One lookup: hashing a ValueType (a str enum) is a Python-level call, and wide records
        # create thousands of series at once.
        conv, dtype, fast_type, value_bytes = _TYPE_INFO[vtype]
        #: Normalises one scalar of this type (raises _Mismatch), or None for arrays/structs.
        self.conv = conv
        #: numpy dtype of the value column, or None for object columns. Kept here because
        #: hashing a ValueType costs a Python-level call on the cut path.
        self.dtype = dtype
        #: The Python type whose values need no conversion at all (float, str), else None.
        #: (Strings always go through ``conv``, which checks that they encode.)
        self.fast_type = fast_type
        self.ts_chunks: list[I64] = []
        self.val_chunks: list[Any] = []
        self.ts_tail: list[int] = []
        self.val_tail: list[Any] = []
        self.tail_counted = 0
        self.points = 0
        self.nbytes = 0
        #: Fixed encoded bytes per value, or 0 where it varies (strings, arrays).
        self.value_bytes = value_bytes
        #: The wide block this series is a column of, if any (it may hold no rows now). Kept
        #: after materialising so the next record with the same channel set skips validation.
        self.block: WideBlock | None = None
        #: This series' column index in ``block``.
        self.col = 0
        if tag_bytes is None:
            tag_bytes = _tag_bytes(key.tags)
        self.overhead = SERIES_OVERHEAD + len(key.channel) + tag_bytes

    def conflict(self, got: str) -> SeriesTypeError:
        return SeriesTypeError(
            f"series {self.key.describe()} is pinned to {self.vtype.value} by its first value; "
            f"got {got}. Nothing from this call was buffered."
        )

    # -- appends -------------------------------------------------------------------------------

    def settle_tail(self) -> tuple[int, int]:
        """Count tail points appended since the last call; spill a long tail to numpy.

        Returns:
            (points, bytes) newly counted, for the buffer's totals.
        """
        n = len(self.ts_tail)
        new = n - self.tail_counted
        nbytes = 0
        if new:
            if self.value_bytes:
                nbytes = (TS_BYTES + self.value_bytes) * new
            else:
                fresh = self.val_tail[self.tail_counted :] if self.tail_counted else self.val_tail
                nbytes = TS_BYTES * new + value_bytes(self.vtype, fresh)
            self.points += new
            self.nbytes += nbytes
            self.tail_counted = n
        if n >= _TAIL_MAX:
            self._spill_tail()
        return new, nbytes

    def extend(self, timestamps: I64, values: Any, nbytes: int) -> None:
        """Append a column chunk (values in SeriesBatch form for this type); tail settled first."""
        if self.ts_tail:
            self._spill_tail()
        self.ts_chunks.append(timestamps)
        self.val_chunks.append(values)
        self.points += len(timestamps)
        self.nbytes += nbytes

    def _spill_tail(self) -> None:
        assert self.tail_counted == len(self.ts_tail), "spilling an unsettled tail"
        # fromiter with the count: ~20% cheaper than np.array on a list of Python numbers.
        n = len(self.ts_tail)
        self.ts_chunks.append(np.fromiter(self.ts_tail, np.int64, n))
        dtype = self.dtype
        if dtype is not None:
            self.val_chunks.append(np.fromiter(self.val_tail, dtype, n))
        elif self.vtype is ValueType.DOUBLE_ARRAY:
            self.val_chunks.append(double_rows_column(self.val_tail))
        else:
            self.val_chunks.append(self.val_tail)
        self.ts_tail = []
        self.val_tail = []
        self.tail_counted = 0

    # -- taking --------------------------------------------------------------------------------

    def _consolidate(self) -> tuple[I64, Any]:
        if self.ts_tail:
            self._spill_tail()
        if len(self.ts_chunks) == 1:
            return self.ts_chunks[0], self.val_chunks[0]
        ts = np.concatenate(self.ts_chunks)
        chunks = self.val_chunks
        if self.dtype is not None:
            vals: Any = np.concatenate(chunks)
        elif _same_width_matrices(chunks):
            vals = np.concatenate(chunks)
        else:
            vals = [v for chunk in chunks for v in chunk]
        self.ts_chunks = [ts]
        self.val_chunks = [vals]
        return ts, vals

    def take(self, n: int) -> tuple[I64, Any, int]:
        """Remove and return the first ``n`` settled points: (timestamps, values, estimated bytes)."""
        if n >= self.points and self.dtype is not None and not self.ts_tail:
            # Everything, of a numeric series (the packer's usual case, once per series per
            # request): the chunks are joined once, without keeping the joined column.
            ts_chunks, val_chunks = self.ts_chunks, self.val_chunks
            nbytes = self.nbytes
            self.ts_chunks, self.val_chunks = [], []
            self.points = 0
            self.nbytes = 0
            if len(ts_chunks) == 1:
                return ts_chunks[0], val_chunks[0], nbytes
            return np.concatenate(ts_chunks), np.concatenate(val_chunks), nbytes
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


class WideBlock:
    """Rows of wide records sharing one channel set (and tags), transposed at materialise time."""

    __slots__ = (
        "float_only",
        "frozen",
        "int_cols",
        "keys",
        "nbytes",
        "row_bytes",
        "rows",
        "series",
        "str_cols",
        "ts",
        "types",
    )

    def __init__(self, keys: tuple[str, ...], types: tuple[type, ...], series: list[SeriesBuffer]) -> None:
        self.keys = keys
        self.types = types
        self.series = series
        self.rows: list[list[Any]] = []
        self.ts: list[int] = []
        self.float_only = all(s.vtype is ValueType.DOUBLE for s in series)
        # Python ints need a range check per row: their series type depends on magnitude.
        self.int_cols = [i for i, t in enumerate(types) if t is int]
        self.str_cols = [i for i, s in enumerate(series) if s.vtype is ValueType.STRING]
        self.row_bytes = sum(TS_BYTES + s.value_bytes for s in series)
        self.nbytes = 0
        #: During a cut only: the rows taken out by :meth:`freeze`, for the packer.
        self.frozen: Frozen | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def append(self, ts: int, values: list[Any]) -> int:
        """Append one row whose value types equal ``self.types``; returns its estimated bytes.

        Raises:
            SeriesTypeError: a Python int outside its series' range (nothing is appended).
        """
        for i in self.int_cols:
            s = self.series[i]
            try:
                s.conv(values[i])  # type: ignore[misc]
            except Mismatch:
                raise s.conflict(f"{type_name(values[i])} value {values[i]!r}") from None
        nbytes = self.row_bytes
        for i in self.str_cols:
            v = values[i]
            if not v.isascii():
                check_texts(self.keys[i], "string", (v,))
            nbytes += len(v) + 3
        self.rows.append(values)
        self.ts.append(ts)
        self.nbytes += nbytes
        return nbytes

    def freeze(self) -> Frozen:
        """Take a float-only block's rows out, transposed, without touching the member series.

        The packer hands each column to a request as it is (a view of one transposed array,
        all sharing one timestamps array) or moves it into its series with :meth:`Frozen.thaw`:
        a cut of a wide block then costs one small object per series, not a chunk append and a
        take.
        """
        ts = np.array(self.ts, dtype=np.int64)
        # Filled in Fortran order, the transpose is C-contiguous as it is: no transposing copy.
        cols = list(np.array(self.rows, dtype=np.float64, order="F").T)
        share, extra = divmod(self.nbytes, len(self.series))
        self.rows = []
        self.ts = []
        self.nbytes = 0
        return Frozen(ts, cols, share, extra)

    def materialise(self) -> None:
        """Move every row into the member series as one chunk per series."""
        rows, n = self.rows, len(self.ts)
        if n:
            ts = np.array(self.ts, dtype=np.int64)
            share, extra = divmod(self.nbytes, len(self.series))
            if self.float_only:
                cols: Any = np.array(rows, dtype=np.float64, order="F").T
                for j, s in enumerate(self.series):
                    s.extend(ts, cols[j], share + (extra if j == 0 else 0))
            else:
                obj = np.empty((n, len(self.series)), dtype=object)
                obj[:] = rows
                cols = obj.T
                for j, s in enumerate(self.series):
                    dtype = s.dtype
                    col = cols[j]
                    vals = col.astype(dtype) if dtype is not None else col.tolist()
                    s.extend(ts, vals, share + (extra if j == 0 else 0))
        self.rows = []
        self.ts = []
        self.nbytes = 0


class Frozen:
    """A frozen wide block's rows (see :meth:`WideBlock.freeze`): bytes are shared as by
    :meth:`WideBlock.materialise`, the remainder going to column 0."""

    __slots__ = ("cols", "extra", "share", "ts")

    def __init__(self, ts: I64, cols: list[Any], share: int, extra: int) -> None:
        self.ts = ts
        self.cols = cols
        self.share = share
        self.extra = extra

    def thaw(self, s: SeriesBuffer) -> None:
        """Move ``s``'s column into its chunks, after anything older it holds."""
        col = s.col
        s.extend(self.ts, self.cols[col], self.share + self.extra if col == 0 else self.share)


class Buffer:
    """All series of a stream, in first-seen order (the packer's deterministic order)."""

    def __init__(self) -> None:
        self.series: dict[SeriesKey, SeriesBuffer] = {}
        #: Fast lookup for the scalar path: channel -> series, for tags None/{}.
        self.untagged: dict[str, SeriesBuffer] = {}
        #: (channel, tuple(tags.items())) -> series, skipping validation and sorting.
        self.tagged: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesBuffer] = {}
        self.blocks: dict[tuple[tuple[str, str], ...], WideBlock] = {}
        #: Settled totals (see SeriesBuffer); unsettled tail points are at most SETTLE_EVERY.
        self.points = 0
        self.nbytes = 0
        #: Series whose tail may hold points, for settle().
        self.tailed: list[SeriesBuffer] = []
        #: Tail appends left before the stream must call settle().
        self.tick = SETTLE_EVERY

    # -- series lookup ---------------------------------------------------------------------------

    def lookup(self, channel: str, tags: Mapping[str, str] | None) -> SeriesBuffer | None:
        if not tags:
            return self.untagged.get(channel)
        try:
            return self.tagged.get((channel, tuple(tags.items())))
        except TypeError:  # unhashable tag values: let SeriesKey.of report them
            return None

    def pin(self, channel: str, tags: Mapping[str, str] | None, vtype: ValueType) -> SeriesBuffer:
        """The series for (channel, tags), created with ``vtype`` if new.

        Raises:
            ValueError: a bad channel or tags.
            SeriesTypeError: the series exists with another type.
        """
        s = self.lookup(channel, tags)
        if s is None:
            key = SeriesKey.of(channel, tags)
            s = self.series.get(key)
            if s is None:
                check_texts(channel, "channel name", (channel,))
                for k, v in key.tags:
                    check_texts(channel, "tag", (k, v))
                s = SeriesBuffer(key, vtype)
                self.series[key] = s
            if not tags:
                self.untagged[channel] = s
            else:
                self.tagged[(channel, tuple(tags.items()))] = s
        if s.vtype is not vtype:
            raise s.conflict(vtype.value)
        return s

    def pin_key(self, key: SeriesKey, vtype: ValueType) -> SeriesBuffer:
        """The series of a key whose names are already checked (a PointBatch's), created with
        ``vtype`` if new; SeriesTypeError if it exists with another type."""
        s = self.series.get(key)
        if s is None:
            s = SeriesBuffer(key, vtype)
            self.series[key] = s
            if not key.tags:
                self.untagged[key.channel] = s
            else:
                self.tagged[(key.channel, key.tags)] = s
        if s.vtype is not vtype:
            raise s.conflict(vtype.value)
        return s

    def check_type(self, channel: str, tags: Mapping[str, str] | None, vtype: ValueType) -> None:
        """Raise SeriesTypeError if (channel, tags) exists with another type; creates nothing."""
        s = self.lookup(channel, tags)
        if s is None:
            s = self.series.get(SeriesKey.of(channel, tags))
        if s is not None and s.vtype is not vtype:
            raise s.conflict(vtype.value)

    # -- appends ---------------------------------------------------------------------------------

    def add(self, s: SeriesBuffer, ts: int, value: Any) -> bool:
        """Append one converted point to a tail (the stream inlines this on its hot path).

        Returns:
            True when the caller must call :meth:`settle` now.
        """
        if s.block is not None and s.block.ts:
            self.materialise(s.block)
        if not s.ts_tail:
            self.tailed.append(s)
        s.ts_tail.append(ts)
        s.val_tail.append(value)
        self.tick -= 1
        return self.tick <= 0

    def settle(self) -> None:
        """Count every tail point appended since the last settle."""
        still = []
        for s in self.tailed:
            dp, db = s.settle_tail()
            self.points += dp
            self.nbytes += db
            if s.ts_tail:
                still.append(s)
        self.tailed = still
        self.tick = SETTLE_EVERY

    def add_chunk(self, s: SeriesBuffer, timestamps: I64, values: Any, nbytes: int) -> None:
        if s.block is not None and s.block.ts:
            self.materialise(s.block)
        if s.ts_tail:
            dp, db = s.settle_tail()
            self.points += dp
            self.nbytes += db
        s.extend(timestamps, values, nbytes)
        self.points += len(timestamps)
        self.nbytes += nbytes

    def materialise(self, block: WideBlock) -> None:
        self.settle()  # member series' tails are spilled before the block's chunk
        block.materialise()

    def add_row(self, ts: int, record: Mapping[str, Any], tags: Mapping[str, str] | None) -> int:
        """Append a wide record; returns the number of points added.

        Raises:
            SeriesTypeError / TypeError / ValueError: before anything is buffered.
        """
        tag_key = self._tag_key(tags)
        keys = tuple(record)
        values = list(record.values())
        types = tuple(map(type, values))
        block = self.blocks.get(tag_key)
        if block is None or block.keys != keys or block.types != types:
            block = self._new_block(tag_key, keys, types, values, tags)
        nbytes = block.append(ts, values)
        self.points += len(keys)
        self.nbytes += nbytes
        return len(keys)

    def _tag_key(self, tags: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
        if not tags:
            return ()
        return SeriesKey.of("_", tags).tags

    def _new_block(
        self,
        tag_key: tuple[tuple[str, str], ...],
        keys: tuple[str, ...],
        types: tuple[type, ...],
        values: list[Any],
        tags: Mapping[str, str] | None,
    ) -> WideBlock:
        if not keys:
            raise ValueError("enqueue_from_dict got an empty record")
        if len(set(types)) == 1 and types[0] is float:
            fast = self._float_series(tag_key, keys, tags)
            if fast is not None:
                return self._install_block(tag_key, keys, types, fast)
        # Validate every column before pinning any new series, so a bad record buffers nothing.
        vtypes: list[ValueType] = []
        for ch, v in zip(keys, values, strict=False):
            try:
                vt = ValueType.of_scalar(v)
            except TypeError as exc:
                raise TypeError(f"channel {ch!r}: {exc}") from None
            if vt is ValueType.STRUCT:
                raise TypeError(f"channel {ch!r}: enqueue_from_dict takes scalars; use enqueue_struct")
            if vt is ValueType.STRING:
                check_texts(ch, "string", (v,))
            s = self.lookup(ch, tags) or self.series.get(SeriesKey.of(ch, tags))
            if s is not None and s.vtype is not vt:
                # A non-negative int into a uint64 series is fine (see _to_uint64).
                if not (s.vtype is ValueType.UINT64 and vt is ValueType.INT64 and v >= 0):
                    raise s.conflict(f"{vt.value} value {v!r:.80}")
                vt = s.vtype
            vtypes.append(vt)
        old = self.blocks.get(tag_key)
        if old is not None and old.ts:
            self.materialise(old)
        series = [self.pin(ch, tags, vt) for ch, vt in zip(keys, vtypes, strict=True)]
        return self._install_block(tag_key, keys, types, series)

    def _install_block(
        self,
        tag_key: tuple[tuple[str, str], ...],
        keys: tuple[str, ...],
        types: tuple[type, ...],
        series: list[SeriesBuffer],
    ) -> WideBlock:
        block = WideBlock(keys, types, series)
        for j, s in enumerate(series):
            s.block = block
            s.col = j
        self.blocks[tag_key] = block
        return block

    def _float_series(
        self, tag_key: tuple[tuple[str, str], ...], keys: tuple[str, ...], tags: Mapping[str, str] | None
    ) -> list[SeriesBuffer] | None:
        """The series of a new key set whose values are all Python floats, created in bulk.

        Returns None, having changed nothing, for anything but plain ASCII names of valid length
        whose existing series are all doubles: the general path then reports errors exactly.
        """
        if tags:
            items = tuple(tags.items())
            tagged = self.tagged
            found = [tagged.get((ch, items)) for ch in keys]
        else:
            found = list(map(self.untagged.get, keys))
        missing = [j for j, s in enumerate(found) if s is None]
        if missing:
            names = [keys[j] for j in missing]
            try:
                joined = "".join(names)
            except TypeError:
                return None  # a non-str channel
            if not joined.isascii() or not all(k.isascii() and v.isascii() for k, v in tag_key):
                return None
            if min(map(len, names)) == 0 or max(map(len, names)) > MAX_NAME_CHARS:
                return None
            # pin() indexes every untagged series by channel; a tagged one may be indexed under
            # another order of the same tags only.
            known = [self.series.get(SeriesKey(ch, tag_key)) for ch in names] if tags else [None] * len(names)
            if any(s is not None and s.vtype is not ValueType.DOUBLE for s in known):
                return None
        if any(s is not None and s.vtype is not ValueType.DOUBLE for s in found):
            return None
        old = self.blocks.get(tag_key)
        if old is not None and old.ts:
            self.materialise(old)
        if missing:
            index: dict[Any, SeriesBuffer] = self.tagged if tags else self.untagged
            series_map = self.series
            tag_bytes = _tag_bytes(tag_key)
            for j, ch, s in zip(missing, names, known, strict=True):
                if s is None:
                    key = SeriesKey(ch, tag_key)
                    s = SeriesBuffer(key, ValueType.DOUBLE, tag_bytes)
                    series_map[key] = s
                index[(ch, items) if tags else ch] = s
                found[j] = s
        return found  # type: ignore[return-value]

    def prepare_cut(self) -> list[WideBlock]:
        """Settle tails and make every wide block's rows visible to the packer.

        Float-only blocks are frozen (the packer takes their columns, see packer.py); the others
        are materialised into their series. Returns the frozen blocks, which the packer must
        thaw or take completely before the cut ends.
        """
        self.settle()
        frozen = []
        for block in self.blocks.values():
            if block.ts:
                if block.float_only:
                    block.frozen = block.freeze()
                    frozen.append(block)
                else:
                    block.materialise()
        return frozen

    def materialise_all(self) -> None:
        """Settle tails and move every wide block's rows into its series (before a cut)."""
        self.settle()
        for block in self.blocks.values():
            if block.ts:
                block.materialise()

    # -- taking ----------------------------------------------------------------------------------

    def pending(self) -> Iterator[SeriesBuffer]:
        """Series with buffered points, in first-seen order."""
        return (s for s in self.series.values() if s.points)


def _same_width_matrices(chunks: list[Any]) -> bool:
    """Whether every chunk is a 2-D double-array column of one width (so they concatenate)."""
    widths = {c.shape[1] if isinstance(c, np.ndarray) and c.ndim == 2 else -1 for c in chunks}
    return len(widths) == 1 and -1 not in widths


