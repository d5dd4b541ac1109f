"""The bad-input catalogue (docs/reliability.md's table): element and value kinds, each with its
defined outcome, shared by the unit test (WriteDoFn on a recording target) and the Beam test
(WriteToNominal on FnApiRunner into a real local server).

Every case has channels of its own (``c<NN>...``), so in one pipeline no case touches another's
series; ``context`` elements go first in the same bundle (a type pinned by an earlier element).
``beam=False``: Beam's coders cannot carry the element between stages (lone surrogates).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

B = 1_700_000_000_000_000_000
NS_2024 = 1_704_067_200 * 10**9
NAN_PAYLOAD = np.frombuffer(np.uint64(0x7FF0_0000_0000_0001).tobytes(), np.float64)[0]  # a signalling NaN
# A point that read back: (channel, tags, value type, timestamp ns, value as the store reads it:
# list for arrays, JSON text for structs).
Point = tuple[str, dict[str, str], str, int, Any]


def exact(v: Any) -> Any:
    """A comparable form that tells -0.0 from 0.0 and NaN payloads apart, equates equal NaNs and
    keeps int vs float."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list | tuple):
        return tuple(exact(x) for x in v)
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    return (type(v).__name__, v)


class Stored(NamedTuple):
    points: list[Point]


class Failed(NamedTuple):
    error: str  # FailedElement.error
    words: tuple[str, ...]  # each in FailedElement.reason


class Case(NamedTuple):
    id: str
    kind: str  # the docs table's row
    element: Any
    outcome: Stored | Failed
    context: tuple[tuple[Any, list[Point]], ...] = ()
    beam: bool = True


class _Point(NamedTuple):
    channel: str
    timestamp: int
    value: float


