"""A stream's columnar buffers: type pinning, taking points off a series (what comes in is
already checked: tests/unit/test_staging.py)."""

from __future__ import annotations

import numpy as np
import pytest

from beam_nominal._pipeline.buffer import Buffer
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
    assert buf.points == 1 and buf.nbytes == 24  # nothing of the refused column
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


def test_a_column_of_a_series_pinned_to_another_type_is_refused() -> None:
    buf = Buffer()
    buf.add(_X, ValueType.INT64, np.array([1], dtype=np.int64), np.array([1], dtype=np.int64), 24)
    with pytest.raises(SeriesTypeError, match="int64"):
        buf.add(_X, ValueType.DOUBLE, np.array([2], dtype=np.int64), np.array([2.0]), 24)
    assert buf.points == 1
