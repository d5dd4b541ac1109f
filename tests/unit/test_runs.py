"""Records laid out from columns of runs (``_wire/runs.py``), and the protobuf encoders that lay
out many double series from their columns: every wire's bytes equal those its series-by-series
path writes for the same series, whatever the names' and series' lengths (varint sizes change at
128 and 16,384), and a request the column path does not take goes by that path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._wire import encode, runs, write_nominal
from beam_nominal._wire.batch import DoubleBatches
from beam_nominal._wire.write_batches_v2 import WRITE_BATCHES_V2
from beam_nominal.model import SeriesKey

LAYOUTS = [encode.COLUMN_BATCHES, WRITE_BATCHES_V2]


@pytest.mark.skipif(runs.gather_runs is None, reason="built without the C extension")
@given(st.binary(max_size=200), st.lists(st.tuples(st.integers(0, 220), st.integers(0, 50)), max_size=40))
def test_gather_runs_is_the_runs_concatenated_or_refuses_one_outside(src: bytes, pairs: list[tuple[int, int]]) -> None:
    gather = runs.gather_runs
    assert gather is not None
    starts = np.array([a for a, _ in pairs], np.int64)
    lens = np.array([n for _, n in pairs], np.int64)
    out = bytearray(int(lens.sum()) + 3)
    if all(a + n <= len(src) for a, n in pairs):
        want = b"".join(src[a : a + n] for a, n in pairs)
        assert gather(np.frombuffer(src, np.uint8), starts, lens, out) == len(want)
        assert out[: len(want)] == want and out[len(want) :] == bytes(3)
        if want:
            with pytest.raises(ValueError, match="do not fit"):
                gather(src, starts, lens, bytearray(len(want) - 1))
    else:
        with pytest.raises(ValueError, match="outside"):
            gather(src, starts, lens, out)
    with pytest.raises(TypeError, match="gather_runs: starts must be a 1-D int64 array"):
        gather(src, starts.astype(np.int32), lens, out)
    with pytest.raises(TypeError, match="gather_runs: lens must be a 1-D int64 array"):
        gather(src, starts, lens.reshape(-1, 1), out)
    with pytest.raises(BufferError):
        gather(src, starts, lens, bytes(len(out)))  # not writable


@given(st.lists(st.tuples(st.binary(max_size=5), st.binary(max_size=5), st.integers(0, 2)), max_size=30))
def test_lay_out_writes_each_record_as_its_runs_in_column_order(records: list[tuple[bytes, bytes, int]]) -> None:
    fixed = [b"A", b"BB", b"CCC"]
    firsts = b"".join(r[0] for r in records)
    seconds = b"".join(r[1] for r in records)
    starts = np.cumsum([0, 1, 2])
    laid = runs.lay_out(
        [
            (b"#", 1, 0),
            (firsts, np.array([len(r[0]) for r in records], np.int64), None),
            (b"".join(fixed), np.array([r[2] + 1 for r in records], np.int64), starts[[r[2] for r in records]]),
            (np.frombuffer(seconds, np.uint8), np.array([len(r[1]) for r in records], np.int64), None),
        ],
        len(records),
    )
    assert bytes(laid) == b"".join(b"#" + a + fixed[k] + b for a, b, k in records)


def test_by_value_calls_once_per_distinct_value() -> None:
    calls: list[int] = []

    def make(v: int) -> bytes:
        calls.append(v)
        return b"x" * v

    joined, lens, at = runs.by_value(np.array([3, 1, 3, 2, 1], np.int64), make)
    assert sorted(calls) == [1, 2, 3]
    assert [joined[a : a + n] for a, n in zip(at.tolist(), lens.tolist(), strict=True)] == [
        b"xxx", b"x", b"xxx", b"xx", b"x"
    ]
    calls.clear()
    assert runs.by_value(np.array([4, 4], np.int64), make)[1].tolist() == [4, 4] and calls == [4]


def _batches(names: list[str], counts: list[int], seed: int, ts_low: int = 0) -> DoubleBatches:
    rng = np.random.default_rng(seed)
    total = sum(counts)
    ts = rng.integers(ts_low, 2**62, total, dtype=np.int64)
    return DoubleBatches(
        [(n, ()) for n in names], np.array(counts, np.int64), ts, rng.standard_normal(total)
    )


def _assert_wires_equal(db: DoubleBatches, taken: bool) -> None:
    """Each wire's bytes for ``db`` equal those of its series one by one; ``taken``: whether
    the column path took the request."""
    assert (write_nominal._double_series(db) is not None) is taken
    for session in (None, "session"):
        assert write_nominal.encode_write_nominal(db, session) == write_nominal.encode_write_nominal(list(db), session)
    for layout in LAYOUTS:
        assert (encode._double_columns(layout, db) is not None) is taken
        for rid in ("", "ri.x"):
            source = "src" if layout.source_key is not None else None
            one_by_one = encode.encode_columns(layout, rid, list(db), source)
            assert encode.encode_columns(layout, rid, db, source) == one_by_one


_NAME_LENGTHS = st.sampled_from([1, 2, 9, 126, 127, 128, 129, 300, 1024])
_COUNTS = st.sampled_from([1, 2, 3, 9, 15, 16, 17, 655, 656, 744, 745, 1170, 2047, 2048])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_NAME_LENGTHS, _COUNTS), min_size=1, max_size=40), st.integers(0, 2**32))
def test_many_double_series_encode_as_series_by_series(series: list[tuple[int, int]], seed: int) -> None:
    # Unique names of the lengths drawn (a DoubleBatches holds each series once).
    names = [str(i).rjust(length, "c") if length > 1 else chr(65 + i) for i, (length, _) in enumerate(series)]
    _assert_wires_equal(_batches(names, [c for _, c in series], seed), taken=True)


def test_a_hundred_thousand_one_point_series_take_the_column_path() -> None:
    db = _batches([f"ch{i:07d}" for i in range(100_000)], [1] * 100_000, 0)
    _assert_wires_equal(db, taken=True)


@pytest.mark.parametrize(
    "case",
    ["tagged", "non-ascii", "before-1970"],
)
def test_what_the_column_path_does_not_take_goes_series_by_series(case: str) -> None:
    names = ["a", "bb", "ccc"]
    if case == "non-ascii":
        names[1] = "b\u00e9"
    db = _batches(names, [1, 2, 3], 7, ts_low=-(2**40) if case == "before-1970" else 0)
    if case == "before-1970":
        db.timestamps[0] = -1
    if case == "tagged":
        db.keys[1] = SeriesKey.of("bb", {"rig": "A"})
    _assert_wires_equal(db, taken=False)


def _outcome(encoder: Callable[..., Any], *args: Any) -> object:
    """The bytes ``encoder(*args)`` makes, or its error's type and message."""
    try:
        return bytes(encoder(*args))
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)


