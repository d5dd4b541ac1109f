"""Timestamps in every form reach nanoseconds exactly or are refused naming why, at the entry every
element path uses (``timestamp_ns`` for one value, ``timestamps_ns`` for an array; the two agree):
datetime64 of every unit, ISO strings with UTC offsets, and the int64 range.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from beam_nominal.model import timestamp_ns, timestamps_ns

NS_2024 = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z


def both(value: np.datetime64) -> list[int]:
    """The value as a scalar and in an array, read as UTC: the two paths must agree."""
    return [timestamp_ns(value, "UTC"), *timestamps_ns(np.array([value]), "UTC").tolist()]


# -- datetime64 of every unit, exact or refused ----------------------------------------------------


@pytest.mark.parametrize("unit", ["Y", "M", "W", "D", "h", "m", "s", "ms", "us"])
def test_year_3000_is_refused_in_every_unit(unit: str) -> None:
    """Out of range is an error in every unit, as a scalar and in an array (numpy's own cast to ns
    wraps a day or month count silently to an 1830-like date)."""
    value = np.datetime64("3000-01-01", unit) if unit not in ("Y", "M") else np.datetime64("3000", unit)
    with pytest.raises(ValueError, match="outside the int64 nanosecond range"):
        timestamp_ns(value)
    with pytest.raises(ValueError, match="outside the int64 nanosecond range"):
        timestamps_ns(np.array([value]))


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (np.datetime64("2024", "Y"), NS_2024),
        (np.datetime64("2024-01", "M"), NS_2024),
        (np.datetime64("2024-03", "M"), NS_2024 + (31 + 29) * 86_400 * 10**9),
        (np.datetime64("2024-01-01", "D"), NS_2024),
        (np.datetime64("2262-04-11", "D"), 9_223_286_400 * 10**9),
        (np.datetime64("1677-09-22", "D"), -9_223_286_400 * 10**9),
        (np.datetime64(2000, "ps"), 2),
        (np.datetime64(10**9, "fs"), 1000),
        (np.datetime64(5 * 10**9, "as"), 5),
        (np.datetime64(5, "10ms"), 50_000_000),
    ],
    ids=str,
)
def test_datetime64_of_every_unit_is_exact(value: np.datetime64, ns: int) -> None:
    assert both(value) == [ns, ns]


def test_an_array_of_a_multiplied_calendar_unit_is_exact() -> None:
    values = np.array(["2024-01", "2024-04"], dtype="datetime64[3M]")
    assert timestamps_ns(values, "UTC").tolist() == [NS_2024, NS_2024 + (31 + 29 + 31) * 86_400 * 10**9]


@pytest.mark.parametrize("value", [np.datetime64(1500, "ps"), np.datetime64(1, "fs"), np.datetime64(1, "as")], ids=str)
def test_sub_nanosecond_remainder_is_refused_not_truncated(value: np.datetime64) -> None:
    with pytest.raises(ValueError, match="not a whole number of nanoseconds"):
        timestamp_ns(value)
    with pytest.raises(ValueError, match=r"timestamps\[1\]: .*not a whole number of nanoseconds"):
        timestamps_ns(np.array([np.datetime64(0, value.dtype.str[-3:-1]), value]))


# -- ISO strings -----------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", ["+99:99", "-2400", "+24:00", "+23:60", "-00:60"])
def test_iso_offset_out_of_range_is_refused(offset: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"UTC offset {offset},")):
        timestamp_ns(f"2024-01-01T00:00:00{offset}")


@pytest.mark.parametrize(
    ("offset", "shift_s"), [("Z", 0), ("+23:59", 86_340), ("-2359", -86_340), ("+05:30", 19_800), ("-00:00", 0)]
)
def test_iso_offsets_in_range_shift_exactly(offset: str, shift_s: int) -> None:
    assert timestamp_ns(f"2024-01-01T00:00:00.000000001{offset}") == NS_2024 + 1 - shift_s * 10**9


@pytest.mark.parametrize("text", ["2024-13-01T00:00:00Z", "2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z"])
def test_iso_invalid_fields_name_the_string(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"timestamp string '{text}' is not a valid date and time")):
        timestamp_ns(text)


# -- -2**63 ----------------------------------------------------------------------------------------


def test_int64_min_is_refused_as_scalar_and_in_arrays_alike() -> None:
    for call in (
        lambda: timestamp_ns(-(2**63)),
        lambda: timestamps_ns(np.array([0, -(2**63)])),
        lambda: timestamps_ns([0, -(2**63)]),
    ):
        with pytest.raises(ValueError, match="outside the int64 nanosecond range"):
            call()
    assert both(np.datetime64(-(2**63) + 1, "ns")) == [-(2**63) + 1] * 2
