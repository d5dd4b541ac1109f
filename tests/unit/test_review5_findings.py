"""review5: a double-array row's exactness test misses int-likes that are neither int nor np.integer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.values import float_row
from beam_nominal.stream import NominalStream

# Integers a double cannot hold, as objects that are ints by ``__index__`` without being an int
# or an np.integer: a pyarrow scalar (``table.column("x")[0]``, which has no ``__float__``, so
# struct and array('d') convert it through ``__index__``) and a 0-d int64 ndarray. float_row
# packs them as 2**53 and _check_exact_ints skips them (its isinstance test), so the row is
# stored rounded. 2dc18ea did the same (its _check_exact_ints had the same isinstance test).
_INT_LIKES = [
    pytest.param(lambda: pa.scalar(2**53 + 1, pa.int64()), id="pa.int64-scalar"),
    pytest.param(lambda: pa.scalar(2**64 - 1, pa.uint64()), id="pa.uint64-scalar"),
    pytest.param(lambda: np.array(2**53 + 1, dtype=np.int64), id="0-d-int64-ndarray"),
]


@pytest.mark.parametrize("make", _INT_LIKES)
@pytest.mark.parametrize("length", [1, 8, 200])
def test_an_index_int_a_double_cannot_hold_is_refused_in_a_list_row(make: object, length: int) -> None:
    bad = make()  # type: ignore[operator]
    row: list[object] = [0.5] * length
    row[length // 2] = bad
    with pytest.raises(TypeError, match="not exact as a double"):
        float_row("c", row)


@pytest.mark.parametrize("make", _INT_LIKES)
def test_enqueue_float_array_does_not_store_a_rounded_index_int(make: object) -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    try:
        with pytest.raises(TypeError, match="not exact as a double"):
            s.enqueue_float_array("c", 1, [make(), 0.0])  # type: ignore[operator]
    finally:
        s.close()
    assert target.points() == {}


def test_exact_index_ints_still_pass() -> None:
    row = [pa.scalar(2**63, pa.uint64()), np.array(-(2**53), dtype=np.int64), pa.scalar(7, pa.int8())]
    assert np.frombuffer(float_row("c", row), dtype=np.float64).tolist() == [2.0**63, -(2.0**53), 7.0]