def _assert_wires_agree(db: DoubleBatches) -> None:
    """Each wire writes ``db`` as it writes its series one by one, or refuses it alike."""
    row = write_nominal.encode_write_nominal
    assert _outcome(row, db) == _outcome(row, list(db))
    for layout in LAYOUTS:
        columns = encode.encode_columns
        assert _outcome(columns, layout, "ri.x", db) == _outcome(columns, layout, "ri.x", list(db))


_TS = np.array([1, 2, 3, 4], np.int64)
_VALUES = np.array([1.5, 2.5, 3.5, 4.5])


@pytest.mark.parametrize(
    ("timestamps", "values"),
    [
        (_TS.astype(np.uint64), _VALUES),  # converted: every one fits int64
        (np.array([1, 2, 3, 2**63 + 5], np.uint64), _VALUES),
        (_TS.astype(np.float64), _VALUES),
        (_TS.astype("datetime64[ns]"), _VALUES),
        (_TS.tolist(), _VALUES),
        (_TS, _VALUES + 1j),
        (_TS, _VALUES.astype(object)),
        (_TS, np.array(["1.5", "2.5", "3.5", "4.5"], object)),
        (_TS, np.array(["1.5", "2.5", "3.5", "4.5"])),
        (_TS, _VALUES.reshape(4, 1)),
    ],
    ids=["uint64", "uint64-over-int64", "float-ns", "datetime64", "list-ns", "complex", "object", "object-text",
         "text", "2-D"],
)
def test_columns_other_than_int64_and_float64_go_series_by_series(timestamps: object, values: object) -> None:
    # That path converts what it can exactly and names the batch of what it cannot: the column
    # path neither casts a value (a complex's imaginary part dropped, a text parsed) nor fails
    # unnamed inside numpy.
    db = DoubleBatches([("a", ()), ("bb", ()), ("ccc", ())], np.array([1, 2, 1], np.int64), timestamps, values)  # type: ignore[arg-type]
    assert write_nominal._double_series(db) is None
    assert all(encode._double_columns(layout, db) is None for layout in LAYOUTS)
    _assert_wires_agree(db)


