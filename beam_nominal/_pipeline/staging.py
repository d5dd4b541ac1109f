"""The one staging layer between element readers and a stream: a columnar batch of points.

Element readers (``beam/_elements.py``, one small function per element shape) append to a
:class:`PointBatch`. Every append checks its whole element first and then either appends all of
its points or raises and appends nothing: a bad value costs only its own element, never a
neighbour, and (under Beam) is found in that element's own ``process`` call, so the failure
keeps the element's timestamp and window without asking Beam for them per element.

What the batch holds, by how points arrive:

* single points of double series: three C columns (:class:`DoublePoints`: series code, int ns,
  float), appended in arrival order and read as they are when the batch settles. A float of a
  known double series costs a dict lookup and one append.
* other single points: one flat list of ``(series code, int ns, value)`` triples. Ints, floats
  and strs are not tracked by the garbage collector; thousands of kept tuples would be, at a
  collection every 700. A series' points are all in one of the two, so each keeps its order.
* wide records ``(ts, {channel: value})``: one row (the record's values as a list) per record,
  in a block per channel set, value types and tags, checked by comparing two tuples built in C.
* columns (series elements, Arrow tables, and the two above once settled): settled runs of
  numpy columns per series.

:meth:`PointBatch.take` settles everything into per-series columns, vectorised (one int64
conversion of the timestamps, one stable radix sort by series code, one conversion per series),
and returns them in first-seen series order as ``(SeriesBatch, bytes)`` pairs: the points of one
series in the form a request carries them, and their estimated encoded bytes, which the stream's
buffer budget counts. The stream takes them in one call. Cut points of the caller are point
counts, so the same elements always give the same columns.

The first value of a series pins its type (see :mod:`beam_nominal._pipeline.values` for the
conversion rules). Nothing here is thread-safe: one writer owns a batch.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from types import WrapperDescriptorType
from typing import TYPE_CHECKING, Any

import numpy as np

from beam_nominal._pipeline import frames
from beam_nominal._pipeline.sizes import DOUBLE_BYTES, POINT_BYTES, STRING_ITEM_BYTES, TS_BYTES, double_bytes
from beam_nominal._pipeline.values import (
    SCALAR_CONVERTERS,
    UNCHECKED_TYPES,
    Mismatch,
    arrow_column,
    check_texts,
    column,
    convert_scalar,
    describe,
    double_rows_column,
    float_row,
    refuse_masked,
    string_row,
    struct_json,
    text_bytes,
    value_bytes,
)
from beam_nominal._wire.batch import SeriesBatch, new_batch
from beam_nominal.errors import ElementError, InputError, SeriesTypeError

if TYPE_CHECKING:
    from beam_nominal._pipeline.buffer import Buffer
from beam_nominal.model import (
    MAX_NAME_CHARS,
    KeyTuple,
    SeriesKey,
    ValueType,
    arrow_timestamps_ns,
    check_timezone,
    holds_int64_min,
    is_missing,
    naive_error,
    series_key,
    timestamp_ns,
    timestamps_ns,
)

__all__ = ["ElementError", "PointBatch", "double_bytes", "is_column"]


class _DoublePoints:
    """``DoublePoints`` where ``_fastpath`` is not built (no C compiler): the same three
    columns, as arrays."""

    __slots__ = ("codes", "ts", "values")

    def __init__(self) -> None:
        self.clear()

    def append(self, code: int, timestamp: int, value: Any) -> int:
        """Append one point; return the points now held. OverflowError for a timestamp outside
        -2**63 < timestamp < 2**63 (the low end is not an int64 ns Nominal takes)."""
        # Checked before anything is appended; the value as the compiled one's PyFloat_AsDouble
        # takes it (a real number, not a str), by the float array's own append.
        if not -(2**63) < timestamp < 2**63:
            raise OverflowError(f"timestamp {timestamp} beyond int64")
        self.values.append(value)
        self.codes.append(code)
        self.ts.append(timestamp)
        return len(self.codes)

    def __len__(self) -> int:
        return len(self.codes)

    def columns(self) -> tuple[Any, Any, Any]:
        return array("q", self.codes), array("q", self.ts), array("d", self.values)

    def take(self) -> tuple[Any, Any, Any]:
        out = self.codes, self.ts, self.values
        self.clear()
        return out

    def clear(self) -> None:
        self.codes, self.ts, self.values = array("q"), array("q"), array("d")


DoublePoints: Callable[[], Any]
try:
    from beam_nominal._pipeline._fastpath import DoublePoints
except ImportError:
    DoublePoints = _DoublePoints


def _pack_doubles(values: Any) -> bytes | None:
    """``pack_doubles`` where ``_fastpath`` is not built: the doubles of a list (exactly) of floats
    (exactly), packed in native order; None for anything else."""
    if type(values) is not list:
        return None
    types = set(map(type, values))
    if types and types != {float}:
        return None
    return array("d", values).tobytes()


def _pack_record(record: Any, keys: tuple[Any, ...]) -> bytes | None:
    """``pack_record`` where ``_fastpath`` is not built: the values of a dict (exactly) whose
    channels are ``keys`` in order, every value a float (exactly), packed as ``pack_doubles``
    packs them; None for anything else."""
    if type(record) is not dict or tuple(record) != keys:
        return None
    return _pack_doubles(list(record.values()))


pack_doubles: Callable[[Any], bytes | None]
pack_record: Callable[[Any, tuple[Any, ...]], bytes | None]
try:
    from beam_nominal._pipeline._fastpath import pack_doubles, pack_record
except ImportError:
    pack_doubles, pack_record = _pack_doubles, _pack_record

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_I64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)
#: Checked series names a batch keeps from one bundle to the next, at most.
_KEYS_KEPT = 65536
#: Rows of a plain block from which its columns go to the buffer as series of their own (``take``)
#: rather than as loose points: long columns cost less as a series each than sorted point by point.
_SERIES_ROWS = 512
#: ``PointBatch.float_codes`` while rows are pending: never written.
_NO_FLOAT_CODES: dict[str, int] = {}


class _NoType:
    """A type no value has: the unchecked type of a series whose values all need a check."""


class _Slot:
    """One series of the batch: its code (first-seen order), pinned type and settled runs."""

    __slots__ = ("code", "conv", "key", "settled", "unchecked", "vtype")

    def __init__(self, code: int, key: SeriesKey, vtype: ValueType, first: type = _NoType) -> None:
        self.code = code
        self.key = key
        self.vtype = vtype
        #: The Python type appended with no check at all: the type of the series' first value
        #: when no value of it needs one (a float in a double series; see UNCHECKED_TYPES). Ints
        #: need a range check and strs a UTF-8 check, which ``conv`` does.
        self.unchecked: type = first if first in UNCHECKED_TYPES.get(vtype, ()) else _NoType
        #: Checks and normalises one scalar of this type (raises Mismatch), or None for
        #: arrays and structs.
        self.conv = SCALAR_CONVERTERS.get(vtype)
        #: Settled (timestamps, values, bytes) runs; an empty tuple until the first, so a
        #: series of single points holds no list of its own.
        self.settled: list[tuple[Any, Any, int]] | tuple[()] = ()


# A new double series' slot and key made without their __init__/__new__ (Python-level calls):
# over a million new series these were a third of a point's cost.
_new_slot = object.__new__
_new_tuple = tuple.__new__
# Members looked up once: Python 3.11's EnumType runs Python code on every ``ValueType.X``,
# which the per-point paths below would pay each time.
_DOUBLE, _INT64, _STRUCT = ValueType.DOUBLE, ValueType.INT64, ValueType.STRUCT
_DOUBLE_ARRAY, _STRING_ARRAY = ValueType.DOUBLE_ARRAY, ValueType.STRING_ARRAY
_DOUBLE_CONV = SCALAR_CONVERTERS.get(ValueType.DOUBLE)


class _Block:
    """Rows of wide records that share their channels, value types and tags."""

    __slots__ = ("checks", "floats", "keys", "plain", "rows", "seq", "slots", "texts", "ts", "types", "width")

    def row_bytes(self, row: list[Any]) -> int:
        """Estimated encoded bytes of one row (``POINT_BYTES`` a point, plus its text)."""
        if not self.texts:
            return POINT_BYTES * self.width
        return POINT_BYTES * self.width + text_bytes([row[j] for j in self.texts])

    def __init__(self, keys: tuple[Any, ...], types: tuple[type, ...], slots: list[_Slot | None]) -> None:
        self.keys = keys
        self.types = types
        #: One per column; None where the record's value is None (a gap).
        self.slots = slots
        #: (column, converter) for the values that need a check per row (ints, strs).
        #: Sequence numbers of the rows' records in the batch (order across blocks).
        self.seq: list[int] = []
        self.checks = [
            (j, s.conv)
            for j, (s, t) in enumerate(zip(slots, types, strict=True))
            if s is not None and t is not s.unchecked and s.conv is not None
        ]
        #: Every value a float of a double series, no gaps: settled as one matrix.
        self.plain = not self.checks and all(
            s is not None and s.vtype is _DOUBLE and s.unchecked is t
            for s, t in zip(slots, types, strict=True)
        )
        #: Points per row.
        self.width = sum(s is not None for s in slots)
        #: Columns of text, whose length a row's size estimate adds.
        self.texts = [j for j, t in enumerate(types) if t is str and slots[j] is not None]
        self.ts: list[int] = []
        #: The rows of a block not plain, as lists.
        self.rows: list[list[Any]] = []
        #: The rows of a plain block, packed as native doubles one after another (no object a
        #: value; one conversion for the block).
        self.floats: bytearray = bytearray()

    def held_bytes(self) -> int:
        """Estimated encoded bytes of the rows held: what ``row_bytes`` counted for them."""
        if not self.texts:
            return POINT_BYTES * self.width * len(self.ts)
        return sum(map(self.row_bytes, self.rows))

    def matrix(self) -> Any:
        """The rows of a plain block, a float64 matrix of one row a record; the block keeps none."""
        floats, self.floats = self.floats, bytearray()
        return np.frombuffer(floats, np.float64).reshape(len(self.ts), self.width)


class PointBatch:
    """A batch of points of any shape, checked per element as it is appended.

    Args:
        tags: tags of every series (an element's own tags win on a clash).
        timezone: the zone naive timestamps are readings in (``model.check_timezone``); None
            refuses them (``model.timestamp_ns``'s one zone rule).

    Every ``add*`` method raises :class:`ElementError` (shape, channel, tags, timestamp),
    :class:`~beam_nominal.errors.SeriesTypeError` (a value conflicting with its series' type)
    or ``TypeError``/``ValueError`` (an unsupported value, text that is not UTF-8), having
    appended nothing of the element.
    """

    def __init__(self, tags: Mapping[str, str] | None = None, timezone: str | None = None) -> None:
        self._zone = check_timezone(timezone)
        #: An element's timestamp as int ns (an attribute, not a method: as cheap as the module
        #: function it was for the int ns the hot paths see).
        self._timestamp: Callable[[Any], int] = _timestamp if self._zone is None else _zoned(self._zone)
        self._base: tuple[tuple[str, str], ...] = SeriesKey.of("_", tags).tags if tags else ()
        #: Series by code; None for a lazy one (see _new_double) until _materialize makes it.
        self._slots: list[_Slot | None] = []
        #: Every series' key by code, lazy ones included: what the buffer reads loose points by.
        self._series_keys: list[KeyTuple] = []
        #: Code of the first lazy series not yet made a slot, or None.
        self._lazy_at: int | None = None
        self._by_key: dict[SeriesKey, _Slot] = {}
        #: channel -> slot, for elements without tags of their own.
        self._untagged: dict[str, _Slot] = {}
        #: (channel, tuple(tags.items())) -> slot: an element's tags, as given.
        self._tagged: dict[tuple[str, tuple[tuple[str, str], ...]], _Slot] = {}
        #: Single points of double series, in arrival order (series code, int ns, float).
        self.doubles = DoublePoints()
        #: (series code, int ns, value) triples of other single points, in arrival order.
        self.flat: list[Any] = []
        #: (channel, tag items as given) -> its checked SeriesKey; kept by clear().
        self._keys: dict[tuple[Any, Any], SeriesKey] = {}
        #: Untagged channels whose series is double and takes Python floats unchecked -> code.
        self._all_float_codes: dict[str, int] = {}
        #: The channels whose Python-float points the fast path (add_fast) appends unchecked, by
        #: series code: _all_float_codes, or empty while rows are pending (so a single point
        #: after a wide record's row takes the checked path, which settles the rows first and
        #: keeps each series in arrival order). Read, never written, by the one other copy of the
        #: fast path, the compiled ``WriteDoFn.process`` (``_fastpath.c``, which holds
        #: ``float_codes`` and ``doubles``; see ``on_rebind``).
        self.float_codes: dict[str, int] = self._all_float_codes
        #: tag items as given -> the block the last record with those tags went to.
        self._last_block: dict[tuple[Any, ...], _Block] = {}
        self._blocks: dict[tuple[Any, ...], _Block] = {}
        #: Points in rows and settled runs (single points are in ``doubles`` and ``flat``):
        #: with those, what a writer reads to decide when to hand the batch over.
        self.counted = 0
        #: Estimated encoded bytes appended and not taken, except single floats (whose count
        #: bounds them): what a writer compares with its request size to hand the batch over.
        self.nbytes = 0
        #: Series holding settled runs, for take() (which need not visit every series).
        self._filled: list[_Slot] = []
        #: Some block holds rows.
        self._rows = False
        #: Records appended to blocks so far (their rows' sequence numbers).
        self._seq = 0
        #: Called with no arguments whenever ``float_codes`` or ``doubles`` is rebound (kept by
        #: clear()): the compiled ``WriteDoFn.process`` holds the two rather than look them up
        #: per point.
        self.on_rebind: Callable[[], None] | None = None

    # -- size --------------------------------------------------------------------------------------

    @property
    def points(self) -> int:
        """Points appended and not yet taken."""
        return len(self.flat) // 3 + len(self.doubles) + self.counted

    def singles_due(self, limit: int) -> bool:
        """Whether ``doubles`` or the flat list holds ``limit`` single points: each is bounded
        by itself, so a writer's compiled path, which appends to ``doubles`` only, need read no
        other (single points held stay under twice the limit)."""
        return len(self.doubles) >= limit or len(self.flat) >= 3 * limit

    # -- single points -----------------------------------------------------------------------------

    def add_fast(self, channel: Any, ts: Any, value: Any) -> int:
        """Append a point of an untagged double series, known or new and lazy (``_new_double``),
        whose value is a float and timestamp an int ns and return how many such points
        ``doubles`` now holds (what a caller compares with its hand-over limit: the point adds
        nothing else to count); or do nothing and return 0 (the caller then takes the checked
        path, :meth:`add_point`).

        The hot path of the package: two type tests and a lookup in ``float_codes``, and the
        point goes to ``doubles`` in one append, which checks the timestamp's range. The
        compiled ``WriteDoFn.process`` (``_fastpath.c``) applies the same rule to each element
        shape for a known series (in Python the call costs more than the rule;
        ``tests/unit/test_fast_path.py`` holds the two to the same points); it makes no series,
        so a new one's first point goes to the element's reader, whose call of this method
        makes it.
        """
        # A known series' timestamp range is checked by ``doubles.append`` (OverflowError
        # beyond -2**63 < ts < 2**63, which the checked path then names): it converts ts anyway.
        if type(value) is float and type(ts) is int:
            try:
                # get, not [ ]: an unknown channel (each new series) raises no KeyError.
                code = self.float_codes.get(channel)
            except (TypeError, ValueError):  # an unhashable channel
                # (ValueError: a channel whose __hash__ raises it; the checked path makes that a
                # FailedElement, as the compiled WriteDoFn.process does, not a failed bundle)
                return 0
            if code is None:
                # A new series (nearly always, over a million series): made here when it can be
                # lazy, as add_point would make it, saving that call. A timestamp out of range
                # goes to the checked path, as for a known series (_new_double would raise).
                if not -9223372036854775808 < ts <= 9223372036854775807:
                    return 0
                return len(self.doubles) if self._new_double(channel, ts, value) else 0
            try:
                held: int = self.doubles.append(code, ts, value)  # its new length: no len() call
            except OverflowError:
                return 0
            return held
        return 0

    def add_point(self, channel: Any, ts: Any, value: Any, tags: Any) -> None:
        """One point; ``tags`` (a mapping or None) are merged over the batch's tags."""
        if type(value) is float and not tags and self._new_double(channel, ts, value):
            return
        if self._lazy_at is not None:
            self._materialize()
        slot, new = self._slot_for(channel, tags)
        t = self._timestamp(ts)
        slot, value = self._value_for(slot, new, value)
        if new:
            self._register(slot, channel, tags)
        self._append(slot, t, value)

    def _new_double(self, channel: Any, ts: Any, value: float) -> bool:
        """The first point (a float, untagged) of a series not yet known, named by a plain str,
        in a batch without tags of its own, made a lazy series: a code, a key and a
        ``float_codes`` entry, no slot and no other map entry (over a million series, each new,
        those were most of a point's cost, and a slot a series kept the garbage collector busy).
        Every other path makes the pending lazy series slots first (``_materialize``); single
        doubles reach the buffer by code and key alone (``move_into``). False, having done
        nothing, for anything else (the general path names what is wrong)."""
        if (
            type(channel) is not str
            or self._base
            or channel in self._untagged
            or channel in self._all_float_codes
            or not channel
            or len(channel) > MAX_NAME_CHARS
            or not channel.isascii()
        ):
            return False
        t = ts if type(ts) is int and _INT64_MIN < ts <= _INT64_MAX else self._timestamp(ts)
        # Its key is not in _by_key: an untagged key is registered under an equal channel in
        # _untagged or, lazy, in _all_float_codes, looked up above.
        slots = self._slots
        code = len(slots)
        slots.append(None)
        self._series_keys.append((channel, ()))  # a plain tuple: see KeyTuple
        self._all_float_codes[channel] = code
        if self._lazy_at is None:
            self._lazy_at = code
        if self._rows:
            self._settle_rows()  # rows that came first stay first
        self.doubles.append(code, t, value)
        return True

    def _new_doubles(self, names: list[str], keys: list[SeriesKey]) -> list[_Slot]:
        """Slots of new untagged double series taking floats unchecked (names checked, keys
        known to no slot), registered as ``_register`` registers each, the maps filled in bulk:
        a record of thousands of new channels costs no call a channel."""
        slots = self._slots
        start = len(slots)
        codes = range(start, start + len(names))
        made: list[_Slot] = list(map(_new_slot, repeat(_Slot, len(names))))
        for code, slot, key in zip(codes, made, keys, strict=True):
            slot.code, slot.key, slot.vtype, slot.settled = code, key, _DOUBLE, ()
            slot.unchecked, slot.conv = float, _DOUBLE_CONV
        slots.extend(made)
        self._series_keys.extend(keys)
        self._by_key.update(zip(keys, made, strict=True))
        self._untagged.update(zip(names, made, strict=True))
        if set(map(type, names)) == {str}:
            self._all_float_codes.update(zip(names, codes, strict=True))
        else:  # str subclasses: _register decides which may take the fast path
            for slot, name in zip(made, names, strict=True):
                self._register(slot, name, None)
        return made

    def _real_slots(self) -> list[_Slot]:
        """``_slots``, where the codes read are of slots made (not lazy: rows' and non-double
        series', or any once ``_materialize`` ran)."""
        return self._slots  # type: ignore[return-value]

    def _materialize(self) -> None:
        """Make every lazy series a slot registered as ``_register`` registers an untagged
        double series (its code, key and ``float_codes`` entry stay)."""
        start, self._lazy_at = self._lazy_at, None
        slots, keys = self._slots, self._series_keys
        by_key, untagged = self._by_key, self._untagged
        for code in range(start or 0, len(slots)):
            if slots[code] is None:
                key = series_key(keys[code])
                slot = _new_slot(_Slot)
                slot.code, slot.key, slot.vtype, slot.settled = code, key, _DOUBLE, ()
                slot.unchecked, slot.conv = float, _DOUBLE_CONV
                slots[code] = slot
                by_key[key] = slot
                untagged[key.channel] = slot

    def _append(self, slot: _Slot, t: int, value: Any) -> int:
        """A checked point onto ``doubles`` or the flat list (the checked paths' one way there);
        returns the single points that one now holds."""
        if self._rows:
            self._settle_rows()  # rows that came first stay first
        if slot.vtype is _DOUBLE:
            held: int = self.doubles.append(slot.code, t, value)  # where add_fast puts the series' points
        else:
            flat = self.flat
            flat.extend((slot.code, t, value))
            held = len(flat) // 3
        if type(value) is not float:
            self.nbytes += _point_bytes(value)
        return held

    # -- wide records -----------------------------------------------------------------------------

    def add_record(self, ts: Any, record: Mapping[Any, Any], tags: Any = None, skip: tuple[str, ...] = ()) -> None:
        """One timestamp, many channels (``{channel: value}``); ``None`` values are gaps.

        ``skip`` names fields of ``record`` that are not channels (a flat record's timestamp and
        tags fields): read in place, no dict without them is built per record.
        """
        # type() first: a dict needs no ABC check.
        if type(record) is not dict and not isinstance(record, Mapping):
            raise ElementError("values", f"wide record values must be a mapping, got {type(record).__name__}")
        if self._lazy_at is not None:
            self._materialize()
        t = self._timestamp(ts)
        items = _tag_items(tags)
        block = self._last_block.get((items, skip))
        row: list[Any] | None = None
        # The channels of the last record with these tags, all floats: the record's one check
        # is its packing (the same channels in order, every value exactly a float).
        if block is None or not block.plain or (packed := pack_record(record, block.keys)) is None:
            found = self._checked_row(record, tags, items, skip, block)
            if found is None:
                self._record_by_points(t, record, tags, skip)
                return
            block, row, packed = found
        if self.flat or len(self.doubles):
            self._settle_flat()  # single points that came first stay first
        block.ts.append(t)
        if packed is not None:
            block.floats += packed
        else:
            block.rows.append(row)  # type: ignore[arg-type]
        block.seq.append(self._seq)
        self._seq += 1
        if not self._rows:
            self._rows = True
            self._open_fast_path(False)
        self.counted += block.width
        self.nbytes += block.row_bytes(row) if row is not None else POINT_BYTES * block.width

    def _checked_row(
        self, record: Mapping[Any, Any], tags: Any, items: Any, skip: tuple[str, ...], block: _Block | None
    ) -> tuple[_Block, list[Any] | None, bytes | None] | None:
        """The block of ``record`` (``block``, the last one of its tags, if its channels and value
        types match) and its row: packed doubles for a plain block, else a list of its values
        checked; None for a record whose values go point by point (an array or struct)."""
        keys = tuple(record)
        row = list(record.values())
        types = tuple(map(type, row))
        if block is None or block.keys != keys or block.types != types:
            block = self._blocks.get((keys, types, items, skip)) or self._new_block(
                keys, types, record, tags, items, skip
            )
            if block is None:
                return None
            self._last_block[(items, skip)] = block
        if block.plain:
            return block, None, pack_doubles(row)  # every value a float (block.types)
        for j, conv in block.checks:
            try:
                row[j] = conv(row[j])
            except (Mismatch, UnicodeEncodeError):
                raise _bad_value(block.keys[j], block.slots[j], row[j]) from None  # type: ignore[arg-type]
        return block, row, None

    def _new_block(
        self,
        keys: tuple[Any, ...],
        types: tuple[type, ...],
        record: Mapping[Any, Any],
        tags: Any,
        items: Any,
        skip: tuple[str, ...],
    ) -> _Block | None:
        """A block for a new channel set, every value checked; None if a value is an array or
        struct (those records go point by point)."""
        if len(keys) <= sum(k in record for k in skip):
            raise ElementError("values", "wide record has no channels")
        floats = self._float_slots(keys, types, tags, skip)
        if floats is not None:
            block = _Block(keys, types, floats)
            self._blocks[(keys, types, items, skip)] = block
            return block
        slots: list[_Slot | None] = []
        new: list[tuple[_Slot, Any]] = []
        for name, value in record.items():
            if value is None or name in skip or is_missing(value):
                slots.append(None)
                continue
            if isinstance(value, (Mapping, list, tuple, np.ndarray)):
                return None
            slot, is_new = self._slot_for(name, tags, field="channels")
            slot, _ = self._value_for(slot, is_new, value, name)
            slots.append(slot)
            if is_new:
                new.append((slot, name))
        if not any(slots):
            self._key("_", tags, "channels")  # nothing but gaps: its tags must still be tags
        for slot, name in new:
            self._register(slot, name, tags)
        block = _Block(keys, types, slots)
        self._blocks[(keys, types, items, skip)] = block
        return block

    def _float_slots(
        self, keys: tuple[Any, ...], types: tuple[type, ...], tags: Any, skip: tuple[str, ...]
    ) -> list[_Slot | None] | None:
        """The slots of an untagged record of Python floats, new series made in bulk; None,
        having changed nothing, for anything else (the general path then checks each value and
        reports errors exactly). A record of thousands of channels would otherwise check each
        name by itself: one join and one ``isascii`` cover them all."""
        if tags or (not skip and set(types) != {float}):
            return None
        if skip and not all(t is float or k in skip for k, t in zip(keys, types, strict=True)):
            return None
        names = [k for k in keys if k not in skip] if skip else list(keys)
        try:
            joined = "".join(names)
        except TypeError:
            return None  # a name that is not a str
        if not names or not joined.isascii() or min(map(len, names)) == 0 or max(map(len, names)) > MAX_NAME_CHARS:
            return None
        found: list[_Slot | None] = list(map(self._untagged.get, names))
        base = self._base
        new = [j for j, s in enumerate(found) if s is None]
        new_keys = [_new_tuple(SeriesKey, (names[j], base)) for j in new]
        for j, slot in zip(new, map(self._by_key.get, new_keys), strict=True):
            found[j] = slot
        if any(s is not None and (s.vtype is not _DOUBLE or s.unchecked is not float) for s in found):
            return None
        for j, name in enumerate(names):
            slot = found[j]
            if slot is not None:
                self._register(slot, name, None)
        unknown = [(j, key) for j, key in zip(new, new_keys, strict=True) if found[j] is None]
        if unknown:
            made = self._new_doubles([names[j] for j, _ in unknown], [key for _, key in unknown])
            for (j, _), slot in zip(unknown, made, strict=True):
                found[j] = slot
        if not skip:
            return found
        it = iter(found)
        return [None if k in skip else next(it) for k in keys]

    def _record_by_points(self, t: int, record: Mapping[Any, Any], tags: Any, skip: tuple[str, ...]) -> None:
        checked: list[tuple[_Slot, bool, Any, Any]] = []
        for name, value in record.items():
            if value is None or name in skip or is_missing(value):
                continue
            slot, new = self._slot_for(name, tags, field="channels")
            slot, converted = self._value_for(slot, new, value, name)
            checked.append((slot, new, name, converted))
        for slot, new, name, converted in checked:
            if new:
                self._register(slot, name, tags)
            self._append(slot, t, converted)

    # -- columns ----------------------------------------------------------------------------------

    def add_series(self, channel: Any, timestamps: Any, values: Any, tags: Any = None) -> None:
        """A run of points of one series as two columns (arrays or sequences)."""
        self._hold(self.series_batches(channel, timestamps, values, tags))

    def series_batches(
        self, channel: Any, timestamps: Any, values: Any, tags: Any = None
    ) -> list[tuple[SeriesBatch, int]]:
        """:meth:`add_series` without holding the points: the element checked and converted and
        its series registered (so its type is pinned), returned as a (batch, bytes) pair (none if
        empty), as :meth:`take` gives them.

        A stream puts it straight into its buffer, after what the batch holds (which came
        first): a column passing through the batch's settled runs and ``take()`` costs more
        than checking it.
        """
        if self._lazy_at is not None:
            self._materialize()
        if (
            type(timestamps) is np.ndarray
            and type(values) is np.ndarray
            and timestamps.dtype == _I64
            and values.dtype == _F64
            and not tags
        ):
            # The common case (int64 ns and float64 arrays of a known double series) without the
            # general path's dispatch below, whose checks are these, reached through six more
            # calls. Anything else, an error included, takes the general path.
            try:
                slot: _Slot | None = self._untagged.get(channel)
            except TypeError:  # an unhashable channel
                slot = None
            if (
                slot is not None
                and slot.vtype is _DOUBLE
                and timestamps.ndim == values.ndim == 1
                and len(timestamps) == len(values) != 0
            ):
                ts = timestamps.copy()  # copies: callers may reuse their arrays
                if not holds_int64_min(ts):
                    return [double_column(slot.key, ts, values.copy())]
        slot, new = self._slot_for(channel, tags)
        ts_pandas = frames.is_pandas(timestamps)
        timestamps, values = _as_column(timestamps), _as_column(values)
        if not is_column(timestamps):
            raise ElementError(
                "timestamps", f"timestamps must be an array or sequence, got {type(timestamps).__name__}"
            )
        if not is_column(values):
            raise ElementError("values", f"values must be an array or sequence, got {type(values).__name__}")
        if len(timestamps) != len(values):
            raise ElementError(
                "values", f"channel {channel!r:.80}: {len(timestamps)} timestamps but {len(values)} values"
            )
        refuse_masked(channel, "timestamps", timestamps)
        try:
            if ts_pandas and self._zone is None and _naive_arrow(timestamps):
                raise naive_error("pandas", f"pandas timestamps ({timestamps.type})")
            ts = np.array(timestamps_ns(timestamps, self._zone), dtype=np.int64, copy=True)
        except InputError as exc:
            raise ElementError("timestamps", f"channel {channel!r:.80}: {exc}") from None
        if _is_arrow_array(values):
            # Arrow (and pandas, by its missing rule) nulls are no points.
            if values.null_count:
                import pyarrow.compute as pc

                valid = pc.is_valid(values)
                ts = ts[valid.to_numpy(zero_copy_only=False)]
                values = values.filter(valid)
            if not len(ts):
                return []
            vt, vals, vbytes = arrow_column(channel, values, None if new else slot.vtype)
        elif not len(ts):
            return []
        else:
            vt, vals, vbytes = column(channel, values, None if new else slot.vtype)
        if new:
            slot = _Slot(-1, slot.key, vt)
            self._register(slot, channel, tags)
        return [(new_batch(slot.key, vt, ts, vals), vbytes + TS_BYTES * len(ts))]

    def add_table(self, table: Any, timestamp_column: str, tags: Any = None) -> None:
        """A pyarrow ``Table``/``RecordBatch``: one channel per column besides the timestamps.

        Nulls are gaps. Every column is checked before any is appended.
        """
        self._hold(self.table_batches(table, timestamp_column, tags))

    def table_batches(self, table: Any, timestamp_column: str, tags: Any = None) -> list[tuple[SeriesBatch, int]]:
        """:meth:`add_table` without holding the points (see :meth:`series_batches`); also a
        pandas or polars DataFrame, a pandas Series or an ``__arrow_c_stream__`` object
        (``frames.as_table``)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._lazy_at is not None:
            self._materialize()
        try:
            table, container = frames.as_table(table, timestamp_column)
        except InputError as exc:
            raise ElementError("table", str(exc)) from None

        # Columns by position, each as one Array: looking 50 columns up by name and combining
        # each (pyarrow's own calls) cost as much as converting them.
        if isinstance(table, pa.RecordBatch):
            names, columns = table.schema.names, table.columns
        else:
            names, columns = table.column_names, [c.combine_chunks() for c in table.columns]
        if timestamp_column not in names:
            raise ElementError(timestamp_column, f"Arrow table has no {timestamp_column!r} column; columns {names}")
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise ElementError("columns", f"Arrow table has more than one column named {twice!r}")
        tcol = columns[names.index(timestamp_column)]
        try:
            if container == "pandas" and self._zone is None and _naive_arrow(tcol):
                raise naive_error("pandas", f"DataFrame timestamps {timestamp_column!r} ({tcol.type})")
            ts_all = arrow_timestamps_ns(tcol, self._zone, timestamp_column)
        except InputError as exc:
            raise ElementError(timestamp_column, str(exc)) from None
        # One copy the batches own (Arrow's memory is the caller's), shared by every column
        # without nulls, as a wide record's columns share theirs.
        ts_owned = np.array(ts_all, dtype=np.int64)
        prepared: list[tuple[_Slot, bool, str, Any, Any, int]] = []
        for name, col in zip(names, columns, strict=True):
            if name == timestamp_column:
                continue
            slot, new = self._slot_for(name, tags, field="column")
            ts = ts_owned
            if col.null_count:
                valid = pc.is_valid(col)
                ts = ts_owned[valid.to_numpy(zero_copy_only=False)]
                col = col.filter(valid)
            if not len(ts):
                continue
            vt, vals, vbytes = arrow_column(name, col, None if new else slot.vtype)
            if new:
                slot = _Slot(-1, slot.key, vt)
            prepared.append((slot, new, name, ts, vals, vbytes + TS_BYTES * len(ts)))
        out = []
        for slot, new, name, ts, vals, nbytes in prepared:
            if new:
                self._register(slot, name, tags)
            out.append((new_batch(slot.key, slot.vtype, ts, vals), nbytes))
        return out

    def add_typed(self, channel: Any, ts: Any, vtype: ValueType, value: Any, tags: Any = None) -> int:
        """One point whose value is already converted to ``vtype`` (``enqueue_float_array`` ...);
        returns the single points now held where it went (``doubles`` or the flat list), what
        :meth:`singles_due` would compare for that one."""
        if self._lazy_at is not None:
            self._materialize()
        try:
            slot: _Slot | None = None if tags else self._untagged.get(channel)
        except TypeError:  # an unhashable channel: _slot_for names it
            slot = None
        if slot is not None and slot.vtype is vtype:  # a known series: no name to check
            t = ts if type(ts) is int and _INT64_MIN < ts <= _INT64_MAX else self._timestamp(ts)
        else:
            slot, new = self._slot_for(channel, tags)
            t = self._timestamp(ts)
            if new:
                slot = _Slot(-1, slot.key, vtype)
                self._register(slot, channel, tags)
            elif slot.vtype is not vtype:
                raise _bad_value(channel, slot, value, vtype.value)
        return self._append(slot, t, value)

    def checked_batches(self, batches: Sequence[tuple[SeriesBatch, int]]) -> list[tuple[SeriesBatch, int]]:
        """(batch, bytes) pairs already converted (another batch's :meth:`take`), not held (see
        :meth:`series_batches`): every batch checked (its type against its series', its columns
        and tags readable) before any series is registered; returns the pairs whose batch has
        points, each batch typed by the enum member (which the buffer compares by identity)."""
        if self._lazy_at is not None:
            self._materialize()
        seen: dict[SeriesKey, ValueType] = {}
        out: list[tuple[SeriesBatch, int]] = []
        for batch, nbytes in batches:
            vt = ValueType(batch.value_type)
            key = batch.key
            had = seen.get(key) or self.vtype_of(key)
            if had is not None and had is not vt and _all_empty_rows(vt, batch.values) and had in _ARRAY_TYPES:
                # An empty row is no more a double array than a string array: a batch of one
                # element (cross-bundle batching) typed [] as a double array by itself.
                vt = had
                batch = new_batch(key, vt, batch.timestamps, _empty_rows(vt, len(batch.timestamps)))
            if had is not None and had is not vt:
                raise SeriesTypeError(
                    f"series {key.describe()} is pinned to {had.value} by its first value; got a {vt.value} "
                    "column. Nothing from this call was buffered."
                )
            seen[key] = vt
            if len(batch.timestamps):
                if batch.value_type is not vt:
                    batch = new_batch(key, vt, batch.timestamps, batch.values)
                out.append((batch, nbytes))
        # Tags read before anything is registered: a key whose tags are not pairs registers none.
        new = {
            b.key: dict(b.key.tags) if b.key.tags else None for b, _ in out if b.key not in self._by_key
        }
        for key, tags in new.items():
            self._register(_Slot(-1, key, seen[key]), key.channel, tags)
        return out

    def vtype_of(self, key: SeriesKey) -> ValueType | None:
        """The type of a series known to the batch, else None."""
        if self._lazy_at is not None:
            self._materialize()
        slot = self._by_key.get(key)
        return slot.vtype if slot is not None else None

    def add_batch(self, batch: SeriesBatch, nbytes: int) -> None:
        """Points already converted by another batch's :meth:`take`, with their estimated bytes
        (cross-bundle batching)."""
        self._hold(self.checked_batches(((batch, nbytes),)))

    def _hold(self, batches: list[tuple[SeriesBatch, int]]) -> None:
        """Hold (batch, bytes) pairs of registered series, after everything appended before
        them (so each series keeps its points in arrival order)."""
        if not batches:
            return
        self._settle()
        for batch, nbytes in batches:
            self._put(self._by_key[batch.key], batch.timestamps, batch.values, nbytes)
            self.counted += len(batch.timestamps)

    def clear(self) -> None:
        """Drop everything, series and their types included (a new bundle starts afresh).

        Checked series names are kept (up to ``_KEYS_KEPT``): checking them is a pure function,
        and a one-element bundle of a wide record would otherwise check a hundred names.
        """
        keys, on_rebind = self._keys, self.on_rebind
        self.__init__(dict(self._base) or None, self._zone)  # type: ignore[misc]
        if len(keys) <= _KEYS_KEPT:
            self._keys = keys
        self.on_rebind = on_rebind
        self._rebound()

    # -- taking -----------------------------------------------------------------------------------

    def take(self) -> list[tuple[SeriesBatch, int]]:
        """Everything appended so far, as (batch, bytes) pairs in first-seen series order (a
        series' points in one or more batches, each with its estimated encoded bytes); empties
        the batch (series and their pinned types stay)."""
        self._settle()
        out: list[tuple[SeriesBatch, int]] = []
        filled, self._filled = self._filled, []
        for slot in sorted(filled, key=_code):
            key, vt = slot.key, slot.vtype
            out.extend((new_batch(key, vt, ts, vals), nbytes) for ts, vals, nbytes in slot.settled)
            slot.settled = ()
        self.counted = 0
        self.nbytes = 0
        return out

    def move_into(self, buffer: Buffer) -> None:
        """Everything appended so far into a stream's buffer, as :meth:`take` gives it, but for
        single doubles and the short rows of one block of wide records of floats: those go as
        loose points (``Buffer.add_loose``: a row's values, one per channel, each a point), so
        that nothing is made per series. Settled runs go first: what is pending came after them (rows
        and single points settle each other on arrival, so at most one of the two is pending)."""
        loose = self._take_doubles() if len(self.doubles) else self._take_plain_rows() if self._rows else None
        if self.points:
            add = buffer.add
            for batch, nbytes in self.take():
                add(batch.key, batch.value_type, batch.timestamps, batch.values, nbytes)
        if loose is not None:
            codes, ts, vals = loose
            buffer.add_loose(self._series_keys, codes, ts, vals, double_bytes(len(codes)))

    def _take_doubles(self) -> tuple[Any, Any, Any]:
        codes, ts, vals = self.doubles.take()
        return np.frombuffer(codes, np.int64), np.frombuffer(ts, np.int64), np.frombuffer(vals, _F64)

    def _take_plain_rows(self) -> tuple[Any, Any, Any] | None:
        """The rows of the one pending block, if it is plain (floats of double series, no gaps),
        no other block holds rows and they are fewer than ``_SERIES_ROWS``, as columns of points
        series by series in code order, each series' points in record order (a buffer holding
        only these need not sort them); else None, having taken nothing."""
        pending = [block for block in self._blocks.values() if block.ts]
        if len(pending) != 1 or not pending[0].plain or len(pending[0].ts) >= _SERIES_ROWS:
            return None
        block = pending[0]
        rows, width = len(block.ts), block.width
        row_codes = np.fromiter(map(_code, block.slots), np.int64, width)  # type: ignore[arg-type]
        order = np.argsort(row_codes, kind="stable")
        codes = np.repeat(row_codes[order], rows)
        ts = np.tile(np.fromiter(block.ts, np.int64, rows), width)
        # The matrix's columns in code order, each made a run: one gather copy.
        vals = block.matrix().T[order].reshape(-1)
        block.ts, block.seq = [], []
        self.counted -= rows * width
        self.nbytes -= rows * width * POINT_BYTES  # what row_bytes counted for them
        self._rows = False
        self._open_fast_path(True)
        return codes, ts, vals

    def _put(self, slot: _Slot, ts: Any, vals: Any, nbytes: int) -> None:
        settled = slot.settled
        if settled:
            settled.append((ts, vals, nbytes))
        else:
            self._filled.append(slot)
            slot.settled = [(ts, vals, nbytes)]
        self.nbytes += nbytes

    # -- internals ---------------------------------------------------------------------------------

    def _slot_for(self, channel: Any, tags: Any, field: str = "channel") -> tuple[_Slot, bool]:
        """The series of (channel, tags): (slot, False) if known, else (an unregistered slot
        with no type yet, True), names checked."""
        try:
            slot = self._tagged.get((channel, tuple(tags.items()))) if tags else self._untagged.get(channel)
        except (TypeError, AttributeError):
            slot = None
        if slot is not None:
            return slot, False
        key = self._key(channel, tags, field)
        known = self._by_key.get(key)
        if known is not None:
            self._register(known, channel, tags)  # a new spelling of known tags: cache it
            return known, False
        return _Slot(-1, key, _DOUBLE), True

    def _key(self, channel: Any, tags: Any, field: str) -> SeriesKey:
        cache_key: tuple[Any, Any] | None
        try:
            cache_key = (channel, tuple(tags.items()) if tags else ())
            known = self._keys.get(cache_key)
        except (TypeError, AttributeError):  # unhashable: the checks below name it
            cache_key = known = None
        if known is not None:
            return known
        key = self._checked_key(channel, tags, field)
        if cache_key is not None:
            self._keys[cache_key] = key
        return key

    def _checked_key(self, channel: Any, tags: Any, field: str) -> SeriesKey:
        if not isinstance(channel, str) or not channel:
            raise ElementError(field, f"channel must be a non-empty string, got {channel!r:.80}")
        if tags is not None and not isinstance(tags, Mapping):
            raise ElementError("tags", f"tags must be a mapping of str to str, got {type(tags).__name__}")
        try:
            SeriesKey.of(channel)
            check_texts(channel, "channel name", (channel,))
        except InputError as exc:
            raise ElementError(field, str(exc)) from None
        merged = {**dict(self._base), **tags} if tags and self._base else (tags or dict(self._base))
        try:
            key = SeriesKey.of(channel, merged)
            for k, v in key.tags:
                check_texts(channel, "tag", (k, v))
        except InputError as exc:
            raise ElementError("tags", str(exc)) from None
        return key

    def _value_for(self, slot: _Slot, new: bool, value: Any, name: Any = None) -> tuple[_Slot, Any]:
        """The value converted for its series, and the slot typed by it if new."""
        channel = slot.key.channel
        if value is None or (new and is_missing(value)):
            raise _missing(channel, value)
        if new:
            vt, converted = _first_value(channel, value)
            return _Slot(-1, slot.key, vt, type(value)), converted
        conv = slot.conv
        if conv is not None:
            try:
                return slot, conv(value)
            except (Mismatch, UnicodeEncodeError):
                raise (_missing(channel, value) if is_missing(value) else _bad_value(channel, slot, value)) from None
        if slot.vtype is _STRUCT:
            if not isinstance(value, Mapping):
                raise _bad_value(channel, slot, value)
            return slot, struct_json(channel, value)
        if not isinstance(value, (list, tuple, np.ndarray)):
            raise _bad_value(channel, slot, value)
        if slot.vtype is _DOUBLE_ARRAY:
            return slot, float_row(channel, value)
        return slot, string_row(channel, value)

    def _register(self, slot: _Slot, channel: str, tags: Any) -> None:
        known = self._by_key.get(slot.key)
        if known is None:
            slot.code = len(self._slots)
            self._slots.append(slot)
            self._series_keys.append(slot.key)
            self._by_key[slot.key] = slot
            known = slot
        if tags:
            self._tagged[(channel, tuple(tags.items()))] = known
        else:
            self._untagged[channel] = known
            if type(channel) is not str and not _c_level_str(type(channel)):
                # Its __eq__ (Python code) would run whenever a str of its name is looked up in
                # ``float_codes``, as the compiled ``WriteDoFn.process`` does: the checked paths
                # take it.
                return
            if known.vtype is _DOUBLE and known.unchecked is float:
                self._all_float_codes[channel] = known.code

    def _open_fast_path(self, on: bool) -> None:
        """Open (``on``) or close the fast path (``float_codes``): closed while rows are
        pending, so that a single point settles them first."""
        self.float_codes = self._all_float_codes if on else _NO_FLOAT_CODES
        self._rebound()

    def _rebound(self) -> None:
        if self.on_rebind is not None:
            self.on_rebind()

    def _settle(self) -> None:
        """Move single points and rows into their series' settled runs (at most one of the two is
        pending: each settles the other before it takes a point)."""
        if self.flat or len(self.doubles):
            self._settle_flat()
        if self._rows:
            self._settle_rows()

    def _settle_flat(self) -> None:
        """Single points into their series' settled runs: ``doubles`` as the columns they are, the
        flat list converted (their series are not the same, so either may go first)."""
        if len(self.doubles):
            codes, ts, vals = self.doubles.take()
            self._settle_singles(np.frombuffer(codes, np.int64), np.frombuffer(ts, np.int64), np.frombuffer(vals, _F64))
        if not self.flat:
            return
        flat, self.flat = self.flat, []
        n = len(flat) // 3
        code_list = flat[0::3]
        if code_list.count(code_list[0]) == n:  # one series (a count in C: one int object per code)
            self._add_settled(self._real_slots()[code_list[0]], np.fromiter(flat[1::3], np.int64, n), flat[2::3])
            self.counted += n
            return
        self._settle_singles(np.fromiter(code_list, np.intp, n), np.fromiter(flat[1::3], np.int64, n), flat[2::3])

    def _settle_singles(self, codes: Any, ts: Any, vals: Any) -> None:
        """Points of many series, in arrival order (codes and ts int arrays, values an array or
        a list), into each series' settled runs."""
        if self._lazy_at is not None:
            self._materialize()
        n = len(codes)
        slots = self._real_slots()
        if codes[0] == codes[-1] and (codes == codes[0]).all():  # one series
            self._add_settled(slots[int(codes[0])], ts, vals)
            self.counted += n
            return
        counts = np.bincount(codes, minlength=len(slots))
        present = np.flatnonzero(counts)
        # Series codes fit 16 bits nearly always, and numpy sorts those stably by radix: O(n)
        # where a timsort of interleaved series costs 5x more.
        order = (codes.astype(np.uint16) if len(slots) <= 65536 else codes).argsort(kind="stable")
        ts = ts[order]
        vals_col: Any = vals[order] if isinstance(vals, np.ndarray) else list(map(vals.__getitem__, order.tolist()))
        start = 0
        for code, count in zip(present.tolist(), counts[present].tolist(), strict=True):
            end = start + count
            self._add_settled(slots[code], ts[start:end], vals_col[start:end])
            start = end
        self.counted += n

    def _settle_rows(self) -> None:
        # Rows were counted by row_bytes; their settled runs count themselves (_put).
        pending = [block for block in self._blocks.values() if block.ts]
        self.nbytes -= sum(b.held_bytes() for b in pending)
        # Per series, its columns from every block; a series in several blocks (records of
        # different channel sets) has its pieces merged back into record order.
        if len(pending) == 1 and pending[0].plain:
            self._settle_plain_block(pending[0])
            return
        pieces: dict[int, list[tuple[Any, Any, Any]]] = {}
        for block in pending:
            n = len(block.ts)
            ts = np.fromiter(block.ts, np.int64, n)
            seq = np.fromiter(block.seq, np.int64, n)
            if block.plain:
                # Each column a contiguous row of the transpose, sharing one timestamps array
                # (the encoders write a shared array once).
                columns: Any = iter(block.matrix().T.copy())
            else:
                rows = block.rows
                columns = ([r[j] for r in rows] if slot is not None else None for j, slot in enumerate(block.slots))
            block.ts, block.rows, block.seq = [], [], []
            for slot, col in zip(block.slots, columns, strict=True):
                if slot is not None:
                    pieces.setdefault(slot.code, []).append((seq, ts, col))
        for code, parts in pieces.items():
            if len(parts) == 1:
                _, ts, col = parts[0]
            else:
                order = np.concatenate([p[0] for p in parts]).argsort(kind="stable")
                ts = np.concatenate([p[1] for p in parts])[order]
                if all(isinstance(p[2], np.ndarray) for p in parts):
                    col = np.concatenate([p[2] for p in parts])[order]
                else:
                    joined = [v for p in parts for v in p[2]]
                    col = list(map(joined.__getitem__, order.tolist()))
            self._add_settled(self._real_slots()[code], ts, col)
        self._rows = False
        self._open_fast_path(True)

    def _settle_plain_block(self, block: _Block) -> None:
        """The common case of _settle_rows: one block of floats, so no merging (one matrix, each
        column a contiguous row of its transpose, all sharing one timestamps array)."""
        ts = np.fromiter(block.ts, np.int64, len(block.ts))
        matrix = block.matrix().T.copy()
        block.ts, block.seq = [], []
        nbytes = double_bytes(len(ts))
        put = self._put
        for slot, col in zip(block.slots, matrix, strict=True):
            put(slot, ts, col, nbytes)  # type: ignore[arg-type]
        self._rows = False
        self._open_fast_path(True)

    def _add_settled(self, slot: _Slot, ts: Any, vals: Any) -> None:
        vt = slot.vtype
        dtype = vt.numpy_dtype
        if dtype is not None:
            col: Any = vals if isinstance(vals, np.ndarray) else np.array(vals, dtype=dtype)
        elif vt is _DOUBLE_ARRAY:
            col = double_rows_column(list(vals))
        else:
            col = list(vals)
        self._put(slot, ts, col, TS_BYTES * len(ts) + value_bytes(vt, col))


_ARRAY_TYPES = (_DOUBLE_ARRAY, _STRING_ARRAY)


def _all_empty_rows(vt: ValueType, values: Any) -> bool:
    """Whether an array column's rows are all empty (values in SeriesBatch form for ``vt``)."""
    if vt not in _ARRAY_TYPES:
        return False
    if isinstance(values, np.ndarray):
        return values.ndim == 2 and values.shape[1] == 0
    return all(len(r) == 0 for r in values)


def _empty_rows(vt: ValueType, n: int) -> Any:
    """``n`` empty rows of an array type, in SeriesBatch form."""
    if vt is _DOUBLE_ARRAY:
        return [np.empty(0, dtype=np.float64)] * n
    return [()] * n


def _c_level_str(cls: type) -> bool:
    """Whether a str subclass hashes and compares in C (``numpy.str_``, a subclass overriding
    neither), so that a dict lookup meeting one of its instances runs no Python code."""
    return isinstance(cls.__hash__, WrapperDescriptorType) and isinstance(cls.__eq__, WrapperDescriptorType)


def double_column(key: SeriesKey, ts: Any, values: Any) -> tuple[SeriesBatch, int]:
    """The (batch, bytes) pair of a checked double column (int64 ns, float64 values, copies the
    batch owns): ``series_batches``' fast path."""
    return new_batch(key, _DOUBLE, ts, values), double_bytes(len(ts))


def _point_bytes(value: Any) -> int:
    """Rough encoded bytes of one converted value and its timestamp (for hand-over sizes)."""
    if type(value) is str:
        return POINT_BYTES + text_bytes((value,))
    if type(value) is tuple:  # a string array (values.string_row)
        return POINT_BYTES + text_bytes(value) + STRING_ITEM_BYTES * len(value)
    if type(value) is bytes:  # a double array's packed doubles (values.float_row)
        return POINT_BYTES + len(value)
    try:
        return POINT_BYTES + DOUBLE_BYTES * len(value)  # a double-array row
    except TypeError:
        return POINT_BYTES  # a number


def _code(slot: _Slot) -> int:
    return slot.code


def _first_value(channel: str, value: Any) -> tuple[ValueType, Any]:
    """Type and converted form of a series' first value."""
    if isinstance(value, Mapping):
        return _STRUCT, struct_json(channel, value)
    if isinstance(value, (list, tuple, np.ndarray)):
        if isinstance(value, np.ndarray) and value.dtype.kind == "S":
            raise ElementError("value", f"array value of channel {channel!r:.80} holds bytes: decode it to str")
        if isinstance(value, np.ndarray) and value.dtype.kind in "UO" and value.size:
            items = value.tolist()
            if value.dtype.kind == "U" or all(isinstance(v, str) for v in items):
                return _STRING_ARRAY, string_row(channel, items)
            if any(isinstance(v, str) for v in items):
                raise ElementError("value", f"array value of channel {channel!r:.80} mixes strings and other values")
        if len(value) and all(isinstance(v, str) for v in value):
            return _STRING_ARRAY, string_row(channel, value)
        if isinstance(value, np.ndarray) and value.ndim != 1:
            raise ElementError("value", f"array value of channel {channel!r:.80} has {value.ndim} dimensions, not 1")
        return _DOUBLE_ARRAY, float_row(channel, value)
    return convert_scalar(channel, value)


def _bad_value(channel: str, slot: _Slot, value: Any, got: str | None = None) -> Exception:
    """The error for a value that does not fit its series (a conflict, or bad text/range)."""
    if isinstance(value, str) and not value.isascii():
        try:
            check_texts(channel, "string", (value,))
        except InputError as exc:
            return exc
    if slot.vtype is _INT64 and type(value) is int and value >= 0:
        return SeriesTypeError(
            f"series {slot.key.describe()} is int64 (pinned by its first value); {value} is beyond int64"
        )
    return SeriesTypeError(
        f"series {slot.key.describe()} is pinned to {slot.vtype.value} by its first value; "
        f"got {got or describe(value)}. Nothing from this call was buffered."
    )


def _missing(channel: str, value: Any) -> ElementError:
    return ElementError(
        "value",
        f"value of channel {channel!r:.80} is {'None' if value is None else f'missing ({value})'}: a missing "
        "value is no point, so leave the point out (in a record or a table a missing value is a gap)",
    )


def _timestamp(ts: Any) -> int:
    if type(ts) is int and _INT64_MIN < ts <= _INT64_MAX:
        return ts
    try:
        return timestamp_ns(ts)
    except InputError as exc:
        raise ElementError("timestamp", str(exc)) from None


def _zoned(zone: str) -> Callable[[Any], int]:
    """:func:`_timestamp` for a batch whose naive readings are in ``zone``."""

    def timestamp(ts: Any) -> int:
        if type(ts) is int and _INT64_MIN < ts <= _INT64_MAX:
            return ts
        try:
            return timestamp_ns(ts, zone)
        except InputError as exc:
            raise ElementError("timestamp", str(exc)) from None

    return timestamp


def _tag_items(tags: Any) -> tuple[tuple[str, str], ...]:
    if not tags:
        return ()
    try:
        return tuple(tags.items())
    except AttributeError:
        raise ElementError("tags", f"tags must be a mapping of str to str, got {type(tags).__name__}") from None


def is_column(value: Any) -> bool:
    """Whether a field holds a column (of a series element) rather than one value."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0  # a 0-d array is one value
    if isinstance(value, (list, tuple)):
        return True
    # pandas' Series, Index and arrays (a pandas Timestamp has no length); Arrow arrays.
    return _is_arrow_array(value) or (type(value).__module__.startswith("pandas") and hasattr(value, "__len__"))


def _is_arrow_array(value: Any) -> bool:
    # pyarrow's Array subclasses (Int64Array ...) and ChunkedArray; pyarrow is not imported here.
    return type(value).__module__.startswith("pyarrow") and hasattr(value, "to_numpy") and hasattr(value, "null_count")


def _naive_arrow(col: Any) -> bool:
    """Whether ``col`` is an Arrow timestamp column without a zone."""
    import pyarrow as pa

    return _is_arrow_array(col) and pa.types.is_timestamp(col.type) and col.type.tz is None


def _as_column(value: Any) -> Any:
    """A column as the batch reads it: numpy arrays as they are, pandas objects as Arrow arrays
    (by pandas' missing rule), Arrow arrays as they are (values' nulls are gaps; timestamps go
    to ``timestamps_ns``, which reads Arrow), other sequences as lists."""
    if type(value) is np.ndarray:  # the common case, before the slower module and ABC tests
        return value
    if frames.is_pandas(value):
        return frames.pandas_column(value)
    if _is_arrow_array(value):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, list, tuple)):
        return list(value)
    return value
