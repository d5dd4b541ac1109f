"""PointBatch: every element shape lands in exactly the right per-series batches, and every bad
element raises having left the batch exactly as it was."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import math
import os
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._pipeline.staging import ElementError, PointBatch
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import SeriesKey, ValueType

BASE = 1_700_000_000_000_000_000
NAN = float("nan")

Tags = tuple[tuple[str, str], ...]
# One series as take() must give it: (channel, sorted tag items, value type, [(ts, value)]).
Expected = list[tuple[str, Tags, str, list[tuple[int, Any]]]]


def _add(b: PointBatch, channel: Any, ts: Any, value: Any) -> None:
    """A point as the element readers append it: the fast path, else the checked one."""
    if not b.add_fast(channel, ts, value):
        b.add_point(channel, ts, value, None)


# -- reading take() back --------------------------------------------------------------------------


def _canon(vtype: ValueType, v: Any) -> Any:
    """One value, exactly: floats by their hex (so -0.0 and NaN compare), ints and strs by type."""
    if vtype is ValueType.DOUBLE:
        assert type(v) is float, v
        return v.hex()
    if vtype in (ValueType.INT64, ValueType.UINT64):
        assert type(v) is int, v
        return v
    if vtype in (ValueType.STRING, ValueType.STRUCT):
        assert type(v) is str, v
        return v
    if vtype is ValueType.DOUBLE_ARRAY:
        return tuple(float(x).hex() for x in v)
    assert all(type(x) is str for x in v), v
    return tuple(v)


def _values(batch: SeriesBatch) -> list[Any]:
    vt, vals = ValueType(batch.value_type), batch.values
    if vt.numpy_dtype is not None:
        assert isinstance(vals, np.ndarray) and vals.dtype == vt.numpy_dtype and vals.ndim == 1, (vt, vals)
        return list(vals.tolist())
    if vt is ValueType.DOUBLE_ARRAY:
        if isinstance(vals, np.ndarray):
            assert vals.dtype == np.float64 and vals.ndim == 2
            return [row.tolist() for row in vals]
        assert all(isinstance(r, np.ndarray) and r.dtype == np.float64 and r.ndim == 1 for r in vals), vals
        return [r.tolist() for r in vals]
    assert isinstance(vals, list), vals
    return list(vals)


def series_of(taken: list[tuple[SeriesBatch, int]]) -> Expected:
    """take()'s batches merged per series, checking each series' batches are adjacent."""
    out: Expected = []
    for c, nbytes in taken:
        assert isinstance(c.timestamps, np.ndarray) and c.timestamps.dtype == np.int64, c.timestamps
        vals = _values(c)
        assert len(vals) == len(c.timestamps) > 0
        assert isinstance(nbytes, int) and nbytes > 0
        vt = ValueType(c.value_type)
        pts = [(t, _canon(vt, v)) for t, v in zip(c.timestamps.tolist(), vals, strict=True)]
        if out and out[-1][:2] == (c.key.channel, c.key.tags):
            assert out[-1][2] == vt.value, c
            out[-1][3].extend(pts)
        else:
            assert all(s[:2] != (c.key.channel, c.key.tags) for s in out), f"{c.key} split by another series"
            out.append((c.key.channel, c.key.tags, vt.value, pts))
    return out


def assert_taken(batch: PointBatch, expected: Expected, ordered: bool = True) -> None:
    """take() gives exactly ``expected``: series in that order, each with those points (in that
    order unless ``ordered`` is false)."""
    got = series_of(batch.take())
    want = [(ch, tags, vt, [(t, _canon(ValueType(vt), v)) for t, v in pts]) for ch, tags, vt, pts in expected]
    assert [s[:3] for s in got] == [s[:3] for s in want]
    for g, w in zip(got, want, strict=True):
        if ordered:
            assert g[3] == w[3], g[:3]
        else:
            assert sorted(g[3]) == sorted(w[3]), g[:3]
    assert batch.points == 0 and batch.take() == []


def _raw(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_raw(x) for x in v))
    if isinstance(v, float):
        return ("f", v.hex())
    return (type(v).__name__, v)


def raw(taken: list[tuple[SeriesBatch, int]]) -> list[Any]:
    """Everything take() gave, batch boundaries, dtypes and byte estimates included."""
    return [(c.key, ValueType(c.value_type).value, _raw(c.timestamps), _raw(c.values), n) for c, n in taken]


# -- every shape ----------------------------------------------------------------------------------


def test_points_untagged_and_tagged_in_first_seen_series_order() -> None:
    b = PointBatch(timezone="UTC")  # naive readings (the datetime64) are UTC
    _add(b, "f", BASE + 2, 1.5)
    _add(b, "i", BASE, 2**53 + 1)
    b.add_point("f", BASE + 1, -0.0, {"site": "a"})  # another series: other tags
    _add(b, "f", BASE + 1, NAN)
    _add(b, "u", BASE, 2**63 + 5)
    _add(b, "u", BASE + 1, 7)  # a small int joins the uint64 series pinned by its first value
    _add(b, "i", BASE + 1, -(2**63))
    _add(b, "bool", BASE, True)
    _add(b, "bool", BASE + 1, np.bool_(False))
    _add(b, "s", "2024-01-01T00:00:00.123456789Z", "héllo ✓")
    _add(b, "s", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), "")
    _add(b, "f", np.int64(BASE + 3), np.float64(2.5))
    _add(b, "npi", np.datetime64(BASE + 4, "ns"), np.int32(-4))
    _add(b, "npu", BASE, np.uint64(2**64 - 1))
    _add(b, "st", BASE, {"b": [1, 2], "a": {"x": None}})
    _add(b, "da", BASE, [1.0, 2])
    _add(b, "da", BASE + 1, np.array([3.0]))
    _add(b, "da", BASE + 2, (4.0, 5.0, 6.0))
    _add(b, "sa", BASE, ["x", "y"])
    _add(b, "sa", BASE + 1, np.array(["z"]))
    _add(b, "f", BASE, 3.0)  # out of timestamp order: stays where it arrived
    assert b.points == 21
    assert_taken(
        b,
        [
            ("f", (), "double", [(BASE + 2, 1.5), (BASE + 1, NAN), (BASE + 3, 2.5), (BASE, 3.0)]),
            ("i", (), "int64", [(BASE, 2**53 + 1), (BASE + 1, -(2**63))]),
            ("f", (("site", "a"),), "double", [(BASE + 1, -0.0)]),
            ("u", (), "uint64", [(BASE, 2**63 + 5), (BASE + 1, 7)]),
            ("bool", (), "int64", [(BASE, 1), (BASE + 1, 0)]),
            ("s", (), "string", [(1704067200123456789, "héllo ✓"), (1704067200000000000, "")]),
            ("npi", (), "int64", [(BASE + 4, -4)]),
            ("npu", (), "uint64", [(BASE, 2**64 - 1)]),
            ("st", (), "struct", [(BASE, '{"a":{"x":null},"b":[1,2]}')]),
            ("da", (), "double_array", [(BASE, [1.0, 2.0]), (BASE + 1, [3.0]), (BASE + 2, [4.0, 5.0, 6.0])]),
            ("sa", (), "string_array", [(BASE, ["x", "y"]), (BASE + 1, ["z"])]),
        ],
    )


def test_add_fast_takes_only_floats_of_known_untagged_double_series() -> None:
    b = PointBatch({"site": "a"})
    assert not b.add_fast("x", BASE, 1.0)  # not known yet: the checked path pins it
    b.add_point("x", BASE, 1.0, None)
    b.add_point("s", BASE, "text", None)
    b.add_point("i", BASE, 1, None)
    b.add_point("t", BASE, 1.0, {"k": "v"})
    held = len(b.doubles)
    assert b.add_fast("x", BASE + 1, 2.0) == held + 1  # the single doubles now held
    refused = [
        ("x", BASE, 1),  # an int: a double series refuses it, on the checked path
        ("x", 1.5, 1.0),
        ("x", True, 1.0),
        ("x", 2**63, 1.0),
        ("x", -(2**63), 1.0),
        ("x", np.int64(BASE), 1.0),
        ("s", BASE, 1.0),  # a string series
        ("i", BASE, 1.0),  # an int64 series
        ("t", BASE, 1.0),  # a tagged series' channel: the untagged series is not known
        ("y", BASE, 1.0),
        (["x"], BASE, 1.0),
    ]
    for point in refused:
        assert not b.add_fast(*point), point
    assert b.points == 5
    b.take()
    assert b.add_fast("x", BASE + 2, 3.0)  # pins outlive take()
    b.clear()
    assert b.points == 0 and not b.add_fast("x", BASE + 3, 4.0)  # but not clear()
    _add(b, "x", BASE + 3, "now text")
    assert_taken(b, [("x", (("site", "a"),), "string", [(BASE + 3, "now text")])])


def test_batch_tags_apply_and_element_tags_win_on_a_clash() -> None:
    b = PointBatch({"site": "a", "unit": "m"})
    _add(b, "x", BASE, 1.0)
    b.add_point("x", BASE + 1, 2.0, {"unit": "ft"})  # wins over the batch's unit
    b.add_point("x", BASE + 2, 3.0, {"rig": "r1"})  # merged with both batch tags
    b.add_point("x", BASE + 3, 4.0, {"unit": "m", "site": "a"})  # the batch's own tags: same series as untagged
    b.add_point("x", BASE + 4, 5.0, {})  # {} is no tags
    b.add_point("x", BASE + 5, 6.0, {"rig": "r1", "unit": "ft"})
    b.add_point("x", BASE + 6, 7.0, {"unit": "ft", "rig": "r1"})  # same tags, other order
    b.add_record(BASE + 7, {"x": 8.0, "y": "on"}, {"unit": "ft"})
    b.add_series("x", [BASE + 8], [9.0], {"site": "b"})
    a_m, a_ft = (("site", "a"), ("unit", "m")), (("site", "a"), ("unit", "ft"))
    assert_taken(
        b,
        [
            ("x", a_m, "double", [(BASE, 1.0), (BASE + 3, 4.0), (BASE + 4, 5.0)]),
            ("x", a_ft, "double", [(BASE + 1, 2.0), (BASE + 7, 8.0)]),
            ("x", (("rig", "r1"), ("site", "a"), ("unit", "m")), "double", [(BASE + 2, 3.0)]),
            ("x", (("rig", "r1"), ("site", "a"), ("unit", "ft")), "double", [(BASE + 5, 6.0), (BASE + 6, 7.0)]),
            ("y", a_ft, "string", [(BASE + 7, "on")]),
            ("x", (("site", "b"), ("unit", "m")), "double", [(BASE + 8, 9.0)]),
        ],
    )


def test_wide_records_of_one_shape_keep_their_order() -> None:
    b = PointBatch()
    for i in (3, 1, 2, 0):
        b.add_record(BASE + i, {"w.t": i / 4, "w.mode": f"m{i}", "w.n": 2**60 + i, "w.gap": None})
    assert b.points == 12
    order = [3, 1, 2, 0]
    assert_taken(
        b,
        [
            ("w.t", (), "double", [(BASE + i, i / 4) for i in order]),
            ("w.mode", (), "string", [(BASE + i, f"m{i}") for i in order]),
            ("w.n", (), "int64", [(BASE + i, 2**60 + i) for i in order]),
        ],
    )


def test_all_double_records_keep_special_values_exactly() -> None:
    b = PointBatch()
    specials = [-0.0, NAN, math.inf, 5e-324, 2.0**1023]
    for i, v in enumerate(specials):
        b.add_record(BASE + i, {"a": v, "b": -v})
    assert_taken(
        b,
        [
            ("a", (), "double", [(BASE + i, v) for i, v in enumerate(specials)]),
            ("b", (), "double", [(BASE + i, -v) for i, v in enumerate(specials)]),
        ],
    )


class _Record(Mapping[str, Any]):
    """A Mapping that is not a dict."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class _Name(str):
    """A channel named by a str subclass."""


