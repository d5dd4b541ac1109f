"""The data model every stage shares: series keys, value types and exact timestamps.

A *series* is a channel plus a tag set; ``tags=None`` and ``tags={}`` name the same series. Each
series is pinned to one :class:`ValueType`, fixed by its first value. Timestamps are always int64
nanoseconds since the Unix epoch (UTC); every accepted input form converts without rounding.
"""

from __future__ import annotations

import datetime as _dt
import enum
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from beam_nominal.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "MAX_NAME_CHARS",
    "KeyTuple",
    "SeriesKey",
    "ValueType",
    "arrow_timestamps_ns",
    "check_timezone",
    "holds_int64_min",
    "is_missing",
    "localize",
    "localize_each",
    "naive_error",
    "timestamp_ns",
    "timestamps_ns",
]

#: Longest channel name, tag key/value or dataset rid the server accepts.
MAX_NAME_CHARS = 1024

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


class ValueType(str, enum.Enum):
    """The value type of a series; the string value is its name on the wire and on disk.

    ``bool`` values are stored as ``INT64`` (0 or 1): Nominal has no boolean type, and int64 keeps
    them exact and summable.
    """

    DOUBLE = "double"
    STRING = "string"
    INT64 = "int64"
    UINT64 = "uint64"
    DOUBLE_ARRAY = "double_array"
    STRING_ARRAY = "string_array"
    STRUCT = "struct"

    @property
    def is_array(self) -> bool:
        return self in (ValueType.DOUBLE_ARRAY, ValueType.STRING_ARRAY)

    @property
    def numpy_dtype(self) -> np.dtype[Any] | None:
        """The dtype of a column of this type, or None where values are Python objects."""
        return _NUMPY_DTYPES.get(self)

    @classmethod
    def of_scalar(cls, value: Any) -> ValueType:
        """The value type a single Python/numpy value maps to.

        Raises:
            TypeError: the value has no Nominal type (None, bytes, an arbitrary object ...).
        """
        # bool first: it is a subclass of int.
        if isinstance(value, (bool, np.bool_)):
            return cls.INT64
        if isinstance(value, (float, np.floating)):
            return cls.DOUBLE
        if isinstance(value, np.unsignedinteger):
            # As of_dtype: unsigned types narrower than 64 bits fit int64 exactly.
            return cls.UINT64 if value.dtype.itemsize == 8 else cls.INT64
        if isinstance(value, (int, np.integer)):
            if _INT64_MIN <= value <= _INT64_MAX:
                return cls.INT64
            if 0 <= value <= _UINT64_MAX:
                return cls.UINT64
            raise InvalidTypeError(f"integer {value} is outside both int64 and uint64")
        if isinstance(value, str):
            return cls.STRING
        if isinstance(value, Mapping):
            return cls.STRUCT
        raise InvalidTypeError(f"unsupported value type {type(value).__name__}: {value!r:.80}")

    @classmethod
    def of_dtype(cls, dtype: np.dtype[Any]) -> ValueType:
        """The value type of a numpy column."""
        kind = dtype.kind
        if kind == "f":
            return cls.DOUBLE
        if kind == "b" or (kind == "i"):
            return cls.INT64
        if kind == "u":
            # Unsigned types narrower than 64 bits fit int64 exactly, which is what users expect
            # of e.g. a uint16 sensor word.
            return cls.UINT64 if dtype.itemsize == 8 else cls.INT64
        if kind in "UST":
            return cls.STRING
        raise InvalidTypeError(f"unsupported numpy dtype {dtype}")


_NUMPY_DTYPES: dict[ValueType, np.dtype[Any]] = {
    ValueType.DOUBLE: np.dtype(np.float64),
    ValueType.INT64: np.dtype(np.int64),
    ValueType.UINT64: np.dtype(np.uint64),
}


