"""Columnar buffers: type pinning before buffering, tail spills, wide blocks transposed exactly."""

from __future__ import annotations

import numpy as np
import pytest

from beam_nominal._pipeline.buffer import Buffer
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import SeriesKey, ValueType


def _drain(s) -> tuple[list[int], list[object]]:  # type: ignore[no-untyped-def]
    ts, vals, _ = s.take(s.points)
    return ts.tolist(), (vals.tolist() if isinstance(vals, np.ndarray) else list(vals))


def test_pin_conflict_names_channel_tags_and_both_types() -> None:
    buf = Buffer()
    buf.pin("temp", {"site": "a"}, ValueType.DOUBLE)
    with pytest.raises(SeriesTypeError) as info:
        buf.pin("temp", {"site": "a"}, ValueType.STRING)
    msg = str(info.value)
    assert "'temp'" in msg and "site=a" in msg and "double" in msg and "string" in msg
    assert isinstance(info.value, TypeError)
    # Another tag set is another series and takes its own type.
    assert buf.pin("temp", {"site": "b"}, ValueType.STRING).vtype is ValueType.STRING


def test_none_and_empty_tags_are_one_series() -> None:
    buf = Buffer()
    a = buf.pin("x", None, ValueType.INT64)
    assert buf.pin("x", {}, ValueType.INT64) is a
    assert list(buf.series) == [SeriesKey("x")]


def test_scalar_tail_spills_into_numpy_chunks_in_order() -> None:
    buf = Buffer()
    s = buf.pin("x", None, ValueType.INT64)
    n = 10_000  # crosses the staging tail size twice
    for i in range(n):
        if buf.add(s, i, 2**62 + i):
            buf.settle()
    buf.settle()
    assert s.points == buf.points == n
    assert all(isinstance(c, np.ndarray) for c in s.val_chunks)
    ts, vals = _drain(s)
    assert ts == list(range(n))
    assert vals == [2**62 + i for i in range(n)]
    assert s.points == 0 and s.nbytes == 0


def test_take_splits_a_series_and_keeps_the_rest() -> None:
    buf = Buffer()
    s = buf.pin("x", None, ValueType.DOUBLE)
    buf.add_chunk(s, np.arange(10, dtype=np.int64), np.arange(10, dtype=np.float64), 240)
    ts, vals, nbytes = s.take(4)
    assert ts.tolist() == [0, 1, 2, 3] and vals.tolist() == [0.0, 1.0, 2.0, 3.0] and nbytes == 96
    assert s.points == 6 and s.nbytes == 144
    assert _drain(s) == (list(range(4, 10)), [float(i) for i in range(4, 10)])


def test_wide_rows_transpose_exactly_per_type() -> None:
    buf = Buffer()
    for t in range(5):
        buf.add_row(t, {"f": t + 0.5, "i": 2**53 + t, "u": 2**63 + t, "b": t % 2 == 0, "s": f"é{t}"}, None)
    assert buf.points == 25
    buf.materialise_all()
    got = {k.channel: (s.vtype, _drain(s)) for k, s in buf.series.items()}
    assert got["f"] == (ValueType.DOUBLE, (list(range(5)), [t + 0.5 for t in range(5)]))
    assert got["i"] == (ValueType.INT64, (list(range(5)), [2**53 + t for t in range(5)]))
    assert got["u"] == (ValueType.UINT64, (list(range(5)), [2**63 + t for t in range(5)]))
    assert got["b"] == (ValueType.INT64, (list(range(5)), [1, 0, 1, 0, 1]))
    assert got["s"] == (ValueType.STRING, (list(range(5)), [f"é{t}" for t in range(5)]))


def test_wide_row_with_conflicting_value_buffers_nothing() -> None:
    buf = Buffer()
    buf.add_row(1, {"a": 1.0, "b": 2.0}, {"k": "v"})
    before = buf.points
    with pytest.raises(SeriesTypeError) as info:
        buf.add_row(2, {"a": 3.0, "b": "oops"}, {"k": "v"})
    assert "'b'" in str(info.value) and "k=v" in str(info.value)
    assert buf.points == before
    # An int outside int64 in a series pinned int64 is a conflict too, caught per row.
    buf.add_row(3, {"n": 1}, None)
    with pytest.raises(SeriesTypeError, match="'n'"):
        buf.add_row(4, {"n": 2**63}, None)
    buf.materialise_all()
    assert _drain(buf.series[SeriesKey("n")]) == ([3], [1])
    assert _drain(buf.series[SeriesKey("b", (("k", "v"),))]) == ([1], [2.0])


def test_scalar_after_wide_rows_keeps_series_order() -> None:
    buf = Buffer()
    buf.add_row(1, {"a": 1.0, "b": 2.0}, None)
    s = buf.series[SeriesKey("a")]
    buf.add(s, 2, 9.0)  # must land after the block's row
    buf.add_row(3, {"a": 3.0, "b": 4.0}, None)
    buf.materialise_all()
    assert _drain(s) == ([1, 2, 3], [1.0, 9.0, 3.0])
    assert _drain(buf.series[SeriesKey("b")]) == ([1, 3], [2.0, 4.0])


def test_unsupported_wide_value_names_channel() -> None:
    buf = Buffer()
    with pytest.raises(TypeError, match="'bad'"):
        buf.add_row(1, {"ok": 1.0, "bad": None}, None)
    with pytest.raises(TypeError, match="enqueue_struct"):
        buf.add_row(1, {"st": {"a": 1}}, None)
    assert buf.points == 0 and not buf.series


def test_all_float_record_checks_existing_series_before_creating_any() -> None:
    buf = Buffer()
    buf.pin("n", {"a": "1", "b": "2"}, ValueType.INT64)
    # Same tags in another order: the same series, found although not indexed under this order.
    with pytest.raises(SeriesTypeError) as info:
        buf.add_row(1, {"new": 1.0, "n": 2.0}, {"b": "2", "a": "1"})
    assert "'n'" in str(info.value) and "int64" in str(info.value) and "double" in str(info.value)
    assert buf.points == 0 and list(buf.series) == [SeriesKey("n", (("a", "1"), ("b", "2")))]
    # A bad name in an all-float record is reported as for any record, and creates nothing.
    with pytest.raises(ValueError, match="not valid Unicode"):
        buf.add_row(1, {"ok": 1.0, "bad\ud800": 2.0}, None)
    with pytest.raises(ValueError, match="non-empty"):
        buf.add_row(1, {"ok": 1.0, "": 2.0}, None)
    assert buf.points == 0


def test_type_conflict_in_second_record_of_a_float_block_names_the_channel() -> None:
    buf = Buffer()
    buf.add_row(1, {"a": 1.0, "b": 2.0}, {"k": "v"})
    with pytest.raises(SeriesTypeError) as info:
        buf.add_row(2, {"a": 3.0, "b": 4}, {"k": "v"})
    assert "'b'" in str(info.value) and "k=v" in str(info.value)
    buf.add_row(3, {"a": 5.0, "b": 6.0}, {"k": "v"})
    buf.materialise_all()
    assert _drain(buf.series[SeriesKey("b", (("k", "v"),))]) == ([1, 3], [2.0, 6.0])
