"""Double-array rows from ``enqueue_float_array``: tails of same-width lists become one matrix.

The matrix path must be invisible: the same values reach the wire and an Avro file as through
per-row arrays, including when a series mixes widths, lists and ndarrays, and bad rows still fail
at enqueue.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _stream_fakes import RecordingTarget
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._pipeline.values import double_rows_column, float_row, value_bytes
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.stream import NominalStream
from beam_nominal.targets.avro import AvroFileTarget, read_avro_file

T0 = 1_700_000_000_000_000_000
RID = "ri.test.rows"


def _rows(n: int) -> list[list[float]]:
    # Rows of width 3 with a ragged stretch and special values in the middle, then width 3 again.
    rows: list[list[float]] = []
    for i in range(n):
        if 5000 <= i < 5003:
            rows.append([float(i)] * (i - 4999))  # widths 1, 2, 3
        elif i == 6000:
            rows.append([math.nan, -0.0, math.inf])
        else:
            rows.append([i * 0.5, -i * 1.0, 2.0**60 + i])
    return rows


def _write(stream: NominalStream, rows: list[list[float]]) -> None:
    for i, row in enumerate(rows):
        if 7000 <= i < 7003:
            stream.enqueue_float_array("spectrum", T0 + i, np.array(row))  # ndarrays among lists
        else:
            stream.enqueue_float_array("spectrum", T0 + i, row)
    stream.enqueue_float_array("empty", T0, [])


def _same(got: list[object], want: list[list[float]]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = list(np.asarray(g, dtype=np.float64))
        assert len(g) == len(w), i
        for a, b in zip(g, w, strict=True):
            assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b)), i


def test_rows_reach_the_wire_exactly_across_spills() -> None:
    rows = _rows(9000)  # more than two tail spills of 4,096
    target = RecordingTarget()
    with NominalStream(target, dataset_rid=RID, linger=None, max_request_bytes=64 * 1024) as stream:
        _write(stream, rows)
    points = target.points()
    spectrum = points[SeriesKey.of("spectrum")]
    assert [t for t, _ in spectrum] == [T0 + i for i in range(len(rows))]
    _same([v for _, v in spectrum], rows)
    assert [list(v) for _, v in points[SeriesKey.of("empty")]] == [[]]  # type: ignore[call-overload]


def test_rows_reach_an_avro_file_exactly(tmp_path: Path) -> None:
    rows = _rows(9000)
    path = tmp_path / "rows.avro"
    with NominalStream(AvroFileTarget(path, dataset_rid=RID), dataset_rid=RID, linger=None) as stream:
        _write(stream, rows)
    series = read_avro_file(path)
    [(ts, values)] = [v for k, v in series.items() if k[0] == "spectrum"]
    assert list(ts) == [T0 + i for i in range(len(rows))]
    _same(list(values), rows)


@pytest.mark.parametrize("row", [["a", 1.0], [[1.0, 2.0]], [None], [2**2000]])
def test_a_bad_row_fails_at_enqueue_naming_the_channel(row: list[object]) -> None:
    target = RecordingTarget()
    with NominalStream(target, dataset_rid=RID, linger=None) as stream:
        stream.enqueue_float_array("ok", T0, [1.0])
        with pytest.raises(TypeError, match="'bad'"):
            stream.enqueue_float_array("bad", T0, row)
    assert SeriesKey.of("bad") not in target.points()
    assert len(target.points()[SeriesKey.of("ok")]) == 1


def test_a_tail_of_same_width_lists_becomes_one_matrix_and_anything_else_stays_rows() -> None:
    tail = [float_row("c", [float(i), i + 0.5]) for i in range(5)]
    matrix = double_rows_column(tail)
    assert isinstance(matrix, np.ndarray) and matrix.shape == (5, 2)
    assert matrix.tolist() == [[float(i), i + 0.5] for i in range(5)]
    mixed = double_rows_column([*tail, float_row("c", np.array([1.0, 2.0]))])
    assert isinstance(mixed, list) and [r.tolist() for r in mixed] == [*matrix.tolist(), [1.0, 2.0]]
    ragged = double_rows_column([float_row("c", [1.0]), float_row("c", [1.0, 2.0])])
    assert isinstance(ragged, list) and [r.tolist() for r in ragged] == [[1.0], [1.0, 2.0]]
    # One size rule for a column in either form.
    assert value_bytes(ValueType.DOUBLE_ARRAY, matrix) == 5 * (2 * 8 + 4)
    assert value_bytes(ValueType.DOUBLE_ARRAY, mixed) == 6 * (2 * 8 + 4)
    assert value_bytes(ValueType.DOUBLE_ARRAY, ragged) == 3 * 8 + 2 * 4


_ELEMENTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.sampled_from([2**53, -(2**53), 2**53 + 1, -(2**53) - 1, 2**63, True, False, 2.0**53, -(2.0**54), 2.0**49]),
    st.floats(width=32).map(np.float64),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(np.int64),  # numpy compares these lossily
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ELEMENTS, max_size=200))
def test_float_row_refuses_exactly_the_rows_holding_an_int_a_double_cannot_hold(row: list[object]) -> None:
    # Rows with NaNs, infs, values just under and over 2**49 and 2**53 (where float_row starts
    # looking element by element), Python and numpy ints. An int beyond 2**53 that is a double
    # itself (2**63) is exact, so it passes.
    inexact = any(type(v) in (int, np.int64) and float(v) != int(v) for v in row)  # type: ignore[call-overload]
    if inexact:
        with pytest.raises(TypeError, match="not exact as a double"):
            float_row("c", row)
        return
    out = float_row("c", row)
    expected = np.array([float(v) for v in row], dtype=np.float64)  # type: ignore[arg-type]
    assert np.frombuffer(out, dtype=np.float64).tobytes() == expected.tobytes()


@pytest.mark.parametrize("fill", [0.5, math.nan, -math.inf])
@pytest.mark.parametrize("bad", [2**53 + 1, -(2**53) - 1, 2**62 + 1])
@pytest.mark.parametrize(("length", "at"), [(8, 0), (79, 78), (80, 0), (80, 79), (513, 256)])
def test_float_row_finds_an_inexact_int_anywhere_in_a_short_or_long_row(
    fill: float, bad: int, length: int, at: int
) -> None:
    row: list[object] = [fill] * length
    row[at] = bad
    with pytest.raises(TypeError, match=f"integer {bad} in a double array"):
        float_row("c", row)
    row[at] = 2**63 if bad > 0 else -(2**63)  # beyond 2**53 but a double itself: exact
    assert np.frombuffer(float_row("c", row), dtype=np.float64)[at] == float(row[at])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "row",
    [
        (1.0, np.complex128(1j)),
        (np.complex64(1),),  # a zero imaginary part too: a complex is not a real number
        np.array([1.0, 2j]),
        np.array([1.0, np.complex128(1j)], dtype=object),
    ],
    ids=["tuple", "tuple-complex64", "complex-ndarray", "object-ndarray"],
)
def test_a_complex_number_in_a_double_array_is_refused_not_cut_to_its_real_part(row: object) -> None:
    # numpy converts a complex to a float by dropping its imaginary part, with only a warning.
    target = RecordingTarget()
    with NominalStream(target, dataset_rid=RID, linger=None) as stream:
        stream.enqueue_float_array("ok", T0, [1.0])
        with pytest.raises(TypeError, match=r"'bad'.*real numbers"):
            stream.enqueue_float_array("bad", T0, row)
        with pytest.raises(TypeError, match=r"'rows'.*real numbers"):
            stream.enqueue_batch("rows", [T0, T0 + 1], [[1.0, 2.0], row])
        with pytest.raises(TypeError, match=r"'wide'.*real numbers"):
            stream.enqueue_from_dict(T0, {"fine": 1.0, "wide": row})
    points = target.points()
    assert SeriesKey.of("ok") in points
    assert not {SeriesKey.of(c) for c in ("bad", "rows", "wide", "fine")} & set(points)


def test_complex_numbers_are_refused_whatever_warning_filter_the_caller_set() -> None:
    # The check looks at the elements, not at numpy's warning: filters that hide it or raise it
    # change nothing (a raised warning is not a TypeError, and would escape as a crash).
    import warnings

    rows = [(1.0, np.complex128(1j)), np.array([1.0, 2j]), np.array([1j], dtype=object)]
    for action in ("ignore", "always", "error"):
        with warnings.catch_warnings():
            warnings.simplefilter(action)  # type: ignore[call-overload]
            for row in rows:
                with pytest.raises(TypeError, match="real numbers"):
                    float_row("c", row)


# Integers a double cannot hold, in a list row and in a tuple row (which checks every element): as
# numpy ints (numpy compares an int64 with a float by converting the int64 to a double, so a
# comparison cannot prove a row exact), and as objects that are ints by ``__index__`` without
# being an int or an np.integer (a pyarrow scalar, which has no ``__float__``, and a 0-d int64
# ndarray).
_NUMPY_INTS_BEYOND = [np.int64(2**53 + 1), np.int64(-(2**53) - 1), np.uint64(2**64 - 1), np.int64(2**62 + 1)]
_INDEX_INTS_BEYOND = [
    pytest.param(lambda: pa.scalar(2**53 + 1, pa.int64()), id="pa.int64-scalar"),
    pytest.param(lambda: pa.scalar(2**64 - 1, pa.uint64()), id="pa.uint64-scalar"),
    pytest.param(lambda: np.array(2**53 + 1, dtype=np.int64), id="0-d-int64-ndarray"),
]


@pytest.mark.parametrize("bad", _NUMPY_INTS_BEYOND, ids=repr)
@pytest.mark.parametrize("length", [1, 8, 79, 80, 200])
def test_a_numpy_int_a_double_cannot_hold_is_refused_in_a_list_row_of_any_length(bad: object, length: int) -> None:
    row: list[object] = [0.5] * length
    row[length // 2] = bad
    with pytest.raises(TypeError, match=f"integer {int(bad)} in a double array"):  # type: ignore[call-overload]
        float_row("c", row)
    with pytest.raises(TypeError, match="not exact as a double"):
        float_row("c", tuple(row))


@pytest.mark.parametrize("make", _INDEX_INTS_BEYOND)
@pytest.mark.parametrize("length", [1, 8, 200])
def test_an_index_int_a_double_cannot_hold_is_refused_in_a_list_row(make: object, length: int) -> None:
    bad = make()  # type: ignore[operator]
    row: list[object] = [0.5] * length
    row[length // 2] = bad
    with pytest.raises(TypeError, match="not exact as a double"):
        float_row("c", row)


@pytest.mark.parametrize("make", [pytest.param(lambda: np.int64(2**53 + 1), id="np.int64"), *_INDEX_INTS_BEYOND])
def test_enqueue_float_array_does_not_store_a_rounded_int(make: object) -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid=RID, linger=None)
    try:
        with pytest.raises(TypeError, match="not exact as a double"):
            s.enqueue_float_array("c", 1, [make(), 0.0])  # type: ignore[operator]
    finally:
        s.close()
    assert target.points() == {}


def test_index_ints_a_double_holds_exactly_pass() -> None:
    row = [pa.scalar(2**63, pa.uint64()), np.array(-(2**53), dtype=np.int64), pa.scalar(7, pa.int8())]
    assert np.frombuffer(float_row("c", row), dtype=np.float64).tolist() == [2.0**63, -(2.0**53), 7.0]