@pytest.mark.parametrize("mapping", [dict, OrderedDict, MappingProxyType, _Record], ids=lambda m: m.__name__)
def test_records_of_floats_land_exactly_whatever_their_mapping_and_the_spelling_of_their_channels(
    mapping: Callable[[dict[str, Any]], Mapping[str, Any]],
) -> None:
    records = [
        {"a": 0.5, "b": -0.0, "c": NAN},
        {"".join(["a"]): 1.5, "b": 2.5, "c": 3.5},  # equal names, not the same objects
        {_Name("a"): 4.5, "b": 5.5, "c": 6.5},
        {"b": 7.5, "a": 8.5, "c": 9.5},  # another order
        {"a": 10.5, "b": np.float64(11.5), "c": 12.5},
        {"a": 13.5, "b": None, "c": 14.5},  # a gap
        {"a": 15.5, "b": 16.5, "c": 17.5, "d": 18.5},  # one channel more
        {"a": 19.5, "b": 20.5, "c": 21.5},
    ]
    b = PointBatch()
    for i, record in enumerate(records):
        b.add_record(BASE + i, mapping(record))
    points = {
        ch: [(BASE + i, float(r[ch])) for i, r in enumerate(records) if r.get(ch) is not None] for ch in "abcd"
    }
    assert_taken(b, [(ch, (), "double", points[ch]) for ch in "abcd"])


def test_wide_records_with_gaps_skip_fields_tags_and_mixed_shapes() -> None:
    b = PointBatch()
    skip = ("timestamp", "tags")
    for i in range(3):  # one channel set, repeated: rows of one block
        b.add_record(BASE + i, {"w.t": i / 4, "w.mode": f"m{i}", "w.n": 2**60 + i})
    b.add_record(BASE + 3, {"w.t": 9.0, "w.mode": None, "w.n": 3})  # a gap
    b.add_record(BASE + 4, {"w.t": np.float64(-0.0), "w.mode": "x", "w.n": True})  # other Python types
    flat = {"timestamp": BASE + 5, "w.t": 5.0, "tags": None, "w.mode": "flat", "w.n": None}
    b.add_record(flat["timestamp"], flat, flat["tags"], skip)
    tagged = {"timestamp": "2024-01-01T00:00:00Z", "w.t": 6.0, "tags": {"src": "t"}}
    b.add_record(tagged["timestamp"], tagged, tagged["tags"], skip)
    b.add_record(BASE + 7, {"w.arr": [1.0, 2.0], "w.t": 7.0, "w.st": {"k": 1}})  # arrays and structs
    b.add_record(BASE + 8, {"w.t": 10.0, "w.n": None, "w.mode": None})
    b.add_record(BASE + 9, {"w.t": 11.0, "w.mode": "m9", "w.n": 9})  # the first block again
    b.add_record(BASE + 11, {"timestamp": BASE + 11, "w.t": None, "tags": None}, None, skip)  # gaps only
    assert b.points == 3 * 3 + 2 + 3 + 2 + 1 + 3 + 1 + 3
    times = [(0, 0.0), (1, 0.25), (2, 0.5), (3, 9.0), (4, -0.0), (5, 5.0), (7, 7.0), (8, 10.0), (9, 11.0)]
    assert_taken(
        b,
        [
            ("w.t", (), "double", [(BASE + i, v) for i, v in times]),
            ("w.mode", (), "string", [(BASE + i, f"m{i}") for i in (0, 1, 2)]
             + [(BASE + 4, "x"), (BASE + 5, "flat"), (BASE + 9, "m9")]),
            ("w.n", (), "int64", [(BASE + i, 2**60 + i) for i in (0, 1, 2)] + [(BASE + 3, 3), (BASE + 4, 1),
                                                                               (BASE + 9, 9)]),
            ("w.t", (("src", "t"),), "double", [(1704067200000000000, 6.0)]),
            ("w.arr", (), "double_array", [(BASE + 7, [1.0, 2.0])]),
            ("w.st", (), "struct", [(BASE + 7, '{"k":1}')]),
        ],
    )


