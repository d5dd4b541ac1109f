"""Element detection and normalisation: turn whatever a PCollection carries into stream calls.

Shapes, detected per element (the first element of a type decides how that type is read, so the
per-element cost is a dict lookup):

* point: ``(channel, timestamp, value[, tags])`` as a tuple, NamedTuple, dict or ``beam.Row``;
* series: ``(channel, timestamps, values[, tags])`` with array/sequence columns;
* wide record: ``(timestamp, {channel: value}[, tags])``, or a dict/Row/NamedTuple with a
  timestamp field and one field per channel (``None`` is a gap), optionally a ``tags`` field;
* a pyarrow ``Table``/``RecordBatch`` with a timestamp column and one column per channel.

Scalar points are the hot path of a Beam sink (one element per point is common), so they are not
sent to the stream one call each: they are appended to small per-series Python lists and handed
over with ``enqueue_batch``. Cut points depend only on the data (point counts), never on time, so a
retried bundle makes the same calls. To keep a series' type check exact, the first point of a
series goes through ``stream.enqueue`` (which pins or checks the type) and the list then accepts
only values of that exact Python type; anything else takes the checked path again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from beam_nominal.model import SeriesKey, timestamp_ns, timestamps_ns

__all__ = ["PENDING_POINTS", "ElementError", "ElementWriter", "FailedElement", "SeriesChunk", "StreamLike"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# The ufunc reduction itself: ndarray.min goes through two Python-level wrappers first.
_MINIMUM = np.minimum.reduce

#: Points one series collects before they are handed to the stream in one call.
SERIES_FLUSH_POINTS = 4096
#: Points all local lists together hold at most: each list's limit shrinks as series are added.
TOTAL_FLUSH_POINTS = 262144
#: Series with a local list at most; points of further series go to the stream one call each.
#: With the per-list limit below, local lists hold at most TOTAL_FLUSH_POINTS points together.
MAX_LOCAL_SERIES = 1024

# Python types whose values may skip the per-value check once the series' type is pinned: a list
# of them converts to one numpy column of the pinned type.
_FAST_TYPES = frozenset({float, int, bool, str, np.float64, np.float32, np.int64, np.int32})

#: Points (channel, int ns, scalar) the sink collects as raw elements before checking and
#: converting them together in :meth:`ElementWriter.write_points`.
PENDING_POINTS = 32768
#: Below this many elements a batch is not worth the vectorised pass: each takes the per-point path.
_BULK_MIN = 64
# Python type of a batch's values -> numpy dtype of its column (None: a list of str).
_BULK_DTYPES: dict[type, Any] = {
    float: np.float64,
    int: np.int64,
    bool: np.bool_,
    str: None,
    np.float64: np.float64,
    np.float32: np.float32,
    np.int64: np.int64,
    np.int32: np.int32,
}


class FailedElement(NamedTuple):
    """An element WriteToNominal could not write, on the ``failed`` output.

    Attributes:
        element: the element as it arrived.
        error: the exception class name (``ElementError``, ``SeriesTypeError`` ...).
        reason: what was wrong, naming the field and, where known, the channel.
    """

    element: Any
    error: str
    reason: str


class ElementError(ValueError):
    """An element that cannot be read as telemetry; ``field`` names the offending part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class SeriesChunk(NamedTuple):
    """A run of points of one series, the unit of cross-bundle batching."""

    channel: str
    tags: tuple[tuple[str, str], ...]
    timestamps: Any
    values: Any


class StreamLike(Protocol):
    def enqueue(self, channel: str, timestamp: Any, value: Any, tags: Mapping[str, str] | None = None) -> None: ...

    def enqueue_batch(
        self, channel: str, timestamps: Any, values: Any, tags: Mapping[str, str] | None = None
    ) -> None: ...

    def enqueue_float_array(
        self, channel: str, timestamp: Any, values: Any, tags: Mapping[str, str] | None = None
    ) -> None: ...

    def enqueue_string_array(
        self, channel: str, timestamp: Any, values: Any, tags: Mapping[str, str] | None = None
    ) -> None: ...

    def enqueue_struct(
        self, channel: str, timestamp: Any, value: Any, tags: Mapping[str, str] | None = None
    ) -> None: ...

    def enqueue_table(
        self, table: Any, timestamp_column: str = "timestamp", tags: Mapping[str, str] | None = None
    ) -> None: ...


