"""``StringRows``, the row decoder's string-array columns, and the Arrow column the local server
makes of them without a str per string: both against plain lists of rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_wire_codec import PROPS

from beam_nominal._wire.batch import SeriesBatch, StringRows
from beam_nominal._wire.write_nominal import decode_write_nominal, encode_write_nominal
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server._format import _value_array

TEXT = st.one_of(st.sampled_from(["", "a", "héllo", "\0", "\x12", "y" * 200]), st.text(max_size=5))
ROWS = st.lists(st.lists(TEXT, max_size=6), max_size=10)


def columns(rows: list[list[str]]) -> StringRows:
    encoded = [s.encode("utf-8", "surrogatepass") for r in rows for s in r]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    bounds = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=bounds[1:])
    return StringRows(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets, bounds)


def valid(rows: list[list[str]]) -> bool:
    try:
        "".join(s for r in rows for s in r).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@PROPS
@given(ROWS, st.integers(-12, 12), st.integers(-12, 12), st.integers(-12, 12))
def test_string_rows_behave_as_the_list_of_rows(rows: list[list[str]], a: int, b: int, k: int) -> None:
    if not valid(rows):
        return
    sr = columns(rows)
    assert len(sr) == len(rows)
    assert list(sr) == rows
    assert sr == rows and sr == columns(rows) and sr != [*rows, ["x"]]
    if rows:
        # As a list of lists compares: rows as tuples, strings or None are not equal rows.
        assert sr != [tuple(r) for r in rows] and sr != tuple(rows)
        assert sr != [None] * len(rows) and sr != ["".join(r) for r in rows]
    assert list(sr[a:b]) == rows[a:b]
    assert list(sr[a:b][1:]) == rows[a:b][1:]  # a view of a view
    assert list(sr[::2]) == rows[::2]
    if -len(rows) <= k < len(rows):
        assert sr[k] == rows[k]
    else:
        with pytest.raises(IndexError):
            sr[k]
    assert all(type(r) is list for r in sr)


def _decoded(series: list[list[list[str]]]) -> list[SeriesBatch]:
    batches = [
        SeriesBatch(SeriesKey.of(f"sa{j}"), ValueType.STRING_ARRAY, np.arange(len(rows), dtype=np.int64) + 10**18, rows)
        for j, rows in enumerate(series)
    ]
    return decode_write_nominal(encode_write_nominal(batches), "ri.x").batches


def _arrow(rows: list[Any]) -> pa.Array:
    return pa.array(rows, type=pa.list_(pa.string()))


@PROPS
@given(st.lists(ROWS, min_size=1, max_size=5), st.data())
def test_the_servers_column_of_string_rows_is_the_column_of_the_lists(series: list[Any], data: Any) -> None:
    if not all(valid(rows) for rows in series):
        return
    parts = [b.values for b in _decoded(series)]
    want = [r for rows in series for r in rows]
    # The series of one request: contiguous views of one region's columns.
    assert _value_array(ValueType.STRING_ARRAY, [SeriesBatch(SeriesKey.of("x"), ValueType.STRING_ARRAY,
                                                             np.zeros(len(p), np.int64), p) for p in parts]
                        ).equals(_arrow(want))
    # Views out of order, overlapping and of other columns: each joined as it is.
    picked = data.draw(st.lists(st.sampled_from(parts + [columns(rows) for rows in series]), min_size=1, max_size=6))
    cut = [p[data.draw(st.integers(0, len(p))):] for p in picked]
    batches = [SeriesBatch(SeriesKey.of("x"), ValueType.STRING_ARRAY, np.zeros(len(p), np.int64), p) for p in cut]
    assert _value_array(ValueType.STRING_ARRAY, batches).equals(_arrow([r for p in cut for r in p]))


def test_rows_decoded_as_columns_and_as_lists_are_one_column() -> None:
    # A string of 20,000 bytes is past the vector path: that series comes from upb as lists.
    # Rows that are all empty are columns too (of no strings).
    fast, slow, empty = _decoded([[["a", "ü"], []], [["z" * 20_000]], [[], []]])
    assert [type(b.values) for b in (fast, slow, empty)] == [StringRows, list, StringRows]
    got = _value_array(ValueType.STRING_ARRAY, [fast, slow, empty, fast])
    assert got.equals(_arrow([["a", "ü"], [], ["z" * 20_000], [], [], ["a", "ü"], []]))