def test_arrival_order_within_a_series_across_shapes() -> None:
    b = PointBatch()
    b.add_record(BASE + 1, {"a": 1.0})
    _add(b, "a", BASE + 2, 2.0)
    b.add_record(BASE + 3, {"a": 3.0, "b": 0.0})
    b.add_record(BASE + 4, {"a": 4.0})
    assert_taken(
        b, [("a", (), "double", [(BASE + i, float(i)) for i in (1, 2, 3, 4)]), ("b", (), "double", [(BASE + 3, 0.0)])]
    )


def test_series_elements_of_every_column_form() -> None:
    b = PointBatch(timezone="UTC")  # naive readings (the datetime64 column) are UTC
    t3 = [BASE, BASE + 1, BASE + 1]
    _add(b, "s.f", BASE - 1, 9.0)  # a single point first: it stays first in its series
    b.add_series("s.f", np.array(t3), np.array([0.5, -0.0, NAN]))
    b.add_series("s.i64", t3, np.array([1, -2, 2**62], dtype=np.int64))
    b.add_series("s.u64", t3[:2], np.array([2**64 - 1, 0], dtype=np.uint64))
    b.add_series("s.i32", t3[:2], np.array([7, -7], dtype=np.int32))
    b.add_series("s.u16", t3[:2], np.array([65535, 0], dtype=np.uint16))
    b.add_series("s.bool", t3[:2], np.array([True, False]))
    b.add_series("s.li", t3[:2], [1, -(2**63)])
    b.add_series("s.lu", t3[:2], [2**63, 1])  # a value beyond int64: the column is uint64
    b.add_series("s.lf", (BASE, BASE + 2), (0.25, 1e300))
    b.add_series("s.ls", t3[:2], ["a", "é"])
    b.add_series("s.2d", t3[:2], np.array([[1, 2], [3, 4]], dtype=np.int16))
    b.add_series("s.rows", t3[:2], [[1.0, 2.0], np.array([3.0])])
    b.add_series("s.st", t3[:2], [{"a": 1}, {"b": [1, 2], "a": None}])
    b.add_series("s.npstr", t3[:2], np.array(["x", "yz"]))
    b.add_series("s.objstr", t3[:2], np.array(["p", "q"], dtype=object))
    b.add_series("s.sa", t3[:2], [["a", "b"], ["c"]])
    b.add_series("s.iso", ["2024-01-01T00:00:00Z", "2024-01-01T00:00:00.000000001+00:00"], [1.0, 2.0])
    b.add_series("s.dt64", np.array([BASE // 1000, BASE // 1000 + 1], dtype="datetime64[us]"), [1.0, 2.0])
    b.add_series("s.arrow", pa.chunked_array([[BASE], [BASE + 1]]), pa.chunked_array([[1.5, 2.5]]))
    b.add_series("s.tag", [BASE], [1.0], {"k": "v"})
    b.add_series("s.empty", [], [])  # nothing, and no type pinned
    _add(b, "s.empty", BASE, "now a string")
    b.add_series("s.f", [BASE + 5], [6.0])  # appended after the first run of the series
    assert_taken(
        b,
        [
            ("s.f", (), "double", [(BASE - 1, 9.0), (BASE, 0.5), (BASE + 1, -0.0), (BASE + 1, NAN), (BASE + 5, 6.0)]),
            ("s.i64", (), "int64", [(BASE, 1), (BASE + 1, -2), (BASE + 1, 2**62)]),
            ("s.u64", (), "uint64", [(BASE, 2**64 - 1), (BASE + 1, 0)]),
            ("s.i32", (), "int64", [(BASE, 7), (BASE + 1, -7)]),
            ("s.u16", (), "int64", [(BASE, 65535), (BASE + 1, 0)]),
            ("s.bool", (), "int64", [(BASE, 1), (BASE + 1, 0)]),
            ("s.li", (), "int64", [(BASE, 1), (BASE + 1, -(2**63))]),
            ("s.lu", (), "uint64", [(BASE, 2**63), (BASE + 1, 1)]),
            ("s.lf", (), "double", [(BASE, 0.25), (BASE + 2, 1e300)]),
            ("s.ls", (), "string", [(BASE, "a"), (BASE + 1, "é")]),
            ("s.2d", (), "double_array", [(BASE, [1.0, 2.0]), (BASE + 1, [3.0, 4.0])]),
            ("s.rows", (), "double_array", [(BASE, [1.0, 2.0]), (BASE + 1, [3.0])]),
            ("s.st", (), "struct", [(BASE, '{"a":1}'), (BASE + 1, '{"a":null,"b":[1,2]}')]),
            ("s.npstr", (), "string", [(BASE, "x"), (BASE + 1, "yz")]),
            ("s.objstr", (), "string", [(BASE, "p"), (BASE + 1, "q")]),
            ("s.sa", (), "string_array", [(BASE, ["a", "b"]), (BASE + 1, ["c"])]),
            ("s.iso", (), "double", [(1704067200000000000, 1.0), (1704067200000000001, 2.0)]),
            ("s.dt64", (), "double", [(BASE, 1.0), (BASE + 1000, 2.0)]),
            ("s.arrow", (), "double", [(BASE, 1.5), (BASE + 1, 2.5)]),
            ("s.tag", (("k", "v"),), "double", [(BASE, 1.0)]),
            ("s.empty", (), "string", [(BASE, "now a string")]),
        ],
    )


def test_series_of_pyarrow_arrays() -> None:
    b = PointBatch()
    b.add_series("x", pa.array([BASE, BASE + 1]), pa.array([1.5, 2.5]))
    assert_taken(b, [("x", (), "double", [(BASE, 1.5), (BASE + 1, 2.5)])])


def test_series_elements_copy_their_columns() -> None:
    b = PointBatch()
    ts, vals = np.array([BASE, BASE + 1]), np.array([1.0, 2.0])
    b.add_series("x", ts, vals)
    ts[0], vals[0] = 0, -1.0  # the caller reuses its arrays
    assert_taken(b, [("x", (), "double", [(BASE, 1.0), (BASE + 1, 2.0)])])


def test_a_tables_columns_share_one_timestamps_copy_of_their_own() -> None:
    # One copy per table, not per column: the batches must not hold the caller's Arrow memory,
    # and a column with nulls gets its own (filtered) timestamps.
    ts = pa.array(np.arange(BASE, BASE + 4, dtype=np.int64))
    batch = pa.RecordBatch.from_pydict({"timestamp": ts, "a": [1.0, 2.0, 3.0, 4.0], "b": [5.0, 6.0, 7.0, 8.0]})
    for table in (batch, pa.Table.from_batches([batch, batch])):
        a, b = (c.timestamps for c, _ in PointBatch().table_batches(table, "timestamp"))
        assert a is b and a.flags.writeable and a.flags.owndata
        assert not np.shares_memory(a, ts.to_numpy())
    with_nulls = pa.RecordBatch.from_pydict({"timestamp": ts, "a": [1.0, None, 3.0, 4.0], "b": [5.0, 6.0, 7.0, 8.0]})
    a, b = (c.timestamps for c, _ in PointBatch().table_batches(with_nulls, "timestamp"))
    assert a.tolist() == [BASE, BASE + 2, BASE + 3] and b.tolist() == list(range(BASE, BASE + 4))


def test_a_table_with_two_columns_of_one_name_is_refused_naming_it() -> None:
    table = pa.Table.from_arrays(
        [pa.array([BASE, BASE + 1]), pa.array([1.0, 2.0]), pa.array([3.0, 4.0])], names=["timestamp", "x", "x"]
    )
    b = PointBatch()
    with pytest.raises(ElementError, match="more than one column named 'x'"):
        b.add_table(table, "timestamp")
    assert b.points == 0


def test_arrow_tables_with_nulls_as_gaps() -> None:
    b = PointBatch()
    table = pa.table(
        {
            "t.x": [1.0, None, 3.0],
            "timestamp": pa.array([BASE, BASE + 1, BASE + 2], pa.int64()),
            "t.s": ["a", None, "c"],
            "t.none": pa.array([None, None, None], pa.float64()),  # no points: no series, no type
            "t.i": pa.array([1, -2, None], pa.int64()),
            "t.u": pa.array([2**64 - 1, None, 0], pa.uint64()),
            "t.b": [True, None, False],
            "t.l": pa.array([[1.0, 2.0], None, [3.0]]),
            "t.sl": [["a"], ["b", "c"], None],
            "t.st": [{"k": 1}, None, {"k": 2}],
        }
    )
    b.add_table(table, "timestamp")
    # A RecordBatch, an Arrow timestamp column with a zone and another timestamp column name.
    ts = pa.array([BASE // 1000 + 10, BASE // 1000 + 11], pa.timestamp("us", tz="UTC"))
    b.add_table(pa.RecordBatch.from_pydict({"at": ts, "t.x": [4.0, 5.0]}), "at")
    _add(b, "t.none", BASE, "later")
    assert_taken(
        b,
        [
            ("t.x", (), "double", [(BASE, 1.0), (BASE + 2, 3.0), (BASE + 10_000, 4.0), (BASE + 11_000, 5.0)]),
            ("t.s", (), "string", [(BASE, "a"), (BASE + 2, "c")]),
            ("t.i", (), "int64", [(BASE, 1), (BASE + 1, -2)]),
            ("t.u", (), "uint64", [(BASE, 2**64 - 1), (BASE + 2, 0)]),
            ("t.b", (), "int64", [(BASE, 1), (BASE + 2, 0)]),
            ("t.l", (), "double_array", [(BASE, [1.0, 2.0]), (BASE + 2, [3.0])]),
            ("t.sl", (), "string_array", [(BASE, ["a"]), (BASE + 1, ["b", "c"])]),
            ("t.st", (), "struct", [(BASE, '{"k":1}'), (BASE + 2, '{"k":2}')]),
            ("t.none", (), "string", [(BASE, "later")]),
        ],
    )


def _every_shape(b: PointBatch) -> None:
    """Elements of every shape, several series each, tags spelled in several orders."""
    for i in range(40):
        tags = {"rig": f"r{i % 3}", "site": "a"} if i % 2 else {"site": "a", "rig": f"r{i % 3}"}
        _add(b, f"f.{i % 7}", BASE + i, i / 3)
        b.add_point(f"s.{i % 5}", BASE + i, f"v{i}", tags)
        _add(b, "i", BASE + i, (2**53 + i) * (-1) ** i)
        _add(b, "st", BASE + i, {"z": i, "a": [i, "x"], "m": {"q": None, "b": True}})
        b.add_record(BASE + i, {"w.a": i / 7, "w.b": None if i % 4 == 0 else f"b{i}", "w.c": i}, tags)
        if i % 10 == 0:
            b.add_series(f"col.{i}", np.arange(BASE, BASE + 5), np.arange(5, dtype=np.float64) / 3, tags)
            _add(b, "arr", BASE + i, [float(i), 1.5])
            _add(b, "sarr", BASE + i, ["a", str(i)])
            b.add_table(pa.table({"timestamp": [BASE + i], "tbl.x": [float(i)], "tbl.s": [None]}), "timestamp")


def test_add_batch_takes_another_batch_s_series_batches_as_they_are() -> None:
    src = PointBatch({"site": "a"})
    _every_shape(src)
    taken = src.take()
    dst = PointBatch({"site": "a"})
    _add(dst, "f.0", BASE - 1, -1.0)  # a series dst already has, with the same type
    dst.add_batch(SeriesBatch(SeriesKey("empty"), ValueType.STRING, np.array([], dtype=np.int64), []), 0)  # nothing
    for c, nbytes in taken:
        dst.add_batch(c, nbytes)
    assert dst.points == 1 + sum(len(c.timestamps) for c, _ in taken)
    got = dst.take()
    # f.0 first (dst saw it first), its own point then src's; everything else as src gave it.
    f0 = [(c, n) for c, n in taken if c.key == SeriesKey("f.0", (("site", "a"),))]
    assert len(f0) > 1 and raw(got[1 : 1 + len(f0)]) == raw(f0)
    assert series_of(got[:1]) == [("f.0", (("site", "a"),), "double", [(BASE - 1, (-1.0).hex())])]
    assert raw(got[1 + len(f0) :]) == raw([(c, n) for c, n in taken if c.key != f0[0][0].key])
    # A batch's series is known afterwards, tags and all.
    dst.add_point("s.0", BASE, "more", {"site": "a", "rig": "r0"})
    assert [c.key for c, _ in dst.take()] == [SeriesKey("s.0", (("rig", "r0"), ("site", "a")))]


# -- bad elements ---------------------------------------------------------------------------------

T2 = BASE + 2
SKIP = ("timestamp", "tags")


def _prefix(b: PointBatch) -> None:
    """Good elements before the bad one: series pinned by every shape, and something of every
    kind still pending (single points, rows, settled runs)."""
    _add(b, "p.f", BASE, 1.0)
    _add(b, "p.i", BASE, 5)
    _add(b, "p.u", BASE, 2**63)
    _add(b, "p.s", BASE, "s")
    b.add_point("p.f", BASE, 2.0, {"k": "v"})
    _add(b, "p.da", BASE, [1.0])
    _add(b, "p.sa", BASE, ["a"])
    _add(b, "p.st", BASE, {"a": 1})
    b.add_record(BASE, {"w.a": 1.0, "w.b": "x", "w.i": 1})  # w.*: pinned by a wide record
    b.add_series("s.f", [BASE, BASE + 1], np.array([1.0, 2.0]))  # s.*: pinned by a series
    b.add_series("s.i", [BASE], [1])
    _add(b, "p.f", BASE + 1, 3.0)
    b.add_record(BASE + 1, {"w.a": 2.0, "w.b": "y", "w.i": 2})


def _suffix(b: PointBatch) -> None:
    """Good elements after it: the channels bad elements introduce (n.*), with other types than
    theirs, after a new series (so a series registered by a bad element would move), and more of
    every series and shape."""
    _add(b, "n.0", BASE + 5, 0.5)
    _add(b, "n.1", BASE + 5, "late")
    b.add_point("n.1", BASE + 5, "late", {"k": "v"})
    b.add_record(BASE + 5, {"n.2": "late", "w.a": 3.0})
    _add(b, "p.f", BASE + 5, 4.0)
    _add(b, "p.u", BASE + 5, 1)
    _add(b, "p.i", BASE + 5, -1)
    b.add_record(BASE + 5, {"w.a": 3.0, "w.b": "z", "w.i": 3})
    b.add_series("s.f", [BASE + 5], [5.0])
    b.add_record(BASE + 6, {"w.a": 4.0, "w.b": "q", "w.i": 4})


def _table(**columns: Any) -> pa.Table:
    return pa.table({"timestamp": pa.array([T2] * len(next(iter(columns.values()))), pa.int64()), **columns})


Bad = Callable[[PointBatch], None]
# (id, the bad element's append, the exception, a regex of its message, ElementError.field or None)
BAD: list[tuple[str, Bad, type[Exception], str, str | None]] = [
    # lone surrogates: text that would fail a whole request at encode time
    ("surrogate-value-new", lambda b: _add(b, "n.1", T2, "bad\ud800"), ValueError, "surrogates not allowed", None),
    ("surrogate-value-pinned", lambda b: _add(b, "p.s", T2, "bad\ud800"), ValueError, "surrogates not allowed", None),
    ("surrogate-value-tagged", lambda b: b.add_point("n.1", T2, "bad\ud800", {"k": "v"}), ValueError,
     "surrogates not allowed", None),
    ("surrogate-record-known-shape", lambda b: b.add_record(T2, {"w.a": 1.0, "w.b": "bad\ud800", "w.i": 1}),
     ValueError, "surrogates not allowed", None),
    ("surrogate-record-new-shape", lambda b: b.add_record(T2, {"n.1": 1.0, "w.b": "bad\ud800"}), ValueError,
     "surrogates not allowed", None),
    ("surrogate-series-new", lambda b: b.add_series("n.1", [T2, T2], ["ok", "bad\ud800"]), ValueError,
     "surrogates not allowed", None),
    ("surrogate-series-pinned", lambda b: b.add_series("p.s", [T2], np.array(["bad\ud800"])), ValueError,
     "surrogates not allowed", None),
    ("surrogate-string-array", lambda b: _add(b, "p.sa", T2, ["ok", "bad\ud800"]), ValueError,
     "surrogates not allowed", None),
    ("surrogate-string-array-new", lambda b: _add(b, "n.1", T2, ["bad\ud800"]), ValueError,
     "surrogates not allowed", None),
    ("surrogate-struct", lambda b: _add(b, "p.st", T2, {"k": "bad\ud800"}), ValueError, "surrogates not allowed",
     None),
    ("surrogate-struct-key-new", lambda b: _add(b, "n.1", T2, {"bad\ud800": 1}), ValueError,
     "surrogates not allowed", None),
    ("surrogate-channel", lambda b: _add(b, "bad\ud800", T2, 1.0), ElementError, "not valid Unicode", "channel"),
    ("surrogate-channel-record", lambda b: b.add_record(T2, {"n.1": 1.0, "bad\ud800": 1.0}), ElementError,
     "not valid Unicode", "channels"),
    ("surrogate-channel-series", lambda b: b.add_series("bad\ud800", [T2], [1.0]), ElementError,
     "not valid Unicode", "channel"),
    ("surrogate-tag-value", lambda b: b.add_point("n.1", T2, 1.0, {"k": "bad\ud800"}), ElementError,
     "not valid Unicode", "tags"),
    ("surrogate-tag-key", lambda b: b.add_point("n.1", T2, 1.0, {"bad\ud800": "v"}), ElementError,
     "not valid Unicode", "tags"),
    ("surrogate-tag-record", lambda b: b.add_record(T2, {"n.1": 1.0}, {"k": "bad\ud800"}), ElementError,
     "not valid Unicode", "tags"),
    # a value conflicting with its series' pinned type
    ("conflict-str-in-double", lambda b: _add(b, "p.f", T2, "text"), SeriesTypeError, "pinned to double", None),
    ("conflict-int-in-double", lambda b: _add(b, "p.f", T2, 1), SeriesTypeError, "pinned to double", None),
    ("conflict-tagged", lambda b: b.add_point("p.f", T2, "text", {"k": "v"}), SeriesTypeError,
     "pinned to double", None),
    ("conflict-float-in-string", lambda b: _add(b, "p.s", T2, 1.0), SeriesTypeError, "pinned to string", None),
    ("conflict-float-in-int64", lambda b: _add(b, "p.i", T2, 1.5), SeriesTypeError, "pinned to int64", None),
    ("conflict-array-in-double", lambda b: _add(b, "p.f", T2, [1.0]), SeriesTypeError, "pinned to double", None),
    ("conflict-struct-in-double", lambda b: _add(b, "p.f", T2, {"a": 1}), SeriesTypeError, "pinned to double", None),
    ("conflict-float-in-double-array", lambda b: _add(b, "p.da", T2, 1.0), SeriesTypeError,
     "pinned to double_array", None),
    ("conflict-strs-in-double-array", lambda b: _add(b, "p.da", T2, ["x"]), TypeError, "double array", None),
    ("conflict-floats-in-string-array", lambda b: _add(b, "p.sa", T2, [1.0]), TypeError, "not a str", None),
    ("conflict-float-in-struct", lambda b: _add(b, "p.st", T2, 1.0), SeriesTypeError, "pinned to struct", None),
    ("conflict-after-wide-pin", lambda b: _add(b, "w.a", T2, "text"), SeriesTypeError, "pinned to double", None),
    ("conflict-after-wide-pin-str", lambda b: _add(b, "w.b", T2, 1.0), SeriesTypeError, "pinned to string", None),
    ("conflict-after-series-pin", lambda b: _add(b, "s.f", T2, "text"), SeriesTypeError, "pinned to double", None),
    ("conflict-after-series-pin-int", lambda b: _add(b, "s.i", T2, 1.5), SeriesTypeError, "pinned to int64", None),
    ("conflict-in-record-new-shape", lambda b: b.add_record(T2, {"n.1": 1.0, "p.f": "text"}), SeriesTypeError,
     "pinned to double", None),
    ("conflict-in-record-known-channels", lambda b: b.add_record(T2, {"w.a": 1, "w.b": "x", "w.i": 1}),
     SeriesTypeError, "pinned to double", None),
    ("conflict-in-record-by-points", lambda b: b.add_record(T2, {"n.1": 1.0, "n.2": [1.0], "w.b": 2.0}),
     SeriesTypeError, "pinned to string", None),
    ("conflict-series-str-in-double", lambda b: b.add_series("p.f", [T2], ["a"]), SeriesTypeError,
     "pinned to double", None),
    ("conflict-series-after-wide-pin", lambda b: b.add_series("w.b", [T2], np.array([1.0])), SeriesTypeError,
     "pinned to string", None),
    ("conflict-series-floats-in-int64", lambda b: b.add_series("p.i", [T2], np.array([1.0])), SeriesTypeError,
     "pinned to int64", None),
    ("conflict-table-column", lambda b: b.add_table(_table(**{"n.1": [1.0], "p.f": ["a"]}), "timestamp"),
     SeriesTypeError, "pinned to double", None),
    # A series batch of another PointBatch with the same tags (b._base: the batch's tags, as its keys carry them).
    ("conflict-series-batch", lambda b: b.add_batch(SeriesBatch(SeriesKey("p.f", b._base), ValueType.STRING,
                                                                np.array([T2]), ["a"]), 19),
     SeriesTypeError, "pinned to double", None),
    # ints outside their series' range
    ("int-beyond-int64", lambda b: _add(b, "p.i", T2, 2**63), SeriesTypeError, "beyond int64", None),
    ("int-beyond-int64-record", lambda b: b.add_record(T2, {"w.a": 1.0, "w.b": "x", "w.i": 2**63}),
     SeriesTypeError, "beyond int64", None),
    ("int-beyond-int64-series", lambda b: b.add_series("p.i", [T2, T2], [1, 2**63]), SeriesTypeError,
     str(2**63), None),
    ("int-beyond-uint64-new", lambda b: _add(b, "n.1", T2, 2**64), TypeError, "outside both int64 and uint64", None),
    ("int-below-int64-new", lambda b: _add(b, "n.1", T2, -(2**63) - 1), TypeError, "outside both", None),
    ("int-beyond-uint64-pinned", lambda b: _add(b, "p.u", T2, 2**64), SeriesTypeError, str(2**64), None),
    ("int-beyond-uint64-series-new", lambda b: b.add_series("n.1", [T2, T2], [1, 2**64]), SeriesTypeError,
     str(2**64), None),
    ("negative-in-uint64", lambda b: _add(b, "p.u", T2, -1), SeriesTypeError, "pinned to uint64", None),
    ("negative-in-uint64-series", lambda b: b.add_series("p.u", [T2], [-1]), SeriesTypeError, "uint64", None),
    ("negative-in-uint64-numpy", lambda b: b.add_series("p.u", [T2], np.array([-1])), SeriesTypeError,
     "negative", None),
    # timestamps
    ("ts-float", lambda b: _add(b, "p.f", 1.5, 1.0), ElementError, "float timestamp", "timestamp"),
    ("ts-numpy-float", lambda b: _add(b, "n.1", np.float64(BASE), 1.0), ElementError, "float timestamp",
     "timestamp"),
    ("ts-naive-datetime", lambda b: _add(b, "p.f", dt.datetime(2024, 1, 1), 1.0), ElementError, "naive",
     "timestamp"),
    ("ts-above-int64", lambda b: _add(b, "p.f", 2**63, 1.0), ElementError, "outside the int64 nanosecond range",
     "timestamp"),
    ("ts-int64-min", lambda b: _add(b, "n.1", -(2**63), 1.0), ElementError, "outside the int64 nanosecond range",
     "timestamp"),
    ("ts-bad-iso", lambda b: _add(b, "p.f", "yesterday", 1.0), ElementError, "ISO-8601", "timestamp"),
    ("ts-iso-without-zone", lambda b: _add(b, "p.f", "2024-01-01T00:00:00", 1.0), ElementError, "ISO-8601",
     "timestamp"),
    ("ts-none", lambda b: _add(b, "p.f", None, 1.0), ElementError, r"timestamp is missing \(None\)", "timestamp"),
    ("ts-bool", lambda b: _add(b, "n.1", True, 1.0), ElementError, "unsupported timestamp type", "timestamp"),
    ("ts-record", lambda b: b.add_record(1.5, {"w.a": 1.0, "w.b": "x", "w.i": 1}), ElementError,
     "float timestamp", "timestamp"),
    ("ts-record-naive", lambda b: b.add_record("2024-01-01T00:00:00", {"n.1": 1.0}), ElementError, "ISO-8601",
     "timestamp"),
    ("ts-series-one-float", lambda b: b.add_series("n.1", [T2, 1.5], [1.0, 2.0]), ElementError,
     r"timestamps\[1\]", "timestamps"),
    ("ts-series-float-array", lambda b: b.add_series("s.f", np.array([1.5]), [1.0]), ElementError,
     "float timestamps", "timestamps"),
    ("ts-series-above-int64", lambda b: b.add_series("n.1", np.array([T2, 2**63], np.uint64), [1.0, 2.0]),
     ElementError, "int64 nanosecond range", "timestamps"),
    ("ts-table-float", lambda b: b.add_table(pa.table({"timestamp": [1.5], "n.1": [1.0]}), "timestamp"),
     ElementError, "timestamp column 'timestamp' has type double", "timestamp"),
    ("ts-table-null", lambda b: b.add_table(pa.table({"timestamp": pa.array([None, T2], pa.int64()),
                                                       "n.1": [1.0, 2.0]}), "timestamp"),
     ElementError, "null timestamps", "timestamp"),
    ("ts-table-missing", lambda b: b.add_table(pa.table({"ts": [T2], "n.1": [1.0]}), "timestamp"), ElementError,
     "no 'timestamp' column", "timestamp"),
    # None where a value must be
    ("none-value-new", lambda b: _add(b, "n.1", T2, None), ElementError, "None", "value"),
    ("none-value-pinned", lambda b: _add(b, "p.f", T2, None), ElementError, "None", "value"),
    ("none-value-tagged", lambda b: b.add_point("n.1", T2, None, {"k": "v"}), ElementError, "None", "value"),
    ("none-in-series-pinned", lambda b: b.add_series("p.f", [T2, T2], [1.0, None]), SeriesTypeError,
     r"values\[1\]", None),
    ("none-in-series-new", lambda b: b.add_series("n.1", [T2], [None]), TypeError, "NoneType", None),
    # channel names
    ("channel-empty", lambda b: _add(b, "", T2, 1.0), ElementError, "non-empty string", "channel"),
    ("channel-int", lambda b: _add(b, 5, T2, 1.0), ElementError, "non-empty string", "channel"),
    ("channel-none", lambda b: _add(b, None, T2, 1.0), ElementError, "non-empty string", "channel"),
    ("channel-unhashable", lambda b: _add(b, ["p.f"], T2, 1.0), ElementError, "non-empty string", "channel"),
    ("channel-over-long", lambda b: _add(b, "c" * 1025, T2, 1.0), ElementError, "over 1024", "channel"),
    ("channel-empty-tagged", lambda b: b.add_point("", T2, 1.0, {"k": "v"}), ElementError, "non-empty string",
     "channel"),
    ("channel-empty-record", lambda b: b.add_record(T2, {"n.1": 1.0, "": 2.0}), ElementError, "non-empty string",
     "channels"),
    ("channel-int-record", lambda b: b.add_record(T2, {"n.1": 1.0, 5: 2.0}), ElementError, "non-empty string",
     "channels"),
    ("channel-over-long-record", lambda b: b.add_record(T2, {"w.a": 1.0, "c" * 1025: 2.0}), ElementError,
     "over 1024", "channels"),
    ("channel-empty-series", lambda b: b.add_series("", [T2], [1.0]), ElementError, "non-empty string",
     "channel"),
    ("channel-empty-table", lambda b: b.add_table(_table(**{"n.1": [1.0], "": [2.0]}), "timestamp"),
     ElementError, "non-empty string", "column"),
    # tags
    ("tags-list", lambda b: b.add_point("n.1", T2, 1.0, ["k"]), ElementError, "mapping", "tags"),
    ("tags-str", lambda b: b.add_point("n.1", T2, 1.0, "k=v"), ElementError, "mapping", "tags"),
    ("tags-pairs", lambda b: b.add_point("p.f", T2, 1.0, (("k", "v"),)), ElementError, "mapping", "tags"),
    ("tags-int-value", lambda b: b.add_point("n.1", T2, 1.0, {"k": 1}), ElementError, "str to str", "tags"),
    ("tags-int-key", lambda b: b.add_point("n.1", T2, 1.0, {1: "v"}), ElementError, "str to str", "tags"),
    ("tags-none-value", lambda b: b.add_point("p.f", T2, 1.0, {"k": None}), ElementError, "str to str", "tags"),
    ("tags-unhashable-value", lambda b: b.add_point("p.f", T2, 1.0, {"k": ["v"]}), ElementError, "str to str",
     "tags"),
    ("tags-record-str", lambda b: b.add_record(T2, {"n.1": 1.0}, "k=v"), ElementError, "mapping", "tags"),
    ("tags-record-int-value", lambda b: b.add_record(T2, {"n.1": 1.0, "w.a": 1.0}, {"k": 1}), ElementError,
     "str to str", "tags"),
    ("tags-series-list", lambda b: b.add_series("n.1", [T2], [1.0], ["k"]), ElementError, "mapping", "tags"),
    ("tags-series-int-value", lambda b: b.add_series("s.f", [T2], [1.0], {"k": 1}), ElementError, "str to str",
     "tags"),
    # a wide record with one bad value among good ones
    ("record-one-bad-known-shape", lambda b: b.add_record(T2, {"w.a": 1.0, "w.b": "x", "w.i": 2**64}),
     SeriesTypeError, "int64", None),
    ("record-one-bad-new-shape", lambda b: b.add_record(T2, {"n.1": 1.0, "w.b": "x", "n.2": 1 + 2j}),
     TypeError, "complex", None),
    ("record-one-bad-by-points", lambda b: b.add_record(T2, {"n.1": 1.0, "n.2": [1.0], "p.u": -1, "w.a": None}),
     SeriesTypeError, "pinned to uint64", None),
    ("record-flat-one-bad", lambda b: b.add_record(T2, {"timestamp": T2, "n.1": 1.0, "p.i": "x", "tags": None},
                                                   None, SKIP), SeriesTypeError, "pinned to int64", None),
    ("record-not-a-mapping", lambda b: b.add_record(T2, [1.0]), ElementError, "mapping", "values"),
    ("record-no-channels", lambda b: b.add_record(T2, {}), ElementError, "no channels", "values"),
    ("record-flat-only-timestamp", lambda b: b.add_record(T2, {"timestamp": T2, "tags": None}, None, SKIP),
     ElementError, "no channels", "values"),
    # series elements
    ("series-lengths", lambda b: b.add_series("n.1", [T2, T2 + 1], [1.0]), ElementError,
     "2 timestamps but 1 values", "values"),
    ("series-lengths-pinned", lambda b: b.add_series("s.f", np.array([T2]), np.array([1.0, 2.0])), ElementError,
     "1 timestamps but 2 values", "values"),
    ("series-lengths-2d", lambda b: b.add_series("n.1", [T2], np.ones((2, 3))), ElementError,
     "1 timestamps but 2 values", "values"),
    # ... a known double series given numpy columns (the short path of series_batches): every
    # case it does not take goes the general way, and fails as there
    ("series-min-timestamp-pinned", lambda b: b.add_series("s.f", np.array([T2, -(2**63)]), np.array([1.0, 2.0])),
     ElementError, "outside the int64", "timestamps"),
    ("series-2d-pinned", lambda b: b.add_series("s.f", np.array([T2]), np.ones((1, 2))), SeriesTypeError,
     "pinned to double", None),
    ("series-2d-timestamps-pinned", lambda b: b.add_series("s.f", np.array([[T2]]), np.array([1.0])), ElementError,
     "1-D", "timestamps"),
    ("series-unhashable-channel", lambda b: b.add_series(["s.f"], np.array([T2]), np.array([1.0])), ElementError,
     "non-empty string", "channel"),
    ("series-0d-timestamps", lambda b: b.add_series("s.f", np.array(T2), np.array([1.0])), ElementError,
     "array or sequence", "timestamps"),
    ("series-0d-values", lambda b: b.add_series("s.f", np.array([T2]), np.array(1.0)), ElementError,
     "array or sequence", "values"),
    ("table-min-timestamp", lambda b: b.add_table(pa.table({"timestamp": pa.array([T2, -(2**63)]), "n.1": [1.0, 2.0]}),
                                                  "timestamp"), ElementError, "outside the int64", "timestamp"),
    ("series-timestamps-not-a-column", lambda b: b.add_series("n.1", T2, [1.0]), ElementError,
     "array or sequence", "timestamps"),
    ("series-values-not-a-column", lambda b: b.add_series("n.1", [T2], 1.0), ElementError, "array or sequence",
     "values"),
    ("series-one-bad-value", lambda b: b.add_series("s.f", [T2, T2], [1.0, "x"]), SeriesTypeError,
     r"values\[1\]", None),
    ("series-one-bad-value-new", lambda b: b.add_series("n.1", [T2, T2], [1.0, "x"]), SeriesTypeError,
     r"values\[1\]", None),
    ("series-3d", lambda b: b.add_series("n.1", [T2], np.ones((1, 1, 1))), TypeError, "1-D or 2-D", None),
    # unsupported values
    ("value-complex", lambda b: _add(b, "n.1", T2, 1 + 2j), TypeError, "unsupported value type complex", None),
    ("value-bytes", lambda b: _add(b, "n.1", T2, b"x"), TypeError, "unsupported value type bytes", None),
    ("value-2d-array", lambda b: _add(b, "n.1", T2, np.ones((2, 2))), ElementError, "2 dimensions", "value"),
    ("value-struct-nan", lambda b: _add(b, "p.st", T2, {"x": NAN}), TypeError, "JSON", None),
    ("value-table-binary", lambda b: b.add_table(_table(**{"n.1": [1.0], "n.2": pa.array([b"x"])}), "timestamp"),
     TypeError, "Arrow type binary", None),
]


def _good_only(base_tags: dict[str, str] | None, take_between: bool) -> list[Any]:
    b = PointBatch(base_tags)
    _prefix(b)
    if take_between:
        b.take()
    _suffix(b)
    return raw(b.take())


@pytest.mark.parametrize(("base_tags", "take_between"), [(None, False), (None, True), ({"site": "s"}, False)])
@pytest.mark.parametrize(("bad", "exc", "match", "field"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_element_raises_and_leaves_the_batch_as_it_was(
    bad: Bad,
    exc: type[Exception],
    match: str,
    field: str | None,
    base_tags: dict[str, str] | None,
    take_between: bool,
) -> None:
    b = PointBatch(base_tags)
    _prefix(b)
    if take_between:  # the series are pinned, nothing is pending: a bad element after a handover
        b.take()
    before = b.points
    with pytest.raises(exc, match=match) as info:
        bad(b)
    if field is not None:
        assert isinstance(info.value, ElementError) and info.value.field == field
    assert b.points == before
    # The suffix would fail (or move series) had the bad element pinned or registered anything.
    _suffix(b)
    assert raw(b.take()) == _good_only(base_tags, take_between)


def test_a_rejected_record_does_not_block_its_channel_set() -> None:
    b = PointBatch()
    b.add_record(BASE, {"a": 1.0, "b": "x"})
    with pytest.raises(ValueError, match="surrogates"):
        b.add_record(BASE + 1, {"a": 2.0, "b": "bad\ud800"})
    with pytest.raises(SeriesTypeError):
        b.add_record(BASE + 2, {"a": "text", "b": "y"})
    b.add_record(BASE + 3, {"a": 3.0, "b": "z"})
    assert_taken(
        b,
        [("a", (), "double", [(BASE, 1.0), (BASE + 3, 3.0)]), ("b", (), "string", [(BASE, "x"), (BASE + 3, "z")])],
    )


@pytest.mark.parametrize("flat_first", [True, False], ids=["flat-first", "nested-first"])
def test_a_channel_named_like_the_timestamp_field_is_not_the_timestamp_field(flat_first: bool) -> None:
    b = PointBatch()
    adds = [
        lambda: b.add_record(BASE, {"timestamp": BASE, "a": 1.0}, None, SKIP),  # a flat record
        lambda: b.add_record(BASE + 1, {"timestamp": 5, "a": 2.0}),  # nested: "timestamp" is a channel
    ]
    for add in adds if flat_first else adds[::-1]:
        add()
    a = ("a", (), "double", [(BASE, 1.0), (BASE + 1, 2.0)])
    ts_channel = ("timestamp", (), "int64", [(BASE + 1, 5)])
    assert_taken(b, [a, ts_channel] if flat_first else [ts_channel, a], ordered=False)


@pytest.mark.parametrize("tags", [{"k": "v" * 1025}, {"k" * 1025: "v"}], ids=["value", "key"])
def test_an_over_long_tag_is_an_element_error(tags: dict[str, str]) -> None:
    with pytest.raises(ElementError, match="1024"):
        PointBatch().add_point("x", BASE, 1.0, tags)


def test_a_bad_channel_name_is_blamed_on_the_channel_even_with_batch_tags() -> None:
    with pytest.raises(ElementError) as info:
        _add(PointBatch({"site": "a"}), "tag\ud800", BASE, 1.0)
    assert info.value.field == "channel"


def test_staged_records_of_long_strings_count_their_bytes() -> None:
    b = PointBatch()
    b.add_record(1, {"s": "x" * 1_000_000})
    assert b.nbytes >= 1_000_000


def test_staged_records_of_arrays_count_their_bytes() -> None:
    b = PointBatch()
    b.add_record(1, {"a": [1.0] * 100_000})
    assert b.nbytes >= 800_000


# -- determinism ----------------------------------------------------------------------------------


def _digest() -> str:
    b = PointBatch({"site": "a", "zone": "z"})
    _every_shape(b)
    _prefix(b)
    _suffix(b)
    return hashlib.sha256(repr(raw(b.take())).encode()).hexdigest()


def test_same_elements_give_byte_identical_batches_whatever_the_hash_seed() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    digests = set()
    for seed in ("1", "2", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root}
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__)], env=env, cwd=root, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    assert digests == {_digest()}


if __name__ == "__main__":
    import beam_nominal

    # The subprocess must import the same beam_nominal as the test (the checkout under test).
    assert os.path.dirname(os.path.dirname(os.path.abspath(beam_nominal.__file__))) == os.environ["PYTHONPATH"]
    print(_digest())


@pytest.mark.parametrize(
    "bad",
    [
        (SeriesBatch(SeriesKey("x.bad"), ValueType.DOUBLE, None, None), 0),  # columns that are not columns
        (SeriesBatch(SeriesKey("x.bad", (("k",),)), ValueType.DOUBLE, np.array([BASE]), np.array([1.0])), 24),  # tags
        (SeriesBatch(SeriesKey("x.bad"), "no such type", np.array([BASE]), np.array([1.0])), 24),
    ],
    ids=["no-columns", "bad-tags", "bad-type"],
)
def test_a_batch_list_with_a_bad_batch_registers_none_of_its_series(bad: tuple[SeriesBatch, int]) -> None:
    b = PointBatch()
    good = (SeriesBatch(SeriesKey("x.good"), ValueType.DOUBLE, np.array([BASE]), np.array([1.0])), 24)
    with pytest.raises((TypeError, ValueError)):
        b.checked_batches([good, bad])
    # Nothing pinned: x.good may still take a string.
    b.add_point("x.good", BASE, "text", None)
    assert_taken(b, [("x.good", (), "string", [(BASE, "text")])])


_EMPTY_DA = SeriesBatch(SeriesKey("x"), ValueType.DOUBLE_ARRAY, np.array([BASE + 1]), [np.empty(0)])
_EMPTY_SA = SeriesBatch(SeriesKey("x"), ValueType.STRING_ARRAY, np.array([BASE + 1]), [()])


@pytest.mark.parametrize(
    ("pinned", "first", "empty"),
    [(ValueType.STRING_ARRAY, ["a"], _EMPTY_DA), (ValueType.DOUBLE_ARRAY, [1.5], _EMPTY_SA)],
    ids=["into-string-array", "into-double-array"],
)
def test_a_batch_of_empty_rows_takes_the_array_type_its_series_has(
    pinned: ValueType, first: list[object], empty: SeriesBatch
) -> None:
    # A one-element batch (cross-bundle batching) types [] as a double array by itself; an
    # empty row fits either array type, so it must not conflict with the series' pin.
    b = PointBatch()
    b.add_point("x", BASE, first, None)
    b.add_batch(empty, 28)
    taken = [c for c, _ in b.take() if c.key == SeriesKey("x")]
    assert {c.value_type for c in taken} == {pinned}
    assert [t for c in taken for t in c.timestamps.tolist()] == [BASE, BASE + 1]
    assert [len(r) for c in taken for r in c.values] == [1, 0]
    with pytest.raises(SeriesTypeError):  # rows that are not empty still conflict
        rows = [np.array([1.0])] if pinned is ValueType.STRING_ARRAY else [("a",)]
        b.add_batch(dataclasses.replace(empty, values=rows), 28)


_SERIES_VALUES = {
    "d": st.floats(allow_nan=True, allow_infinity=True),
    "n": st.floats(width=64).map(np.float64),  # a numpy float: a float subclass
    "i": st.integers(-(2**63), 2**63 - 1),
    "s": st.text(alphabet="ab\u00e9", max_size=3),
}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(_SERIES_VALUES)), st.integers(-(2**63) + 1, 2**63 - 1)),
        min_size=1,
        max_size=60,
    ),
    st.data(),
)
@pytest.mark.compiled
def test_the_compiled_double_points_settle_exactly_as_the_python_ones(
    points: list[tuple[str, int]], data: st.DataObject
) -> None:
    # _fastpath.DoublePoints holds the single points of double series as C columns; the same
    # points through the Python columns (staging._DoublePoints, where the module is not built)
    # give the same batches, to the bit, mixed with points of other types' series.
    from beam_nominal._pipeline import staging

    assert staging.DoublePoints is not staging._DoublePoints, "the compiled module is not built"
    batch_points = [(f"{kind}{t % 3}", t, data.draw(_SERIES_VALUES[kind])) for kind, t in points]

    def take(columns: object) -> list[tuple[object, ...]]:
        original = staging.DoublePoints
        staging.DoublePoints = columns  # type: ignore[assignment]
        try:
            batch = PointBatch()
            for channel, t, value in batch_points:
                if not batch.add_fast(channel, t, value):
                    batch.add_point(channel, t, value, None)
            return [
                (c.key, c.value_type, np.asarray(c.timestamps).tolist(), _bits(c.values), n)
                for c, n in batch.take()
            ]
        finally:
            staging.DoublePoints = original

    assert take(staging.DoublePoints) == take(staging._DoublePoints)


@pytest.mark.compiled
def test_double_points_append_returns_the_points_held_compiled_and_python() -> None:
    # add_fast returns what append returns as the count its caller compares with its hand-over
    # limit: both columns must count alike.
    from beam_nominal._pipeline import staging

    for columns in (staging.DoublePoints, staging._DoublePoints):
        points = columns()
        assert [points.append(7, _T + k, 0.5) for k in range(3)] == [1, 2, 3]
        points.take()
        assert points.append(7, _T, 0.5) == 1


def _bits(values: object) -> object:
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        return values.view(np.uint64).tolist()  # NaN payloads and -0.0 compared exactly
    return [v.hex() if isinstance(v, float) else v for v in np.asarray(values, dtype=object).tolist()]


_T = 1_700_000_000_000_000_000


@pytest.mark.parametrize("row", [(1.0, None), [1.0, None], np.array([1.0, None], dtype=object)])
def test_a_none_in_a_double_array_is_refused_not_made_nan(row: Any) -> None:
    batch = PointBatch()
    with pytest.raises(TypeError, match="None"):
        batch.add_point("a", _T, row, None)
    assert batch.points == 0
    batch.add_point("a", _T, (1.0, float("nan")), None)  # a NaN given as a float is one
    assert np.isnan(batch.take()[0][0].values[0][1])


def test_a_null_element_in_an_arrow_double_list_is_refused_not_made_nan() -> None:
    arr = pa.array([[1.0, None], [2.0]], pa.list_(pa.float64()))
    table = pa.table({"timestamp": pa.array([_T, _T + 1]), "arr": arr})
    batch = PointBatch()
    with pytest.raises(ValueError, match="'arr': a double array holds a null element"):
        batch.add_table(table, "timestamp")
    assert batch.points == 0


@pytest.mark.parametrize("part", ["timestamps", "values"])
def test_a_masked_array_with_masked_elements_is_refused(part: str) -> None:
    ts, vals = np.arange(_T, _T + 3), np.array([1.0, 2.0, 3.0])
    masked = np.ma.masked_array(ts if part == "timestamps" else vals, mask=[False, True, False])
    batch = PointBatch()
    with pytest.raises(ValueError, match=f"{part} with masked elements"):
        batch.add_series("a", masked if part == "timestamps" else ts, masked if part == "values" else vals)
    assert batch.points == 0
    batch.add_series("a", np.ma.masked_array(ts), np.ma.masked_array(vals))  # nothing masked: as given
    assert batch.take()[0][0].values.tolist() == [1.0, 2.0, 3.0]


def test_a_masked_double_array_point_is_refused() -> None:
    batch = PointBatch()
    with pytest.raises(ValueError, match="a double array with masked elements"):
        batch.add_point("a", _T, np.ma.masked_array([1.0, 2.0], mask=[False, True]), None)
    assert batch.points == 0