class SeriesKey(NamedTuple):
    """Channel plus normalised tags (sorted ``(key, value)`` pairs). Hashable and cheap."""

    channel: str
    tags: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, channel: str, tags: Mapping[str, str] | None = None) -> SeriesKey:
        """Build a key, checking names. ``tags=None`` and ``{}`` give the same key.

        Raises:
            ValueError: an empty or over-long channel, or a tag that is not str -> str.
        """
        if not isinstance(channel, str) or not channel:
            raise InvalidValueError(f"channel must be a non-empty string, got {channel!r:.80}")
        if len(channel) > MAX_NAME_CHARS:
            raise InvalidValueError(f"channel {channel[:40]!r}... is {len(channel)} characters, over {MAX_NAME_CHARS}")
        if not tags:
            return cls(channel, ())
        for k, v in tags.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidValueError(f"tags of channel {channel!r} must map str to str, got {k!r}: {v!r:.80}")
            if len(k) > MAX_NAME_CHARS or len(v) > MAX_NAME_CHARS:
                raise InvalidValueError(
                    f"tag {k[:40]!r}: {v[:40]!r} of channel {channel!r:.80} is over {MAX_NAME_CHARS} characters"
                )
        return cls(channel, tuple(sorted(tags.items())))

    @property
    def tag_dict(self) -> dict[str, str]:
        return dict(self.tags)

    def describe(self) -> str:
        """Human-readable name for error messages: ``channel{k=v,...}``."""
        if not self.tags:
            return repr(self.channel)
        return f"{self.channel!r} {{{', '.join(f'{k}={v}' for k, v in self.tags)}}}"


#: A series' key as a plain tuple ``(channel, tags)``, equal to its SeriesKey and hashing
#: alike: how a million series' keys are held. The garbage collector stops tracking a plain
#: tuple of strs, never a tuple subclass, and walks every tracked object at a full collection.
KeyTuple = tuple[str, tuple[tuple[str, str], ...]]

_new_key = tuple.__new__


def series_key(key: KeyTuple) -> SeriesKey:
    """``key`` as a SeriesKey (itself if it is one)."""
    return key if type(key) is SeriesKey else _new_key(SeriesKey, key)


# ---------------------------------------------------------------------------------------------
# Timestamps
# ---------------------------------------------------------------------------------------------

_ISO = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<h>\d{2}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<frac>\d{1,9}))?)?"
    r"(?P<tz>Z|z|[+-]\d{2}:?\d{2})?$"
)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_NS_UNITS = {
    "W": 7 * 86_400 * 10**9,
    "D": 86_400 * 10**9,
    "h": 3_600 * 10**9,
    "m": 60 * 10**9,
    "s": 10**9,
    "ms": 10**6,
    "us": 10**3,
    "ns": 1,
}

#: What each naive container is told to do, after what every one is told (name the zone).
_NAIVE_FIXES = {
    "str": "add the offset to the text (…Z, +02:00)",
    "datetime": "give it a tzinfo (.replace(tzinfo=datetime.timezone.utc) if it is UTC)",
    "pandas": "localize it (.tz_localize('UTC') if it is UTC; a DatetimeIndex or Series alike)",
    "datetime64": "give int64 ns instead (.astype('datetime64[ns]').view('int64') if they are UTC)",
    "arrow": "cast the column to a zoned type (pa.timestamp('ns', tz='UTC') if it is UTC) or to int64 ns",
}


def naive_error(what: str, shown: str) -> InvalidValueError:
    """The one refusal of a naive timestamp: what it is, and the fixes (``what`` keys _NAIVE_FIXES)."""
    return InvalidValueError(
        f"{shown} has no timezone, so which instant it is is ambiguous (UTC? local time?): "
        f"{_NAIVE_FIXES[what]}, or name the zone its readings are in (timezone='UTC', or e.g. 'Europe/Berlin')"
    )


def check_timezone(timezone: Any, owner: str = "timezone") -> str | None:
    """``timezone`` checked: None, or a zone name Arrow knows ('UTC', an IANA name such as
    'Europe/Berlin', or a fixed offset '+02:00'). Returns it.

    Raises:
        TypeError / ValueError: anything else, shown.
    """
    if timezone is None:
        return None
    if not isinstance(timezone, str) or not timezone:
        raise TypeError(f"{owner} must be a zone name such as 'UTC' or 'Europe/Berlin', got {timezone!r}")
    try:
        localize(np.zeros(1, dtype=np.int64), timezone)
    except ValueError:
        raise ValueError(
            f"{owner} {timezone!r} is not a zone Arrow knows: give 'UTC', an IANA name such as 'Europe/Berlin' "
            "or a fixed offset such as '+02:00'"
        ) from None
    return timezone


def localize(wall_ns: npt.NDArray[np.int64], timezone: str) -> npt.NDArray[np.int64]:
    """Naive readings (wall-clock nanoseconds, as if they were UTC) in ``timezone``, as int64 ns
    since the epoch: the only place a naive reading is given a zone, so every container
    shifts alike. A reading a DST change makes ambiguous or skips is refused, never guessed.

    Raises:
        ValueError: an unknown zone, or a reading that does not name one instant in it.
    """
    if timezone == "UTC":
        return wall_ns
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        zoned = pc.assume_timezone(
            pa.array(wall_ns, pa.timestamp("ns")), timezone=timezone, ambiguous="raise", nonexistent="raise"
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError) as exc:
        raise InvalidValueError(f"naive timestamps in {timezone!r}: {exc}") from None
    return np.asarray(zoned.cast(pa.int64()).to_numpy(), dtype=np.int64)