def _cases() -> list[Case]:
    import apache_beam as beam
    from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

    out: list[Case] = []

    def ok(cid: str, kind: str, element: Any, *points: Point, **kw: Any) -> None:
        out.append(Case(cid, kind, element, Stored(list(points)), **kw))

    def bad(cid: str, kind: str, element: Any, error: str, *words: str, **kw: Any) -> None:
        out.append(Case(cid, kind, element, Failed(error, words), **kw))

    def d(ch: str, value: Any, ts: int = B, tags: dict[str, str] | None = None, vt: str = "double") -> Point:
        return (ch, tags or {}, vt, ts, value)

    # -- channels ----------------------------------------------------------------------------
    bad("ch-missing", "no channel field", {"timestamp": B, "value": 1.0}, "ElementError", "no channel")
    bad("ch-empty", "empty channel", ("", B, 1.0), "ElementError", "channel must be a non-empty string")
    bad("ch-none", "channel None", (None, B, 1.0), "ElementError", "channel must be a non-empty string", "None")
    bad("ch-int", "channel not a str", (5, B, 1.0), "ElementError", "channel must be a non-empty string")
    bad("ch-1025", "channel over 1,024 characters", ("c" * 1025, B, 1.0), "ElementError", "over 1024")
    ok("ch-1024", "channel of exactly 1,024 characters", ("c" * 1024, B, 1.0), d("c" * 1024, 1.0))
    ok("ch-unicode", "non-ASCII channel", ("c07 température ✓ 日本", B, 1.0), d("c07 température ✓ 日本", 1.0))
    ok("ch-control", "control characters in a channel", ("c08\x00\n\t", B, 1.0), d("c08\x00\n\t", 1.0))
    bad(
        "ch-surrogate",
        "lone surrogate in a channel",
        ("c09\udfff", B, 1.0),
        "ElementError",
        "surrogates not allowed",
        beam=False,
    )
    bad("wide-empty-channel", "empty channel in a wide record", (B, {"": 1.0, "c10": 2.0}), "ElementError", "channel")
    # -- tags --------------------------------------------------------------------------------
    ok("tags-none", "tags None (same series as no tags)", ("c11", B, 1.0, None), d("c11", 1.0))
    ok("tags-empty", "tags {}", ("c12", B, 1.0, {}), d("c12", 1.0))
    ok(
        "tag-empty-kv",
        "empty tag key and value",
        ("c13", B, 1.0, {"": "", "k": ""}),
        d("c13", 1.0, tags={"": "", "k": ""}),
    )
    ok(
        "tag-1024",
        "tag value of exactly 1,024 characters",
        ("c14", B, 1.0, {"k": "v" * 1024}),
        d("c14", 1.0, tags={"k": "v" * 1024}),
    )
    bad(
        "tag-value-1025",
        "tag value over 1,024 characters",
        ("c15", B, 1.0, {"k": "v" * 1025}),
        "ElementError",
        "over 1024",
    )
    bad(
        "tag-key-1025", "tag key over 1,024 characters", ("c16", B, 1.0, {"k" * 1025: "v"}), "ElementError", "over 1024"
    )
    bad("tags-list", "tags not a mapping", ("c17", B, 1.0, ["k"]), "ElementError", "tags must be a mapping")
    bad("tag-int", "tag value not a str", ("c18", B, 1.0, {"k": 1}), "ElementError", "str to str")
    many = {f"k{i:03d}": str(i) for i in range(100)}
    ok("tags-100", "100 tags", ("c19", B, 1.0, many), d("c19", 1.0, tags=many))
    bad(
        "tag-surrogate",
        "lone surrogate in a tag",
        ("c20", B, 1.0, {"k": "\ud800"}),
        "ElementError",
        "surrogates not allowed",
        beam=False,
    )
    # -- scalar values -----------------------------------------------------------------------
    bad("value-none", "value None", ("c21", B, None), "ElementError", "is None")
    ok("bool", "bool (int64 0/1)", ("c22", B, True), d("c22", 1, vt="int64"))
    ok(
        "bool-then-int",
        "bool then int in one series",
        ("c23", B + 1, 7),
        d("c23", 7, B + 1, vt="int64"),
        context=((("c23", B, False), [d("c23", 0, vt="int64")]),),
    )
    bad(
        "bool-in-double",
        "bool into a double series",
        ("c24", B + 1, True),
        "SeriesTypeError",
        "pinned to double",
        context=((("c24", B, 1.5), [d("c24", 1.5)]),),
    )
    bad(
        "float-in-int",
        "float into an int64 series (mixed types in a bundle)",
        ("c25", B + 1, 1.5),
        "SeriesTypeError",
        "pinned to int64",
        context=((("c25", B, 1), [d("c25", 1, vt="int64")]),),
    )
    bad(
        "str-in-double",
        "text into a double series",
        ("c26", B + 1, "n/a"),
        "SeriesTypeError",
        "pinned to double",
        context=((("c26", B, 20.5), [d("c26", 20.5)]),),
    )
    ok("int-2p53", "int beyond 2**53 (exact)", ("c27", B, 2**53 + 1), d("c27", 2**53 + 1, vt="int64"))
    ok("int-uint64", "int above int64 (uint64)", ("c28", B, 2**64 - 1), d("c28", 2**64 - 1, vt="uint64"))
    bad("int-2p64", "int above uint64", ("c29", B, 2**64), "InvalidTypeError", "outside both int64 and uint64")
    bad("int-below", "int below int64", ("c30", B, -(2**63) - 1), "InvalidTypeError", "outside both int64 and uint64")
    ok("nan", "NaN (stored exactly)", ("c31", B, math.nan), d("c31", math.nan))
    ok("nan-payload", "NaN with a payload (bits kept)", ("c32", B, NAN_PAYLOAD), d("c32", NAN_PAYLOAD))
    ok(
        "inf",
        "+inf and -inf",
        ("c33", [B, B + 1], [math.inf, -math.inf]),
        d("c33", math.inf),
        d("c33", -math.inf, B + 1),
    )
    ok("neg-zero", "-0.0 (sign kept)", ("c34", B, -0.0), d("c34", -0.0))
    ok(
        "np-scalars",
        "numpy scalars",
        (B, {"c35f": np.float32(0.5), "c35i": np.int8(-3), "c35b": np.bool_(True)}),
        d("c35f", 0.5),
        d("c35i", -3, vt="int64"),
        d("c35b", 1, vt="int64"),
    )
    ok("np-uint64", "numpy uint64 max", ("c36", B, np.uint64(2**64 - 1)), d("c36", 2**64 - 1, vt="uint64"))
    bad(
        "decimal",
        "Decimal value",
        ("c37", B, decimal.Decimal("1.5")),
        "InvalidTypeError",
        "unsupported value type Decimal",
    )
    bad("complex", "complex value", ("c38", B, 1j), "InvalidTypeError", "unsupported value type complex")
    bad("set", "set value", ("c39", B, {1}), "InvalidTypeError", "unsupported value type set")
    bad(
        "bytes-value",
        "bytes value (invalid UTF-8)",
        ("c40", B, b"\xff\xfe"),
        "InvalidTypeError",
        "unsupported value type bytes",
    )
    bad(
        "str-surrogate",
        "lone surrogate in a string value",
        ("c41", B, "a\ud800"),
        "InvalidValueError",
        "surrogates not allowed",
        beam=False,
    )
    ok("str-empty", "empty string", ("c42", B, ""), d("c42", "", vt="string"))
    huge = "x" * (4 << 20)
    ok("str-4mib", "4 MiB string", ("c43", B, huge), d("c43", huge, vt="string"))
    ok("str-unicode", "non-ASCII, astral and NUL text", ("c44", B, "é✓😀\x00"), d("c44", "é✓😀\x00", vt="string"))
    # -- structs -----------------------------------------------------------------------------
    ok(
        "struct",
        "mapping (JSON struct)",
        ("c45", B, {"a": {"b": [1, None]}}),
        d("c45", '{"a":{"b":[1,null]}}', vt="struct"),
    )
    ok("struct-empty", "empty mapping", ("c46", B, {}), d("c46", "{}", vt="struct"))
    bad(
        "struct-nan",
        "NaN inside a struct (not JSON)",
        ("c47", B, {"a": math.nan}),
        "InvalidTypeError",
        "not JSON-serialisable",
    )
    bad(
        "struct-object",
        "object inside a struct",
        ("c48", B, {"a": object()}),
        "InvalidTypeError",
        "not JSON-serialisable",
        beam=False,
    )
    # -- arrays ------------------------------------------------------------------------------
    ok(
        "array",
        "list of floats (double array)",
        ("c49", B, [1.0, math.nan]),
        d("c49", [1.0, math.nan], vt="double_array"),
    )
    ok("array-empty", "empty list (an empty double array)", ("c50", B, []), d("c50", [], vt="double_array"))
    ok("string-array", "list of str", ("c51", B, ["a", ""]), d("c51", ["a", ""], vt="string_array"))
    bad("array-mixed", "list of str and float", ("c52", B, ["a", 1.0]), "InvalidTypeError", "double array", "not str")
    bad(
        "array-ragged",
        "ragged nested list as a point value",
        ("c53", B, [[1.0], [2.0, 3.0]]),
        "InvalidTypeError",
        "double array",
    )
    bad("array-2d", "2-D numpy array as a point value", ("c54", B, np.ones((2, 2))), "ElementError", "2 dimensions")
    # -- series elements ---------------------------------------------------------------------
    bad(
        "series-mismatch",
        "series of mismatched lengths",
        ("c55", [B], [1.0, 2.0]),
        "ElementError",
        "1 timestamps but 2 values",
    )
    ok("series-empty", "empty series (nothing stored, not failed)", ("c56", [], []))
    ok(
        "series-2d",
        "series of a 2-D matrix (a row per timestamp)",
        ("c57", [B, B + 1], np.array([[1.0, 2.0], [3.0, 4.0]])),
        d("c57", [1.0, 2.0], vt="double_array"),
        d("c57", [3.0, 4.0], B + 1, vt="double_array"),
    )
    ok(
        "series-ragged",
        "series of ragged rows",
        ("c58", [B, B + 1], [[1.0], [2.0, 3.0]]),
        d("c58", [1.0], vt="double_array"),
        d("c58", [2.0, 3.0], B + 1, vt="double_array"),
    )
    bad("series-3d", "series of a 3-D array", ("c59", [B], np.ones((1, 2, 2))), "InvalidTypeError", "1-D or 2-D")
    bad(
        "series-object",
        "series of an object array mixing float and str",
        ("c60", np.array([B, B + 1]), np.array([1.0, "a"], dtype=object)),
        "SeriesTypeError",
        "values[1]",
    )
    bad("series-none-inside", "None inside a series", ("c61", [B, B + 1], [1.0, None]), "SeriesTypeError", "values[1]")
    bad(
        "series-2d-ts",
        "2-D timestamps",
        ("c62", np.full((2, 2), B), [1.0, 2.0]),
        "ElementError",
        "timestamps must be 1-D",
    )
    ok(
        "series-dup-ts",
        "equal timestamps (both kept, in order)",
        ("c63", [B, B], [1.0, 2.0]),
        d("c63", 1.0),
        d("c63", 2.0),
    )
    ok(
        "series-unsorted",
        "timestamps out of order",
        ("c64", [B + 1, B], [1.0, 2.0]),
        d("c64", 1.0, B + 1),
        d("c64", 2.0),
    )
    # -- timestamps --------------------------------------------------------------------------
    ok("ts-np-int", "numpy int64 timestamp", ("c65", np.int64(B), 1.0), d("c65", 1.0))
    ok(
        "ts-aware",
        "aware datetime (+05:00)",
        ("c66", dt.datetime(2024, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=5))), 1.0),
        d("c66", 1.0, NS_2024),
    )
    bad("ts-naive", "naive datetime", ("c67", dt.datetime(2024, 1, 1), 1.0), "ElementError", "naive datetime")
    ok(
        "ts-iso",
        "ISO string with 9 fractional digits",
        ("c68", "2024-01-01T00:00:00.000000001Z", 1.0),
        d("c68", 1.0, NS_2024 + 1),
    )
    ok("ts-iso-offset", "ISO string with an offset", ("c69", "2024-01-01T05:30:00+05:30", 1.0), d("c69", 1.0, NS_2024))
    bad(
        "ts-iso-naive",
        "ISO string without a timezone",
        ("c70", "2024-01-01T00:00:00", 1.0),
        "ElementError",
        "has no timezone",
        "add the offset",
        "timezone='UTC'",
    )
    bad(
        "ts-iso-10",
        "ISO string with 10 fractional digits",
        ("c71", "2024-01-01T00:00:00.1234567891Z", 1.0),
        "ElementError",
        "ISO-8601",
    )
    bad(
        "ts-iso-offset-99",
        "ISO offset +99:99",
        ("c72", "2024-01-01T00:00:00+99:99", 1.0),
        "ElementError",
        "UTC offset +99:99",
    )
    bad("ts-iso-month-13", "ISO month 13", ("c73", "2024-13-01T00:00:00Z", 1.0), "ElementError", "not a valid date")
    bad("ts-garbage", "unparseable timestamp string", ("c74", "yesterday", 1.0), "ElementError", "ISO-8601")
    bad("ts-float", "float timestamp", ("c75", 1.5e18, 1.0), "ElementError", "float timestamp")
    bad("ts-none", "timestamp None", ("c76", None, 1.0), "ElementError", "timestamp is missing (None)")
    bad("ts-bool", "timestamp bool", ("c77", True, 1.0), "ElementError", "unsupported timestamp type bool")
    bad(
        "ts-int64-min", "timestamp -2**63", ("c78", -(2**63), 1.0), "ElementError", "outside the int64 nanosecond range"
    )
    ok("ts-int64-max", "timestamp 2**63-1", ("c79", 2**63 - 1, 1.0), d("c79", 1.0, 2**63 - 1))
    bad("ts-2p63", "timestamp 2**63", ("c80", 2**63, 1.0), "ElementError", "outside the int64 nanosecond range")
    # datetime64 has no zone: refused, naming the fixes (model.timestamp_ns's one zone rule).
    bad(
        "ts-dt64-ns",
        "datetime64[ns] (naive)",
        ("c81", np.datetime64(B, "ns"), 1.0),
        "ElementError",
        "has no timezone",
        "view('int64')",
        "timezone='UTC'",
    )
    bad(
        "ts-dt64-month", "datetime64[M]", ("c82", np.datetime64("2024-01", "M"), 1.0), "ElementError", "no timezone"
    )
    bad(
        "ts-dt64-3000",
        "datetime64[D] in the year 3000",
        ("c83", np.datetime64("3000-01-01", "D"), 1.0),
        "ElementError",
        "outside",
    )
    bad(
        "ts-dt64-3000-M",
        "datetime64[M] array in the year 3000",
        ("c84", np.array(["3000-01"], "datetime64[M]"), [1.0]),
        "ElementError",
        "outside",
    )
    bad("ts-nat", "NaT", ("c85", np.datetime64("NaT"), 1.0), "ElementError", "NaT")
    bad(
        "ts-ps",
        "datetime64[ps] with a sub-ns remainder",
        ("c86", np.datetime64(1500, "ps"), 1.0),
        "ElementError",
        "whole number of nanoseconds",
    )
    bad(
        "ts-ps-whole", "datetime64[ps]", ("c87", np.datetime64(2000, "ps"), 1.0), "ElementError", "no timezone"
    )
    ok("ts-beam", "Beam Timestamp", ("c88", BeamTimestamp(1_700_000_000), 1.0), d("c88", 1.0))
    bad(
        "ts-float-array",
        "float timestamps array",
        ("c89", np.array([1.5e18]), [1.0]),
        "ElementError",
        "float timestamps",
    )
    # -- shapes ------------------------------------------------------------------------------
    bad("shape-int", "an int as the element", 42, "ElementError", "unsupported element type int")
    bad("shape-bytes", "bytes as the element", b"\xff", "ElementError", "unsupported element type bytes")
    bad("shape-tuple-1", "tuple of 1", ("c90",), "ElementError", "a tuple of 1")
    bad("shape-tuple-5", "tuple of 5", ("c91", B, 1.0, {}, 5), "ElementError", "a tuple of 5")
    bad("shape-ts-only", "record with only a timestamp", {"timestamp": B}, "ElementError", "no channels")
    bad("wide-empty", "wide record with no channels", (B, {}), "ElementError", "no channels")
    ok("wide-gaps", "wide record of gaps only (nothing stored)", (B, {"c92a": None, "c92b": None}))
    bad(
        "wide-one-bad",
        "wide record with one bad value (none of it stored)",
        (B, {"c93a": 1.0, "c93b": 2**64}),
        "InvalidTypeError",
        "'c93b'",
    )
    ok("wide-values", "record {timestamp, values}", {"timestamp": B, "values": {"c94": 1.0}}, d("c94", 1.0))
    ok("row", "beam.Row point", beam.Row(channel="c95", timestamp=B, value=1.0), d("c95", 1.0))
    ok("namedtuple", "NamedTuple point", _Point("c96", B, 2.0), d("c96", 2.0))
    bad(
        "table-no-ts",
        "Arrow table without a timestamp column",
        pa.table({"c97": [1.0]}),
        "ElementError",
        "no 'timestamp' column",
    )
    ok(
        "table-empty",
        "empty Arrow table",
        pa.table({"timestamp": pa.array([], pa.int64()), "c98": pa.array([], pa.float64())}),
    )
    ok(
        "table-nulls",
        "Arrow table with nulls (gaps)",
        pa.table({"timestamp": [B, B + 1], "c99": [None, 1.0]}),
        d("c99", 1.0, B + 1),
    )
    bad(
        "array-object-mixed",
        "array value: an object array mixing float and str",
        ("c100", B, np.array([1.0, "a"], dtype=object)),
        "ElementError",
        "mixes strings",
    )
    bad(
        "array-int-2p53",
        "array value: an int beyond 2**53 in a double array",
        ("c101", B, [1.0, 2**53 + 1]),
        "InvalidTypeError",
        "not exact as a double",
    )
    bad("array-bytes", "array value: a numpy bytes array", ("c102", B, np.array([b"x"])), "ElementError", "bytes")
    # numpy turns a complex into a float by dropping its imaginary part (with only a warning).
    bad(
        "array-complex-tuple",
        "array value: a numpy complex number in a tuple of floats",
        ("c103", B, (1.0, np.complex128(2 + 3j))),
        "InvalidTypeError",
        "real numbers",
    )
    bad(
        "array-object-int-2p53",
        "array value: an int beyond 2**53 in an object ndarray",
        ("c105", B, np.array([1.0, 2**53 + 1], dtype=object)),
        "InvalidTypeError",
        "not exact as a double",
    )
    bad(
        "array-complex-ndarray",
        "array value: a complex ndarray",
        ("c104", B, np.array([1 + 2j, 3j])),
        "InvalidTypeError",
        "real numbers",
    )
    bad(
        "table-column-twice",
        "Arrow table with two columns of one name",
        pa.Table.from_arrays([pa.array([B]), pa.array([1.0]), pa.array([2.0])], names=["timestamp", "c105", "c105"]),
        "ElementError",
        "more than one column named 'c105'",
    )
    bad(
        "series-int-str",
        "series of ints with a str among them",
        ("c106", [B, B + 1], [1, "a"]),
        "SeriesTypeError",
        "values[1]",
    )
    bad(
        "table-string-list-null-item",
        "Arrow table with a null inside a string-list value",
        pa.Table.from_arrays([pa.array([B]), pa.array([["a", None]])], names=["timestamp", "c107"]),
        "InvalidTypeError",
        "string array element None is not a str",
    )
    return out


CASES = _cases()
assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
