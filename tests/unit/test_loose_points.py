"""Single double points of many series held as loose columns (``Buffer.add_loose``) and grouped
once per cut: every point delivered once, each series in arrival order, series in first-seen
order, requests within their budget, the same reqs for the same input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from beam_nominal._pipeline.buffer import Buffer
from beam_nominal._pipeline.packer import cut_requests
from beam_nominal._pipeline.sizes import DOUBLE_POINT_BYTES, series_overhead
from beam_nominal._pipeline.staging import _SERIES_ROWS, PointBatch
from beam_nominal._wire.batch import DoubleBatches
from beam_nominal.model import SeriesKey, ValueType

T0 = 1_700_000_000_000_000_000


def _points(n: int, series: int, seed: int = 0) -> list[tuple[str, int, float]]:
    rng = np.random.default_rng(seed)
    names = [f"s{k}" for k in rng.permutation(series)]
    return [(names[int(rng.integers(series))] if i >= series else names[i], T0 + i, i * 0.5) for i in range(n)]


def _cut_all(buffer: Buffer, max_bytes: int, max_points: int, final: bool = True) -> list[Any]:
    return cut_requests(
        buffer, dataset_rid="ri.x", max_bytes=max_bytes, max_points=max_points, final=final, next_seq=0
    )


def _delivered(reqs: list[Any]) -> dict[SeriesKey, list[tuple[int, float]]]:
    out: dict[SeriesKey, list[tuple[int, float]]] = {}
    for req in reqs:
        for b in req.batches:
            assert b.value_type is ValueType.DOUBLE
            out.setdefault(b.key, []).extend(zip(b.timestamps.tolist(), b.values.tolist(), strict=True))
    return out


def _expected(points: list[tuple[str, int, float]]) -> dict[SeriesKey, list[tuple[int, float]]]:
    out: dict[SeriesKey, list[tuple[int, float]]] = {}
    for ch, t, v in points:
        out.setdefault(SeriesKey(ch), []).append((t, v))
    return out


def _staged(points: list[tuple[str, int, float]], buffer: Buffer, every: int = 1000) -> PointBatch:
    batch = PointBatch()
    for i, (ch, t, v) in enumerate(points):
        batch.add_point(ch, t, v, None)
        if i % every == every - 1:
            batch.move_into(buffer)
    batch.move_into(buffer)
    return batch


def test_every_point_once_in_arrival_order_within_budget() -> None:
    points = _points(20_000, 3_000)
    buffer = Buffer()
    _staged(points, buffer)
    assert buffer.loose and buffer.points == len(points)
    reqs = _cut_all(buffer, max_bytes=20_000, max_points=700)
    assert buffer.points == 0 and buffer.nbytes == 0 and not buffer.loose
    assert _delivered(reqs) == _expected(points)
    first_seen = list(dict.fromkeys(SeriesKey(ch) for ch, _, _ in points))
    order = list(dict.fromkeys(b.key for c in reqs for b in c.batches))
    assert order == first_seen
    for c in reqs:
        batches = c.batches
        assert sum(len(b.timestamps) for b in batches) <= 700
        estimate = sum(series_overhead(b.key) + DOUBLE_POINT_BYTES * len(b.timestamps) for b in batches)
        assert estimate <= 20_000
        assert c.buffered_bytes == DOUBLE_POINT_BYTES * sum(len(b.timestamps) for b in batches)


def test_a_series_longer_than_a_request_is_split_in_order() -> None:
    points = [("long", T0 + i, float(i)) for i in range(5_000)] + _points(100, 50, seed=1)
    buffer = Buffer()
    _staged(points, buffer)
    reqs = _cut_all(buffer, max_bytes=10_000, max_points=10**6)
    assert len(reqs) > 10
    assert _delivered(reqs) == _expected(points)


def test_a_non_final_cut_keeps_less_than_a_request_and_the_rest_follows_in_order() -> None:
    points = _points(30_000, 2_000, seed=2)
    buffer = Buffer()
    _staged(points[:20_000], buffer)
    first = _cut_all(buffer, max_bytes=50_000, max_points=10**6, final=False)
    assert first
    assert buffer.nbytes < 50_000
    batch = _staged(points[20_000:], buffer)
    del batch
    rest = _cut_all(buffer, max_bytes=50_000, max_points=10**6)
    assert _delivered(first + rest) == _expected(points)


def test_a_column_after_loose_points_of_its_series_comes_after_them() -> None:
    points = _points(3_000, 300, seed=3)
    buffer = Buffer()
    batch = _staged(points, buffer)
    key = SeriesKey(points[0][0])
    ts = np.arange(10, dtype=np.int64) + T0 + 10**6
    buffer.add(key, ValueType.DOUBLE, ts, np.ones(10), DOUBLE_POINT_BYTES * 10)
    assert not buffer.loose
    batch.add_point(points[0][0], T0 + 2 * 10**6, 2.0, None)
    batch.move_into(buffer)
    want = _expected(points)
    want[key] += [(t, 1.0) for t in ts.tolist()] + [(T0 + 2 * 10**6, 2.0)]
    assert _delivered(_cut_all(buffer, max_bytes=30_000, max_points=10**6)) == want


def test_the_same_points_give_the_same_requests() -> None:
    points = _points(10_000, 1_500, seed=4)

    def requests() -> list[list[tuple[SeriesKey, list[int], list[float]]]]:
        buffer = Buffer()
        _staged(points, buffer, every=777)
        return [
            [(b.key, b.timestamps.tolist(), b.values.tolist()) for b in c.batches]
            for c in _cut_all(buffer, max_bytes=15_000, max_points=900)
        ]

    assert requests() == requests()


def test_a_point_larger_than_the_budget_still_goes_alone() -> None:
    buffer = Buffer()
    _staged([("x" * 100, T0, 1.0), ("y" * 100, T0 + 1, 2.0)], buffer)
    reqs = _cut_all(buffer, max_bytes=50, max_points=10)
    assert [len(c.batches) for c in reqs] == [1, 1]
    assert _delivered(reqs) == _expected([("x" * 100, T0, 1.0), ("y" * 100, T0 + 1, 2.0)])



def test_wide_records_of_floats_go_as_loose_points_in_record_order() -> None:
    channels = [f"w{k}" for k in range(300)]
    batch, buffer = PointBatch(), Buffer()
    want: dict[SeriesKey, list[tuple[int, float]]] = {}
    for r in range(7):
        record = {ch: r * 1000.0 + k for k, ch in enumerate(channels)}
        batch.add_record(T0 + r, record)
        for ch, v in record.items():
            want.setdefault(SeriesKey(ch), []).append((T0 + r, v))
        if r == 2:
            batch.move_into(buffer)
            assert buffer.loose and buffer.loose_points == 900
        if r == 4:  # single points between records: each series keeps its order
            batch.add_point("w3", T0 + 100, -1.0, None)
            want[SeriesKey("w3")].append((T0 + 100, -1.0))
    batch.move_into(buffer)
    assert batch.points == 0 and batch.nbytes == 0
    assert _delivered(_cut_all(buffer, max_bytes=8_000, max_points=10**6)) == want


@pytest.mark.parametrize("rows", [_SERIES_ROWS - 1, _SERIES_ROWS, 3 * _SERIES_ROWS])
def test_a_block_of_many_rows_goes_as_a_series_a_channel_and_fewer_as_loose_points(rows: int) -> None:
    channels = [f"w{k}" for k in range(5)]
    batch, buffer = PointBatch(), Buffer()
    want: dict[SeriesKey, list[tuple[int, float]]] = {}
    for r in range(rows):
        record = {ch: r * 10.0 + k for k, ch in enumerate(channels)}
        batch.add_record(T0 + r, record)
        for ch, v in record.items():
            want.setdefault(SeriesKey(ch), []).append((T0 + r, v))
    batch.move_into(buffer)
    loose = rows < _SERIES_ROWS
    assert buffer.loose_points == (rows * len(channels) if loose else 0)
    assert len(buffer.series) == (0 if loose else len(channels))
    assert buffer.points == rows * len(channels) and batch.points == 0
    assert _delivered(_cut_all(buffer, max_bytes=8_000, max_points=10**6)) == want


@pytest.mark.parametrize(("max_bytes", "max_points"), [(20_000, 700), (3_000, 10**6), (10**6, 50), (900, 7)])
def test_loose_points_are_cut_as_the_same_requests_as_series_buffers(max_bytes: int, max_points: int) -> None:
    points = [("long", T0 - i, float(i)) for i in range(400)] + _points(6_000, 800, seed=5)

    def requests(spill: bool) -> list[list[tuple[SeriesKey, list[int], list[float]]]]:
        buffer = Buffer()
        _staged(points, buffer, every=997)
        if spill:  # the general cut, series by series
            buffer._spill_loose()
        return [
            [(b.key, b.timestamps.tolist(), b.values.tolist()) for b in c.batches]
            for c in _cut_all(buffer, max_bytes=max_bytes, max_points=max_points)
        ]

    assert requests(spill=False) == requests(spill=True)


def test_a_loose_cut_is_double_batches_whose_columns_are_its_series() -> None:
    buffer = Buffer()
    _staged(_points(5_000, 600, seed=6), buffer)
    reqs = _cut_all(buffer, max_bytes=10_000, max_points=10**6)
    assert len(reqs) > 3
    for c in reqs:
        batches = c.batches
        assert isinstance(batches, DoubleBatches)
        read = list(batches)
        assert len(read) == len(batches) == len(batches.keys)
        assert c.points == batches.points == sum(map(len, read))
        assert [b.key for b in read] == batches.keys
        assert np.concatenate([b.timestamps for b in read]).tolist() == batches.timestamps.tolist()
        assert np.concatenate([b.values for b in read]).tolist() == batches.values.tolist()
        assert [(b.key, b.timestamps.tolist()) for b in (batches[0], batches[-1])] == [
            (b.key, b.timestamps.tolist()) for b in (read[0], read[-1])
        ]
        assert [b.key for b in batches[1:3]] == [b.key for b in read[1:3]]
        with pytest.raises(IndexError):
            batches[len(read)]


def test_double_batches_refuse_columns_that_do_not_match_their_counts() -> None:
    ts = np.arange(5, dtype=np.int64)
    with pytest.raises(ValueError, match="do not match"):
        DoubleBatches([SeriesKey("a"), SeriesKey("b")], np.array([2, 2]), ts, np.ones(5))
    with pytest.raises(ValueError, match="do not match"):
        DoubleBatches([SeriesKey("a")], np.array([5]), ts, np.ones(4))


def test_double_batches_refuse_a_negative_count() -> None:
    # Counts summing to the points would otherwise pass, and each series read a run of another's
    # points (series "a" the first four here, "b" none).
    ts = np.arange(5, dtype=np.int64)
    with pytest.raises(ValueError, match="negative"):
        DoubleBatches([SeriesKey("a"), SeriesKey("b"), SeriesKey("c")], np.array([-1, 4, 2]), ts, np.ones(5))