def localize_each(
    wall_ns: npt.NDArray[np.int64], timezone: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """:func:`localize` reading by reading: the int64 ns, and whether each reading names one
    instant in ``timezone`` (where not, its ns is 0), for callers that fail such readings alone.

    Raises:
        ValueError: an unknown zone.
    """
    if timezone == "UTC":
        return wall_ns, np.ones(len(wall_ns), dtype=bool)
    import pyarrow as pa
    import pyarrow.compute as pc

    naive = pa.array(wall_ns, pa.timestamp("ns"))
    try:
        # A reading a DST change skips or repeats has two candidate instants; any other, one.
        first, last = (
            np.asarray(
                pc.assume_timezone(naive, timezone=timezone, ambiguous=pick, nonexistent=pick)
                .cast(pa.int64())
                .to_numpy(),
                dtype=np.int64,
            )
            for pick in ("earliest", "latest")
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError) as exc:
        raise InvalidValueError(f"naive timestamps in {timezone!r}: {exc}") from None
    one = first == last
    return np.where(one, first, 0), one


def _localize_one(wall_ns: int, timezone: str | None, what: str, shown: str) -> int:
    if timezone is None:
        raise naive_error(what, shown)
    if timezone == "UTC":
        return wall_ns
    return int(localize(np.array([_check_range(wall_ns, shown)], dtype=np.int64), timezone)[0])


def _check_range(ns: int, original: Any) -> int:
    if not _INT64_MIN < ns <= _INT64_MAX:
        raise InvalidValueError(f"timestamp {original!r:.80} is outside the int64 nanosecond range (1677..2262)")
    return ns


def _datetime_ns(value: _dt.datetime, timezone: str | None = None) -> int:
    if value.tzinfo is None or value.utcoffset() is None:
        wall = _datetime_ns(value.replace(tzinfo=_dt.timezone.utc))
        return _localize_one(wall, timezone, "datetime", f"naive datetime {value.isoformat()}")
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def _iso_ns(text: str, timezone: str | None = None) -> int:
    m = _ISO.match(text.strip())
    if m is None:
        raise InvalidValueError(
            f"timestamp string {text!r:.80} is not ISO-8601 with a timezone (e.g. 2024-01-02T03:04:05.123456789Z)"
        )
    try:
        base = _dt.datetime.fromisoformat(f"{m['date']}T{m['h']}:{m['m']}:{m['s'] or '00'}").replace(
            tzinfo=_dt.timezone.utc
        )
    except ValueError as exc:
        raise InvalidValueError(f"timestamp string {text!r:.80} is not a valid date and time: {exc}") from None
    tz = m["tz"]
    frac = (m["frac"] or "").ljust(9, "0")
    wall = _datetime_ns(base) + int(frac or 0)
    if tz is None:
        return _localize_one(wall, timezone, "str", f"ISO-8601 timestamp string {text!r:.80}")
    offset_s = 0
    if tz not in ("Z", "z"):
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:])
        # The regex takes any two digits; +99:99 or -2400 would shift the point by 100 h or a day.
        if hours > 23 or minutes > 59:
            raise InvalidValueError(f"timestamp string {text!r:.80} has UTC offset {tz}, outside -23:59..+23:59")
        offset_s = sign * (hours * 3600 + minutes * 60)
    return wall - offset_s * 10**9


# Units finer than a nanosecond: how many make one.
_SUB_NS_UNITS = {"ps": 10**3, "fs": 10**6, "as": 10**9}


def _datetime64_ns(value: np.datetime64) -> int:
    """A datetime64 of any unit in nanoseconds, exactly, in Python ints (no range check).

    numpy's ``astype`` to ``datetime64[ns]`` wraps on overflow for every unit and truncates finer
    ones, so it is used for none: months and years go through days (calendar-exact), sub-ns
    units must be whole nanoseconds.
    """
    unit, count = np.datetime_data(value.dtype)
    if unit in ("M", "Y"):
        value = value.astype("datetime64[D]")
        unit, count = "D", 1
    raw = int(value.astype(np.int64)) * count
    if unit in _NS_UNITS:
        return raw * _NS_UNITS[unit]
    if unit in _SUB_NS_UNITS:
        ns, rest = divmod(raw, _SUB_NS_UNITS[unit])
        if rest:
            raise InvalidValueError(f"timestamp {value!r:.80} is not a whole number of nanoseconds")
        return ns
    raise InvalidValueError(f"timestamp {value!r:.80} has unsupported datetime64 unit {unit!r}")


