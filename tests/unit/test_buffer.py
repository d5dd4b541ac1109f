"""A stream's columnar buffers: type pinning, taking points off a series (what comes in is
already checked: tests/unit/test_staging.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._pipeline.buffer import OWN_CHUNK_ROWS, Buffer, copy_column
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import SeriesKey, ValueType


def _drain(s) -> tuple[list[int], list[object]]:  # type: ignore[no-untyped-def]
    ts, vals, _ = s.take(s.points)
    return ts.tolist(), (vals.tolist() if isinstance(vals, np.ndarray) else list(vals))


_NO_TS = np.empty(0, dtype=np.int64)


def test_pin_conflict_names_channel_tags_and_both_types() -> None:
    buf = Buffer()
    buf.add(SeriesKey.of("temp", {"site": "a"}), ValueType.DOUBLE, np.array([1]), np.array([1.0]), 24)
    with pytest.raises(SeriesTypeError) as info:
        buf.add(SeriesKey.of("temp", {"site": "a"}), ValueType.STRING, np.array([2]), ["x"], 24)
    msg = str(info.value)
    assert "'temp'" in msg and "site=a" in msg and "double" in msg and "string" in msg
    assert isinstance(info.value, TypeError)
    assert buf.points == 1 and buf.nbytes == 24  # nothing of the refused chunk
    # Another tag set is another series and takes its own type.
    buf.add(SeriesKey.of("temp", {"site": "b"}), ValueType.STRING, _NO_TS, [], 0)
    assert buf.series[SeriesKey.of("temp", {"site": "b"})].vtype is ValueType.STRING


def test_none_and_empty_tags_are_one_series() -> None:
    buf = Buffer()
    buf.add(SeriesKey.of("x", None), ValueType.INT64, _NO_TS, np.empty(0, dtype=np.int64), 0)
    buf.add(SeriesKey.of("x", {}), ValueType.INT64, _NO_TS, np.empty(0, dtype=np.int64), 0)
    assert list(buf.series) == [SeriesKey("x")]


def test_take_splits_a_series_and_keeps_the_rest() -> None:
    buf = Buffer()
    buf.add(SeriesKey("x"), ValueType.DOUBLE, np.arange(10, dtype=np.int64), np.arange(10, dtype=np.float64), 240)
    s = buf.series[SeriesKey("x")]
    ts, vals, nbytes = s.take(4)
    assert ts.tolist() == [0, 1, 2, 3] and vals.tolist() == [0.0, 1.0, 2.0, 3.0] and nbytes == 96
    assert s.points == 6 and s.nbytes == 144
    assert _drain(s) == (list(range(4, 10)), [float(i) for i in range(4, 10)])


# -- double columns from the compiled enqueue_batch: copied onto one growable array pair ---------

_X = SeriesKey("x")


def _column(start: int, rows: int, strided: bool) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` points numbered from ``start`` (value = timestamp / 2), as strided views if asked."""
    step = 2 if strided else 1
    ts = np.arange(start, start + rows, dtype=np.int64).repeat(step)[::step]
    return ts, ts / 2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["chunk", "column", "column", "column", "take"]),
            st.sampled_from([0, 1, 3, 100, OWN_CHUNK_ROWS - 1, OWN_CHUNK_ROWS]),
            st.booleans(),
        ),
        max_size=25,
    )
)
@pytest.mark.compiled
def test_columns_chunks_and_takes_keep_every_point_once_in_order(ops: list[tuple[str, int, bool]]) -> None:
    # The open column follows the series' chunks; a chunk closes it; takes see one series in
    # arrival order; what a take returned (a request's arrays) never changes afterwards, and the
    # caller's arrays may be reused at once.
    buf = Buffer()
    put = buf.put_double_column
    expected: list[int] = []
    taken: list[tuple[np.ndarray, np.ndarray, list[int]]] = []
    next_ts = 0
    for op, rows, strided in ops:
        if op == "take":
            s = buf.series.get(_X)
            if s is None or not s.points:
                continue
            n = max(1, min(rows, s.points))
            ts, vals, nbytes = s.take(n)
            buf.points -= n  # as the packer does
            buf.nbytes -= nbytes
            assert ts.tolist() == expected[:n] and vals.tolist() == [t / 2 for t in expected[:n]]
            taken.append((ts, vals, expected[:n]))
            del expected[:n]
            continue
        ts, vals = _column(next_ts, rows, strided)
        if op == "chunk":
            buf.add(_X, ValueType.DOUBLE, ts.copy(), vals.copy(), 24 * rows)
        else:
            assert put(_X, ts, vals, 24 * rows)
            ts[:] = -1  # the caller reuses its arrays
            vals[:] = -1.0
        expected += range(next_ts, next_ts + rows)
        next_ts += rows
        assert buf.points == len(expected) == buf.series[_X].points
    if expected:
        assert _drain(buf.series[_X]) == (expected, [t / 2 for t in expected])
    for ts, vals, want in taken:
        assert ts.tolist() == want and vals.tolist() == [t / 2 for t in want]


