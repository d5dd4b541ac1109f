"""A new untagged double series written as a single float is held lazily by ``PointBatch`` (a
code, a key and its fast-path entry, no slot): every other path that meets it later sees one
series, pinned to double, its points in arrival order, as if it had been made whole at once."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from beam_nominal._pipeline.buffer import Buffer
from beam_nominal._pipeline.packer import cut_requests
from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import SeriesKey, ValueType

T0 = 1_700_000_000_000_000_000


def _points(batch: PointBatch) -> dict[SeriesKey, list[tuple[int, Any]]]:
    out: dict[SeriesKey, list[tuple[int, Any]]] = {}
    for series, _ in batch.take():
        assert series.value_type is ValueType.DOUBLE
        out.setdefault(series.key, []).extend(
            zip(np.asarray(series.timestamps).tolist(), list(series.values), strict=True)
        )
    return out


def _lazy(*channels: str) -> PointBatch:
    batch = PointBatch()
    for i, ch in enumerate(channels):
        batch.add_point(ch, T0 + i, float(i), None)
    assert batch._lazy_at is not None and batch._slots[-1] is None  # the case under test
    return batch


def test_a_later_checked_point_joins_the_lazy_series_in_order() -> None:
    batch = _lazy("a", "b")
    batch.add_point("a", T0 + 5, np.float64(7.0), None)  # a numpy float: the checked path
    batch.add_point("a", T0 + 6, 8.5, {})
    assert _points(batch) == {
        SeriesKey("a"): [(T0, 0.0), (T0 + 5, 7.0), (T0 + 6, 8.5)],
        SeriesKey("b"): [(T0 + 1, 1.0)],
    }


def test_a_lazy_series_is_pinned_to_double_for_every_path() -> None:
    batch = _lazy("a")
    with pytest.raises(SeriesTypeError, match="double"):
        batch.add_point("a", T0 + 1, "text", None)
    with pytest.raises(SeriesTypeError, match="double"):
        batch.add_series("a", np.array([T0 + 2]), ["x"])
    with pytest.raises(SeriesTypeError, match="double"):
        batch.add_typed("a", T0 + 3, ValueType.STRING, "x")
    assert batch.vtype_of(SeriesKey("a")) is ValueType.DOUBLE
    assert _points(batch) == {SeriesKey("a"): [(T0, 0.0)]}


def test_records_and_columns_after_lazy_series_keep_one_series_each() -> None:
    batch = _lazy("a", "b")
    batch.add_record(T0 + 10, {"a": 2.0, "c": 3.0})
    batch.add_series("b", np.array([T0 + 11, T0 + 12]), np.array([4.0, 5.0]))
    batch.add_point("d", T0 + 13, 6.0, None)  # lazy again, after the others were made
    batch.add_record(T0 + 14, {"d": 7.0})
    got = _points(batch)
    assert got == {
        SeriesKey("a"): [(T0, 0.0), (T0 + 10, 2.0)],
        SeriesKey("b"): [(T0 + 1, 1.0), (T0 + 11, 4.0), (T0 + 12, 5.0)],
        SeriesKey("c"): [(T0 + 10, 3.0)],
        SeriesKey("d"): [(T0 + 13, 6.0), (T0 + 14, 7.0)],
    }
    assert list(got) == [SeriesKey(c) for c in "abcd"]  # first-seen order


def test_lazy_series_reach_the_buffer_by_key() -> None:
    batch = _lazy("a", "b", "a2")
    batch.add_fast("b", T0 + 3, 9.0)
    buffer = Buffer()
    batch.move_into(buffer)
    assert list(buffer.loose_series) == [SeriesKey("a"), SeriesKey("b"), SeriesKey("a2")]
    reqs = cut_requests(buffer, dataset_rid="ri.x", max_bytes=1 << 20, max_points=1000, final=True, next_seq=0)
    got = {
        b.key: list(zip(b.timestamps.tolist(), b.values.tolist(), strict=True)) for c in reqs for b in c.batches
    }
    assert got == {
        SeriesKey("a"): [(T0, 0.0)],
        SeriesKey("b"): [(T0 + 1, 1.0), (T0 + 3, 9.0)],
        SeriesKey("a2"): [(T0 + 2, 2.0)],
    }


def test_many_lazy_series_leave_nothing_per_series_for_the_garbage_collector() -> None:
    # A full collection walks every tracked object: one a series would make writing a million
    # series cost more per point the more series there are.
    n = 20_000
    names = [f"gc{k}" for k in range(n)]
    batch, buffer = PointBatch(), Buffer()
    gc.collect()
    before = len(gc.get_objects())
    for i, ch in enumerate(names):
        batch.add_point(ch, T0 + i, float(i), None)
    batch.move_into(buffer)
    reqs = cut_requests(buffer, dataset_rid="ri.x", max_bytes=10**5, max_points=10**6, final=True, next_seq=0)
    gc.collect()
    assert len(gc.get_objects()) - before < n // 100
    assert sum(c.points for c in reqs) == n
    assert [b.key for c in reqs for b in c.batches] == [SeriesKey(ch) for ch in names]