def is_missing(value: Any) -> bool:
    """Whether ``value`` is a missing-value marker: None, pandas' ``NA`` or ``NaT``, numpy's
    ``NaT``. Such a value is no point (a gap in a record, a table or a column); as a timestamp it
    is refused, since a point without a time cannot land. A float NaN is a value, not missing."""
    if value is None:
        return True
    name = type(value).__name__
    if name in ("NAType", "NaTType"):
        return True
    return isinstance(value, np.datetime64) and bool(np.isnat(value))


def timestamp_ns(value: Any, timezone: str | None = None) -> int:
    """Convert one timestamp to int64 nanoseconds since the Unix epoch, exactly.

    Accepts int nanoseconds, aware ``datetime``, ISO-8601 strings with a timezone and up to nine
    fractional digits, pandas ``Timestamp`` with a zone and Beam ``Timestamp``; with
    ``timezone`` (a zone name, see :func:`check_timezone`) also naive readings.

    One rule for zones, in every container: an int count of nanoseconds since the epoch (and a
    Beam ``Timestamp``, a count of microseconds) is UTC by definition. Every other form is a
    reading of a calendar and clock: one with a zone or offset is exact; a naive one (a naive
    ``datetime`` or pandas ``Timestamp``, an ISO string without an offset, any numpy
    ``datetime64``, an Arrow ``timestamp`` without a tz) is refused, with the fix in the
    message, unless ``timezone`` names the zone its readings are in. Nothing is ever assumed.

    Raises:
        ValueError: naive readings without ``timezone``, NaT/NA, out-of-range values,
            unparseable strings.
        TypeError: floats (seconds or nanoseconds? ambiguous) and other types.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return _check_range(int(value), value)
    if isinstance(value, str):
        return _check_range(_iso_ns(value, timezone), value)
    if is_missing(value):
        raise InvalidValueError(
            f"timestamp is missing ({value}): drop the rows without a time first (e.g. df.dropna())"
        )
    if isinstance(value, np.datetime64):
        wall = _check_range(_datetime64_ns(value), value)
        return _localize_one(wall, timezone, "datetime64", f"numpy {value!r:.80}")
    # pandas.Timestamp is a datetime subclass carrying nanoseconds in .value; check it first.
    if type(value).__name__ == "Timestamp" and hasattr(value, "nanosecond") and hasattr(value, "value"):
        if value.tzinfo is None:
            return _localize_one(int(value.value), timezone, "pandas", f"naive pandas Timestamp {value}")
        return _check_range(int(value.value), value)
    if isinstance(value, _dt.datetime):
        return _check_range(_datetime_ns(value, timezone), value)
    if hasattr(value, "micros") and type(value).__module__.startswith("apache_beam"):
        return _check_range(int(value.micros) * 1000, value)
    if isinstance(value, (float, np.floating)):
        raise InvalidTypeError(
            f"float timestamp {value!r} is ambiguous: give int nanoseconds, a datetime or an ISO string"
        )
    raise InvalidTypeError(f"unsupported timestamp type {type(value).__name__}: {value!r:.80}")


def holds_int64_min(ns: npt.NDArray[np.int64]) -> bool:
    """Whether an int64 column holds -2**63, which is no timestamp (the int64 NaT pattern).

    ``min()``, not the cheaper ``argmin()``: argmin lets go of the GIL at any size, and a stream's
    caller then waits for its upload thread to give it back, call after call; a ufunc's reduction
    keeps the GIL up to 500 elements (docs/benchmarks.md, "Measurements behind design choices").
    """
    return bool(ns.shape[0]) and _minimum(ns) == _INT64_MIN


#: The ufunc's own reduce: ``ndarray.min`` reaches it through two Python-level calls.
_minimum = np.minimum.reduce


def timestamps_ns(values: Any, timezone: str | None = None) -> npt.NDArray[np.int64]:
    """Convert a column of timestamps to an int64 nanosecond array, vectorised where possible.

    Integer arrays are taken as nanoseconds; ``datetime64`` arrays of any unit are converted
    exactly (overflow is an error, not a wrap) and, being naive, localized in ``timezone`` or
    refused (:func:`timestamp_ns`'s one zone rule); Arrow arrays go through
    :func:`arrow_timestamps_ns`. Other sequences go element by element through
    :func:`timestamp_ns`.
    """
    if _is_arrow(values):
        return arrow_timestamps_ns(values, timezone)
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            # A 2-D int array would pass as nanoseconds and fail the whole request at encoding.
            raise InvalidValueError(f"timestamps must be 1-D, got an array of shape {values.shape}")
        if values.dtype.kind == "i":
            out = values.astype(np.int64, copy=False)
            if holds_int64_min(out):
                # Refused as a scalar too: -2**63 is no timestamp (the int64 NaT pattern).
                raise InvalidValueError(
                    "timestamp -9223372036854775808 is outside the int64 nanosecond range (1677..2262)"
                )
            return out
        if values.dtype.kind == "u":
            if values.size and values.max() > _INT64_MAX:
                raise InvalidValueError("timestamp above the int64 nanosecond range")
            return values.astype(np.int64)
        if values.dtype.kind == "M":
            if np.isnat(values).any():
                i = int(np.argmax(np.isnat(values)))
                raise InvalidValueError(f"timestamp at index {i} is missing (NaT): drop the rows without a time first")
            wall = _datetime64_array_ns(values)
            if timezone is None:
                raise naive_error("datetime64", f"numpy {values.dtype} array")
            return localize(wall, timezone)
        elif values.dtype.kind == "f":
            raise InvalidTypeError("float timestamps are ambiguous: give int nanoseconds or datetime64")
        else:
            values = values.tolist()
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = timestamp_ns(v, timezone)
        except (InvalidTypeError, InvalidValueError) as exc:
            raise type(exc)(f"timestamps[{i}]: {exc}") from None
    return out


def _datetime64_array_ns(values: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """A datetime64 array's wall-clock readings in ns, exactly (overflow is an error)."""
    unit, count = np.datetime_data(values.dtype)
    raw = values.view(np.int64)
    scale = _NS_UNITS.get(unit)
    if scale is not None and count == 1:
        if scale == 1:
            return raw
        limit = _INT64_MAX // scale
        if raw.size and (raw.max() > limit or raw.min() < -limit):
            raise InvalidValueError(f"timestamp outside the int64 nanosecond range ({unit} input)")
        return raw * scale
    # Calendar, sub-nanosecond and multiplied units: element by element, exactly.
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = _check_range(_datetime64_ns(v), v)
        except ValueError as exc:
            raise InvalidValueError(f"timestamps[{i}]: {exc}") from None
    return out


def _is_arrow(values: Any) -> bool:
    # pyarrow's Array subclasses and ChunkedArray; pyarrow is not imported here.
    return type(values).__module__.startswith("pyarrow") and hasattr(values, "null_count") and hasattr(values, "type")


def arrow_timestamps_ns(col: Any, timezone: str | None = None, name: str = "timestamp") -> npt.NDArray[np.int64]:
    """An Arrow timestamp or integer column as int64 ns, exactly (no nulls allowed).

    A ``timestamp`` with a tz is exact; one without (pandas' and Parquet's default
    ``timestamp[us]``) is a naive reading: localized in ``timezone``, else refused.
    Integers are nanoseconds.

    Raises:
        ValueError: nulls, naive timestamps without ``timezone``, values beyond int64 ns.
        TypeError: another type.
    """
    import pyarrow as pa

    if col.null_count:
        raise InvalidValueError(
            f"{col.null_count} null timestamps (of {len(col)}): a point needs a time, "
            "so drop the rows without one first (e.g. df.dropna(subset=[...]))"
        )
    t = col.type
    if pa.types.is_timestamp(t):
        try:
            raw = col.cast(pa.timestamp("ns", t.tz)).cast(pa.int64())
        except pa.ArrowInvalid as exc:
            raise InvalidValueError(f"timestamp outside the int64 nanosecond range: {exc}") from None
        ns = np.asarray(raw.to_numpy(), dtype=np.int64)
        if t.tz is not None:
            return ns
        if timezone is None:
            raise naive_error("arrow", f"column {name!r} of Arrow type {t}")
        return localize(ns, timezone)
    if pa.types.is_integer(t):
        return timestamps_ns(col.to_numpy(), timezone)
    raise InvalidTypeError(f"timestamp column {name!r} has type {t}; use a zoned timestamp or int64 ns")
