"""Bugs found reviewing the direct column path and float_row's struct packing (2dc18ea..ca68857).

Each test fails on the code it names and should pass once fixed.
"""

from __future__ import annotations

import numpy as np
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.values import float_row
from beam_nominal.stream import NominalStream

_BEYOND = [np.int64(2**53 + 1), np.int64(-(2**53) - 1), np.uint64(2**64 - 1), np.int64(2**62 + 1)]


@pytest.mark.parametrize("bad", _BEYOND, ids=repr)
@pytest.mark.parametrize("length", [1, 8, 79, 80, 200])
def test_a_numpy_int_a_double_cannot_hold_is_refused_in_a_list_row_of_any_length(bad: object, length: int) -> None:
    # A tuple row refuses it (float_array_row checks every element), and since ca68857 so does
    # a list row of 80 or more (the numpy reductions see its magnitude); a shorter list row
    # proves exactness by comparing the row with its doubles, and numpy compares an int64 with
    # a float by converting the int64 to a double, so the rounded value compares equal and the
    # row is accepted with 2**53 + 1 silently stored as 2**53.
    row: list[object] = [0.5] * length
    row[length // 2] = bad
    with pytest.raises(TypeError, match=f"integer {int(bad)} in a double array"):  # type: ignore[call-overload]
        float_row("c", row)
    with pytest.raises(TypeError, match="not exact as a double"):
        float_row("c", tuple(row))


def test_enqueue_float_array_does_not_store_a_rounded_numpy_int() -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    try:
        with pytest.raises(TypeError, match="not exact as a double"):
            s.enqueue_float_array("c", 1, [np.int64(2**53 + 1), 0.0])
    finally:
        s.close()
    assert target.points() == {}