@pytest.mark.compiled
def test_a_column_with_a_timestamp_of_int64_min_is_not_added() -> None:
    buf = Buffer()
    assert buf.put_double_column(_X, np.array([1, 2], dtype=np.int64), np.array([0.5, 1.5]), 48)
    bad = np.array([3, -(2**63), 5], dtype=np.int64)
    for ts in (bad, bad.repeat(2)[::2], np.full(OWN_CHUNK_ROWS, -(2**63), dtype=np.int64)):
        assert not buf.put_double_column(_X, ts, np.zeros(len(ts)), 24 * len(ts))
        assert buf.points == 2 and buf.nbytes == 48
    assert buf.put_double_column(_X, np.array([6], dtype=np.int64), np.array([3.0]), 24)
    assert _drain(buf.series[_X]) == ([1, 2, 6], [0.5, 1.5, 3.0])


def test_a_column_of_a_series_pinned_to_another_type_is_refused() -> None:
    buf = Buffer()
    buf.add(_X, ValueType.INT64, np.array([1], dtype=np.int64), np.array([1], dtype=np.int64), 24)
    with pytest.raises(SeriesTypeError, match="int64"):
        buf.put_double_column(_X, np.array([2], dtype=np.int64), np.array([2.0]), 24)
    assert buf.points == 1


@pytest.mark.compiled
def test_a_growing_column_keeps_its_spare_rows_within_the_budgets_estimate() -> None:
    # A double is estimated at 24 request bytes and stored in 16: the spare rows of a column
    # grown by half again stay within that (what the buffer's byte budget counts holds).
    buf = Buffer()
    for i in range(2_000):
        ts, vals = _column(100 * i, 100, False)
        buf.put_double_column(_X, ts, vals, 2_400)
        column = buf.series[_X].column
        assert column is not None and len(column[0]) * 16 <= 24 * buf.points + 16 * 100
    assert buf.series[_X].ts_chunks == []  # one column, no chunk: nothing to join at the cut


@pytest.mark.compiled
def test_copy_column_refuses_what_it_cannot_copy() -> None:
    ts_out, vals_out = np.zeros(4, dtype=np.int64), np.zeros(4)
    ts, vals = np.arange(3, dtype=np.int64), np.arange(3.0)
    assert copy_column is not None
    with pytest.raises(ValueError, match="do not fit"):
        copy_column(ts_out, vals_out, 2, ts, vals)
    with pytest.raises(ValueError, match="differ in length"):
        copy_column(ts_out, vals_out, 0, ts, vals[:2])
    with pytest.raises(TypeError, match="8-byte"):
        copy_column(ts_out, vals_out, 0, ts.astype(np.int32), vals)
    with pytest.raises(ValueError, match="negative"):
        copy_column(ts_out, vals_out, -1, ts, vals)
    with pytest.raises(ValueError, match="not C-contiguous"):
        copy_column(ts_out, vals_out[::2], 0, ts[:2], vals[:2])
    ts_out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        copy_column(ts_out, vals_out, 0, ts, vals)
    assert vals_out.tolist() == [0.0] * 4
    ts_out.flags.writeable = True
    assert copy_column(ts_out, vals_out, 1, ts, vals) is True
    assert ts_out.tolist() == [0, 0, 1, 2] and vals_out.tolist() == [0.0, 0.0, 1.0, 2.0]


@pytest.mark.compiled
def test_a_long_column_is_a_chunk_of_its_own() -> None:
    # Growing a column of long calls would copy them more than joining their chunks once.
    buf = Buffer()
    buf.put_double_column(_X, *_column(0, 100, False), 2_400)
    buf.put_double_column(_X, *_column(100, OWN_CHUNK_ROWS, False), 24 * OWN_CHUNK_ROWS)
    s = buf.series[_X]
    assert s.column is None and [len(c) for c in s.ts_chunks] == [100, OWN_CHUNK_ROWS]