@pytest.mark.parametrize("tags", [None, np.array([["rig", "A"]])], ids=["none", "array"])
def test_tags_other_than_a_tuple_go_series_by_series(tags: object) -> None:
    # None is no tags to the column path's test of truth, and an array has no truth value: that
    # path refuses the one and writes the other's tags.
    db = _batches(["a", "bb", "ccc"], [1, 2, 1], 3)
    db.keys[0] = ("a", tags)  # type: ignore[assignment]
    assert write_nominal._double_series(db) is None
    _assert_wires_agree(db)


class _Marked(str):
    """A str whose own ``encode`` and ``__len__`` say other than its text."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"X" + str.encode(self, encoding, errors)

    def __len__(self) -> int:
        return 99


def test_a_str_subclass_channel_is_written_as_its_text_on_every_path() -> None:
    # Its own encode is not asked: the column path joins the text, and so the series-by-series
    # path (whose key cache would otherwise answer for an equal plain str with other bytes).
    names = [_Marked("marked.channel.one"), "bb"]
    db = _batches(names, [1, 2], 5)
    plain = _batches([str.__str__(n) for n in names], [1, 2], 5)
    assert write_nominal._double_series(db) is not None
    for session in (None, _Marked("session")):
        written = write_nominal.encode_write_nominal(plain, session and str.__str__(session))
        assert write_nominal.encode_write_nominal(db, session) == written
        assert write_nominal.encode_write_nominal(list(db), session) == written
    for layout in LAYOUTS:
        written = encode.encode_columns(layout, "ri.x", plain)
        assert encode.encode_columns(layout, _Marked("ri.x"), db) == written
        assert encode.encode_columns(layout, "ri.x", list(db)) == written


def test_edge_columns_encode_as_series_by_series() -> None:
    # Timestamps at both ends of their range, NaNs of any payload, -0.0, subnormals and
    # infinities, reversed and strided views, SeriesKey and tuple keys, empty series, and names
    # either side of a varint size and of MAX_NAME_CHARS (over it: series by series).
    bits = [0x7FF0000000000001, 0xFFF8000000000000, 0x7FF8DEAD0000BEEF, 0x8000000000000000, 1, 0x7FF0000000000000]
    specials = np.array(bits, np.uint64).view(np.float64)
    for names, taken in ((["a", "b" * 127, "c" * 128, "d" * 1024, "e" * 9], True), (["a", "f" * 1025], False)):
        counts = np.array([3, 0, 1, 4, 2][: len(names)], np.int64)
        total = int(counts.sum())
        ts = np.zeros(2 * total, np.int64)
        ts[::2] = [0, 2**63 - 1, 1, 10**9, 10**9 - 1, 2**35 * 10**8, 7, 2**62, 3, 5][:total]
        vals = np.resize(specials, 2 * total)[::-1]
        keys = [SeriesKey(n, ()) if k % 2 else (n, ()) for k, n in enumerate(names)]
        _assert_wires_equal(DoubleBatches(keys, counts, ts[::2], vals[::2]), taken=taken)  # type: ignore[arg-type]