# ---------------------------------------------------------------------------------------------
# Field checks (each raises ElementError naming the field)
# ---------------------------------------------------------------------------------------------


def _channel(value: Any, field: str = "channel") -> str:
    if not isinstance(value, str) or not value:
        raise ElementError(field, f"channel must be a non-empty string, got {value!r:.80}")
    return value


def _tags(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ElementError("tags", f"tags must be a mapping of str to str, got {type(value).__name__}")
    if not value:
        return ()
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ElementError("tags", f"tags must map str to str, got {k!r:.40}: {v!r:.40}")
    return tuple(sorted(value.items()))


def _ts(value: Any, field: str = "timestamp") -> int:
    if type(value) is int and _INT64_MIN < value <= _INT64_MAX:
        return value
    try:
        return timestamp_ns(value)
    except (TypeError, ValueError) as exc:
        raise ElementError(field, str(exc)) from None


def _is_column(value: Any) -> bool:
    return isinstance(value, (np.ndarray, list, tuple)) or type(value).__name__ in ("Array", "ChunkedArray")


def _column(value: Any) -> Any:
    if type(value).__name__ in ("Array", "ChunkedArray"):
        return value.to_numpy(zero_copy_only=False)
    return value


def _is_array_value(value: Any) -> bool:
    return isinstance(value, (np.ndarray, list, tuple))


# ---------------------------------------------------------------------------------------------
# Readers: element -> normalised parts
# ---------------------------------------------------------------------------------------------

_POINT, _SERIES, _WIDE_NESTED, _WIDE_FLAT = "point", "series", "wide_nested", "wide_flat"
_WIDE_TUPLE, _TUPLE, _TABLE = "wide_tuple", "tuple", "table"
_RESERVED = frozenset({"tags"})


def _kind_of_fields(fields: Sequence[str], timestamp_field: str) -> str:
    names = set(fields)
    if "channel" in names:
        if "timestamps" in names and "values" in names:
            return _SERIES
        if timestamp_field in names and "value" in names:
            return _POINT
        raise ElementError(
            "fields",
            f"has a channel but neither ({timestamp_field}, value) nor (timestamps, values); fields {sorted(names)}",
        )
    if "value" in names or "timestamps" in names:
        # Point- or series-shaped but nameless: a field called "value" is not taken as a channel.
        raise ElementError("channel", f"element has no channel field; fields {sorted(names)}")
    if timestamp_field in names:
        rest = names - {timestamp_field, "tags"}
        if rest in ({"values"}, {"channels"}):
            return _WIDE_NESTED
        return _WIDE_FLAT
    if "value" in names or "values" in names:
        raise ElementError("channel", f"element has no channel field; fields {sorted(names)}")
    raise ElementError(
        "fields",
        f"no {timestamp_field!r} field and no channel: not a point, series or wide record; fields {sorted(names)}",
    )


class ElementWriter:
    """Writes elements of any supported shape to a stream.

    Args:
        stream: the NominalStream of the current bundle (or anything with its enqueue methods).
        timestamp_field: name of the timestamp field of points, wide records and tables.
        tags: tags added to every series (element tags win on a clash).
    """

    def __init__(
        self, stream: StreamLike, *, timestamp_field: str = "timestamp", tags: Mapping[str, str] | None = None
    ) -> None:
        self.stream = stream
        self.timestamp_field = timestamp_field
        self.base_tags: tuple[tuple[str, str], ...] = tuple(sorted((tags or {}).items()))
        # (channel, tags) -> (python type, timestamps list, values list)
        self._local: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, list[Any], list[Any]]] = {}
        self._series_limit = SERIES_FLUSH_POINTS
        # channel -> the same list as _local[(channel, ())], for the untagged fast path in write().
        self._untagged: dict[str, tuple[Any, list[Any], list[Any]]] = {}
        self._readers: dict[type, Callable[[Any], None]] = {}
        self._tag_cache: dict[tuple[tuple[str, str], ...], dict[str, str] | None] = {}
        # write_points: series number per channel, in first-seen order, and the channels by number.
        self._batch_index: dict[Any, int] = {}
        self._batch_names: list[Any] = []

    # -- public -------------------------------------------------------------------------------

    def write(self, element: Any) -> None:
        """Write one element.

        Raises:
            ElementError: the element's shape or a field is unusable.
            SeriesTypeError: a value conflicts with its series' type (from the stream).
            TypeError, ValueError: other value problems reported by the stream.
        """
        # Fast path for the commonest element, an untagged (channel, int ns, scalar) tuple whose
        # series already collects values of this exact type. Literals, not module constants: this
        # runs once per point and a global lookup costs as much as a comparison.
        if type(element) is tuple and len(element) == 3:
            channel, ts, value = element
            try:
                buf = self._untagged.get(channel)
            except TypeError:  # an unhashable channel: the checked path reports it
                buf = None
            if buf is not None:
                vt, tl, vl = buf
                if (
                    type(value) is vt
                    and type(ts) is int
                    and -9223372036854775808 < ts <= 9223372036854775807
                    and (vt is not int or -9223372036854775808 <= value <= 9223372036854775807)
                ):
                    tl.append(ts)
                    vl.append(value)
                    if len(tl) >= self._series_limit:
                        self._flush_series((channel, ()))
                    return
        reader = self._readers.get(type(element))
        if reader is None:
            reader = self._reader_for(element)
        reader(element)

    def write_points(self, chans: list[Any], tss: list[int], vals: list[Any]) -> list[tuple[Any, Exception]]:
        """Write the points ``zip(chans, tss, vals)`` (int timestamps); return the ones that failed, with why.

        The caller collects the fields rather than the tuples: ints, floats and strs are not
        tracked by the garbage collector, thousands of kept tuples are (and cost a collection
        every 700 of them). A failed point is reported as a new ``(channel, timestamp, value)``
        tuple.

        The common case is checked and converted a column at a time: the exact Python types of
        all values in one ``list(map(type, ...))``, timestamps in one int64 conversion (which
        rejects ints beyond int64), one stable sort by channel in first-seen order (so the
        stream's calls, and the requests cut from them, depend only on the batch). A series whose
        values in the batch are of one type goes to the stream in one ``enqueue_batch``, which
        checks the column against the series' pinned type. Anything else (several value types in
        one series, a value the column path does not take, a rejected column, an unusable
        channel or timestamp) takes the per-point path for that series' elements, in order, so
        every bad element is found and reported by itself.
        """
        failed: list[tuple[Any, Exception]] = []
        n = len(tss)
        if n < _BULK_MIN:
            self._write_each(list(zip(chans, tss, vals, strict=True)), failed)
            return failed
        known = self._batch_index
        try:
            ts = np.fromiter(tss, np.int64, n)
            try:
                idx = np.fromiter(map(known.__getitem__, chans), np.intp, n)
            except KeyError:
                # New series get the next numbers in first-seen order, the same in every process
                # (a set's order would follow str hashes, which differ between processes).
                names = self._batch_names
                for c in dict.fromkeys(chans):
                    if c not in known:
                        known[c] = len(names)
                        names.append(c)
                idx = np.fromiter(map(known.__getitem__, chans), np.intp, n)
        except (OverflowError, TypeError):  # a timestamp beyond int64, an unhashable channel
            self._write_each(list(zip(chans, tss, vals, strict=True)), failed)
            return failed
        if _MINIMUM(ts) == _INT64_MIN:
            self._write_each(list(zip(chans, tss, vals, strict=True)), failed)
            return failed
        # Counting one type in a list of the types is cheaper than building the set of them.
        type_list = list(map(type, vals))
        types = {float} if type_list.count(float) == n else set(type_list)
        counts_all = np.bincount(idx)
        present = np.flatnonzero(counts_all)
        counts = counts_all[present].tolist()
        channels = list(map(self._batch_names.__getitem__, present.tolist()))
        nseries = len(channels)
        order = None
        if nseries > 1:
            # Channel numbers fit 16 bits nearly always, and numpy sorts those stably by radix:
            # O(n), where a timsort of points from interleaved series costs 5x more.
            order = (idx.astype(np.uint16) if len(self._batch_names) <= 65536 else idx).argsort(kind="stable")
            ts = ts[order]
        column: Any = None  # the values in series order, converted; None: convert per series
        group_type: list[Any] = [None] * nseries  # per series: its one value type, or None if mixed
        if len(types) == 1:
            (vtype,) = types
            group_type = [vtype] * nseries
            if vtype in _BULK_DTYPES:
                dtype = _BULK_DTYPES[vtype]
                if dtype is None:
                    column = vals if order is None else list(map(vals.__getitem__, order.tolist()))
                else:
                    try:
                        column = np.fromiter(vals, dtype, n)
                    except OverflowError:  # an int beyond int64 somewhere: convert per series
                        column = None
                    else:
                        if order is not None:
                            column = column[order]
        objects: Any = None
        if column is None:
            objects = np.fromiter(vals, object, n)
            if order is not None:
                objects = objects[order]
            if len(types) > 1:
                tlist = list(types)
                tid = {t: i for i, t in enumerate(tlist)}
                codes = np.fromiter(map(tid.__getitem__, type_list), np.intp, n)
                if order is not None:
                    codes = codes[order]
                starts = np.cumsum([0, *counts[:-1]])
                firsts = codes[starts]
                mixed = np.logical_or.reduceat(np.repeat(firsts, counts) != codes, starts)
                group_type = [None if m else tlist[f] for m, f in zip(mixed.tolist(), firsts.tolist(), strict=True)]
        tags_arg = self._tags_arg(self.base_tags)
        start = 0
        for channel, count, vtype in zip(channels, counts, group_type, strict=True):
            end = start + count
            written = False
            if vtype in _BULK_DTYPES and isinstance(channel, str) and channel:
                col: Any = None
                if objects is None:
                    col = column[start:end]
                else:
                    dtype = _BULK_DTYPES[vtype]
                    try:
                        col = objects[start:end].tolist() if dtype is None else objects[start:end].astype(dtype)
                    except OverflowError:  # ints beyond int64: the per-point path decides uint64
                        col = None
                if col is not None:
                    key = (channel, self.base_tags)
                    if key in self._local:
                        self._flush_series(key)  # points collected before this batch go first
                    try:
                        self.stream.enqueue_batch(channel, ts[start:end], col, tags_arg)
                        written = True
                    except (TypeError, ValueError):  # rejected as a whole: find the culprits one by one
                        pass
            if not written:
                picks = range(start, end) if order is None else order[start:end].tolist()
                self._write_each([(chans[i], tss[i], vals[i]) for i in picks], failed)
            start = end
        return failed

    def _write_each(self, elements: list[Any], failed: list[tuple[Any, Exception]]) -> None:
        for element in elements:
            try:
                self.write(element)
            except (TypeError, ValueError, KeyError) as exc:
                failed.append((element, exc))

    def drain(self) -> None:
        """Hand every locally collected point to the stream (call before ``stream.flush``)."""
        for key in list(self._local):
            self._flush_series(key)

    # -- dispatch ------------------------------------------------------------------------------

    def _reader_for(self, element: Any) -> Callable[[Any], None]:
        cls = type(element)
        ts_field = self.timestamp_field
        reader: Callable[[Any], None]
        if cls.__name__ in ("Table", "RecordBatch") and cls.__module__.startswith("pyarrow"):
            reader = self._read_table
        elif isinstance(element, Mapping):
            # Dicts of one type may carry different keys: decide per element.
            return self._read_mapping
        elif isinstance(element, tuple) and hasattr(cls, "_fields"):
            fields = list(cls._fields)
            kind = _kind_of_fields(fields, ts_field)
            reader = self._named_reader(kind, fields)
        elif cls.__name__ == "Row" and cls.__module__.startswith("apache_beam"):
            return self._read_row
        elif isinstance(element, (tuple, list)):
            reader = self._read_plain_tuple
        else:
            raise ElementError(
                "element",
                f"unsupported element type {cls.__name__}: expected a point, series, wide record or Arrow table",
            )
        self._readers[cls] = reader
        return reader

    def _named_reader(self, kind: str, fields: list[str]) -> Callable[[Any], None]:
        idx = {name: i for i, name in enumerate(fields)}
        ti = idx.get("tags")
        ts_field = self.timestamp_field
        if kind == _POINT:
            ci, tsi, vi = idx["channel"], idx[ts_field], idx["value"]
            if ti is None:
                return lambda e: self.point(e[ci], e[tsi], e[vi], None)
            return lambda e: self.point(e[ci], e[tsi], e[vi], e[ti])
        if kind == _SERIES:
            ci, tsi, vi = idx["channel"], idx["timestamps"], idx["values"]
            return lambda e: self.series(e[ci], e[tsi], e[vi], e[ti] if ti is not None else None)
        return lambda e: self._read_mapping(e._asdict())

    def _read_row(self, row: Any) -> None:
        self._read_mapping(row.as_dict())

    def _read_mapping(self, m: Mapping[str, Any]) -> None:
        kind = _kind_of_fields(list(m), self.timestamp_field)
        if kind == _POINT:
            self.point(m["channel"], m[self.timestamp_field], m["value"], m.get("tags"))
        elif kind == _SERIES:
            self.series(m["channel"], m["timestamps"], m["values"], m.get("tags"))
        elif kind == _WIDE_NESTED:
            inner = m.get("values", m.get("channels"))
            if not isinstance(inner, Mapping):
                raise ElementError("values", f"wide record values must be a mapping, got {type(inner).__name__}")
            self.wide(m[self.timestamp_field], inner, m.get("tags"))
        else:
            ts_field = self.timestamp_field
            self.wide(
                m[ts_field],
                {k: v for k, v in m.items() if k != ts_field and k not in _RESERVED},
                m.get("tags"),
            )

    def _read_plain_tuple(self, e: Sequence[Any]) -> None:
        n = len(e)
        if n in (2, 3) and isinstance(e[1], Mapping):
            self.wide(e[0], e[1], e[2] if n == 3 else None)
            return
        if n not in (3, 4):
            raise ElementError(
                "element",
                f"a tuple of {n} items is not (channel, timestamp, value[, tags]), "
                "(channel, timestamps, values[, tags]) or (timestamp, {channel: value}[, tags])",
            )
        tags = e[3] if n == 4 else None
        if _is_column(e[1]):
            self.series(e[0], e[1], e[2], tags)
        else:
            self.point(e[0], e[1], e[2], tags)

    def _read_table(self, table: Any) -> None:
        if self.timestamp_field not in table.schema.names:
            raise ElementError(
                self.timestamp_field,
                f"Arrow table has no {self.timestamp_field!r} column; columns {table.schema.names}",
            )
        self.stream.enqueue_table(table, timestamp_column=self.timestamp_field, tags=self._tags_arg(self.base_tags))

    # -- shapes ----------------------------------------------------------------------------------

    def _full_tags(self, tags: Any) -> tuple[tuple[str, str], ...]:
        t = _tags(tags)
        if not self.base_tags:
            return t
        if not t:
            return self.base_tags
        return tuple(sorted({**dict(self.base_tags), **dict(t)}.items()))

    def _tags_arg(self, tags: tuple[tuple[str, str], ...]) -> dict[str, str] | None:
        d = self._tag_cache.get(tags)
        if d is None and tags not in self._tag_cache:
            d = dict(tags) if tags else None
            self._tag_cache[tags] = d
        return d

    def point(self, channel: Any, timestamp: Any, value: Any, tags: Any) -> None:
        """One point; scalars are collected locally, arrays and structs go straight to the stream."""
        tag_key = self._full_tags(tags) if (tags or self.base_tags) else ()
        ts = timestamp if (type(timestamp) is int and _INT64_MIN < timestamp <= _INT64_MAX) else _ts(timestamp)
        self._point(channel, tag_key, ts, value)

    def _point(self, channel: Any, tag_key: tuple[tuple[str, str], ...], ts: int, value: Any) -> None:
        try:
            key = (channel, tag_key)
            buf = self._local.get(key)
        except TypeError:
            raise ElementError("channel", f"channel must be a non-empty string, got {channel!r:.80}") from None
        vtype = type(value)
        if buf is not None and vtype is buf[0] and (vtype is not int or _INT64_MIN <= value <= _INT64_MAX):
            buf[1].append(ts)
            buf[2].append(value)
            if len(buf[1]) >= self._series_limit:
                self._flush_series(key)
            return
        self._checked_point(key, channel, ts, value, vtype)

    def _checked_point(
        self, key: tuple[str, tuple[tuple[str, str], ...]], channel: Any, ts: int, value: Any, vtype: type
    ) -> None:
        _channel(channel)
        if value is None:
            raise ElementError("value", f"value of channel {channel!r:.80} is None")
        tags_arg = self._tags_arg(key[1])
        # Keep the series' order: whatever was collected goes before this point.
        if key in self._local:
            self._flush_series(key)
        if isinstance(value, Mapping):
            self.stream.enqueue_struct(channel, ts, value, tags_arg)
            return
        if _is_array_value(value):
            self._array_point(channel, ts, value, tags_arg)
            return
        self.stream.enqueue(channel, ts, value, tags_arg)
        # An int beyond int64 is a uint64 value: it may not open a list that converts to int64.
        if (
            vtype in _FAST_TYPES
            and (vtype is not int or _INT64_MIN <= value <= _INT64_MAX)
            and len(self._local) < MAX_LOCAL_SERIES
        ):
            buf: tuple[Any, list[Any], list[Any]] = (vtype, [], [])
            self._local[key] = buf
            if not key[1] and not self.base_tags:
                self._untagged[channel] = buf
            # Keep the total bounded: with more series, each list hands over sooner. The limit
            # halves as the series count passes a power of two, and every list is handed over
            # then, so the lists never hold more than TOTAL_FLUSH_POINTS together.
            limit = min(SERIES_FLUSH_POINTS, TOTAL_FLUSH_POINTS >> (len(self._local) - 1).bit_length())
            if limit < self._series_limit:
                self._series_limit = limit
                self.drain()

    def _array_point(self, channel: str, ts: int, value: Any, tags_arg: dict[str, str] | None) -> None:
        arr = value if isinstance(value, np.ndarray) else None
        if arr is None:
            if len(value) and all(isinstance(v, str) for v in value):
                self.stream.enqueue_string_array(channel, ts, list(value), tags_arg)
                return
            try:
                arr = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise ElementError(
                    "value", f"array value of channel {channel!r:.80} is neither all numbers nor all strings"
                ) from None
        if arr.dtype.kind in "USO":
            self.stream.enqueue_string_array(channel, ts, [str(v) for v in arr.tolist()], tags_arg)
        elif arr.dtype.kind in "fiub":
            if arr.ndim != 1:
                raise ElementError("value", f"array value of channel {channel!r:.80} has {arr.ndim} dimensions, not 1")
            self.stream.enqueue_float_array(channel, ts, arr.astype(np.float64, copy=False), tags_arg)
        else:
            raise ElementError("value", f"array value of channel {channel!r:.80} has unsupported dtype {arr.dtype}")

    def _flush_series(self, key: tuple[str, tuple[tuple[str, str], ...]]) -> None:
        buf = self._local.get(key)
        if buf is None or not buf[1]:
            return
        vtype, timestamps, values = buf
        ts_arr = np.array(timestamps, dtype=np.int64)
        col: Any = values[:] if vtype is str else np.array(values)
        # The lists are shared with the fast paths (the DoFn holds them too): empty them in place.
        timestamps.clear()
        values.clear()
        self.stream.enqueue_batch(key[0], ts_arr, col, self._tags_arg(key[1]))

    def series(self, channel: Any, timestamps: Any, values: Any, tags: Any) -> None:
        """A run of points of one series as two columns."""
        _channel(channel)
        tag_key = self._full_tags(tags)
        timestamps, values = _column(timestamps), _column(values)
        if not _is_column(timestamps):
            raise ElementError(
                "timestamps", f"timestamps must be an array or sequence, got {type(timestamps).__name__}"
            )
        if not _is_column(values):
            raise ElementError("values", f"values must be an array or sequence, got {type(values).__name__}")
        if len(timestamps) != len(values):
            raise ElementError(
                "values", f"channel {channel!r:.80}: {len(timestamps)} timestamps but {len(values)} values"
            )
        try:
            ts = timestamps_ns(timestamps)
        except (TypeError, ValueError) as exc:
            raise ElementError("timestamps", f"channel {channel!r:.80}: {exc}") from None
        key = (channel, tag_key)
        if key in self._local:
            self._flush_series(key)
        tags_arg = self._tags_arg(tag_key)
        if isinstance(values, np.ndarray) and values.ndim == 2:
            # One row per timestamp: an array channel.
            for t, row in zip(ts.tolist(), values, strict=True):
                self._array_point(channel, t, row, tags_arg)
            return
        if len(values) and not isinstance(values, np.ndarray) and _is_array_value(values[0]):
            for t, v in zip(ts.tolist(), values, strict=True):
                self._array_point(channel, t, v, tags_arg)
            return
        if len(values) and not isinstance(values, np.ndarray) and isinstance(values[0], Mapping):
            for t, v in zip(ts.tolist(), values, strict=True):
                self.stream.enqueue_struct(channel, t, v, tags_arg)
            return
        self.stream.enqueue_batch(channel, ts, values, tags_arg)

    def wide(self, timestamp: Any, channels: Mapping[str, Any], tags: Any) -> None:
        """One timestamp, many channels; ``None`` values are gaps and skipped."""
        ts = _ts(timestamp)
        tag_key = self._full_tags(tags)
        for name, value in channels.items():
            if value is None:
                continue
            if not isinstance(name, str) or not name:
                raise ElementError("channels", f"channel names must be non-empty strings, got {name!r:.80}")
            try:
                self._point(name, tag_key, ts, value)
            except ElementError as exc:
                raise ElementError(f"{exc.field} (channel {name!r:.80})", str(exc).split(": ", 1)[-1]) from None

    # -- chunks for cross-bundle batching ------------------------------------------------------------

    def chunks(self, element: Any) -> list[SeriesChunk]:
        """Read one element into per-series chunks without writing (for cross-bundle batching)."""
        collector = _ChunkCollector()
        saved = self.stream
        self.stream = collector
        try:
            self.write(element)
            self.drain()
        finally:
            self.stream = saved
            self._local.clear()
            self._untagged.clear()
            self._series_limit = SERIES_FLUSH_POINTS
        return collector.chunks


def key_of(chunk: SeriesChunk) -> str:
    """A deterministic string key for a chunk's series (GroupIntoBatches needs a deterministic coder)."""
    return SeriesKey(chunk.channel, chunk.tags).describe()


class _ChunkCollector:
    """A stand-in stream that records calls as chunks (values stay as given; the real stream checks)."""

    def __init__(self) -> None:
        self.chunks: list[SeriesChunk] = []

    def _add(self, channel: str, ts: Any, values: Any, tags: Mapping[str, str] | None, single: bool) -> None:
        tag_key = tuple(sorted(tags.items())) if tags else ()
        if single:
            self.chunks.append(SeriesChunk(channel, tag_key, np.array([ts], dtype=np.int64), [values]))
        else:
            self.chunks.append(SeriesChunk(channel, tag_key, ts, values))

    def enqueue(self, channel: str, timestamp: Any, value: Any, tags: Mapping[str, str] | None = None) -> None:
        if isinstance(value, (bool, int, float, str, np.generic)):
            self._add(channel, timestamp, value, tags, True)
        else:
            raise ElementError("value", f"unsupported value type {type(value).__name__} for channel {channel!r:.80}")

    def enqueue_batch(self, channel: str, timestamps: Any, values: Any, tags: Mapping[str, str] | None = None) -> None:
        self._add(channel, timestamps, values, tags, False)

    def enqueue_float_array(
        self, channel: str, timestamp: Any, values: Any, tags: Mapping[str, str] | None = None
    ) -> None:
        self._add(channel, timestamp, np.asarray(values, dtype=np.float64), tags, True)

    def enqueue_string_array(
        self, channel: str, timestamp: Any, values: Any, tags: Mapping[str, str] | None = None
    ) -> None:
        self._add(channel, timestamp, list(values), tags, True)

    def enqueue_struct(self, channel: str, timestamp: Any, value: Any, tags: Mapping[str, str] | None = None) -> None:
        self._add(channel, timestamp, dict(value), tags, True)

    def enqueue_table(
        self, table: Any, timestamp_column: str = "timestamp", tags: Mapping[str, str] | None = None
    ) -> None:
        try:
            ts = timestamps_ns(table.column(timestamp_column).to_numpy(zero_copy_only=False))
        except (TypeError, ValueError) as exc:
            raise ElementError(timestamp_column, str(exc)) from None
        for name in table.schema.names:
            if name == timestamp_column:
                continue
            col = table.column(name)
            mask = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            values = col.to_numpy(zero_copy_only=False)
            if not mask.all():
                values = values[mask]
            if len(values) and values.dtype == object:
                values = list(values)
            self._add(name, ts[mask], values, tags, False)
