"""Issue 11's reproductions of defects 3 (over-long tags) and 4 (silently wrong timestamps), one
test each, at the public entry points (``timestamp_ns``/``timestamps_ns``, which every element
path uses, ``NominalStream.enqueue*`` and ``WriteToNominal(tags=...)``).

The calendar units (M, Y), the sub-nanosecond units and the UTC offsets failed before the fix in
this commit (numpy's ``astype`` wrapped or truncated; the ISO regex took any two digits); the
others were fixed earlier and are pinned here against the issue's exact inputs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.staging import ElementError
from beam_nominal.model import SeriesKey, timestamp_ns, timestamps_ns
from beam_nominal.stream import NominalStream

NS_2024 = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z


def both(value: np.datetime64) -> list[int]:
    """The value as a scalar and in an array, read as UTC: the two paths must agree."""
    return [timestamp_ns(value, "UTC"), *timestamps_ns(np.array([value]), "UTC").tolist()]


# -- defect 4: datetime64 of every unit, exact or refused ----------------------------------------


@pytest.mark.parametrize("unit", ["Y", "M", "W", "D", "h", "m", "s", "ms", "us"])
def test_year_3000_is_refused_in_every_unit(unit: str) -> None:
    """Out of range is an error in every unit, as a scalar and in an array (D and M wrapped to 1830
    and 1830-like dates; Y and M arrays still did before this commit)."""
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


def test_multiplied_calendar_unit_array() -> None:
    values = np.array(["2024-01", "2024-04"], dtype="datetime64[3M]")
    assert timestamps_ns(values, "UTC").tolist() == [NS_2024, NS_2024 + (31 + 29 + 31) * 86_400 * 10**9]


@pytest.mark.parametrize("value", [np.datetime64(1500, "ps"), np.datetime64(1, "fs"), np.datetime64(1, "as")], ids=str)
def test_sub_nanosecond_remainder_is_refused_not_truncated(value: np.datetime64) -> None:
    with pytest.raises(ValueError, match="not a whole number of nanoseconds"):
        timestamp_ns(value)
    with pytest.raises(ValueError, match=r"timestamps\[1\]: .*not a whole number of nanoseconds"):
        timestamps_ns(np.array([np.datetime64(0, value.dtype.str[-3:-1]), value]))


# -- defect 4: ISO strings -------------------------------------------------------------------------


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


# -- defect 4: -2**63 ------------------------------------------------------------------------------


def test_int64_min_is_refused_as_scalar_and_in_arrays_alike() -> None:
    for call in (
        lambda: timestamp_ns(-(2**63)),
        lambda: timestamps_ns(np.array([0, -(2**63)])),
        lambda: timestamps_ns([0, -(2**63)]),
    ):
        with pytest.raises(ValueError, match="outside the int64 nanosecond range"):
            call()
    assert both(np.datetime64(-(2**63) + 1, "ns")) == [-(2**63) + 1] * 2


# -- defect 3: over-long tags, refused where they enter ---------------------------------------------


@pytest.mark.parametrize("tags", [{"k": "v" * 1025}, {"k" * 1025: "v"}], ids=["value", "key"])
def test_over_long_tag_is_refused_at_enqueue_and_good_data_still_goes(tags: dict[str, str]) -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    s.enqueue("good", 1, 1.0, {"k": "v" * 1024})
    for call in (
        lambda: s.enqueue("bad", 2, 2.0, tags),
        lambda: s.enqueue_batch("bad", [2], [2.0], tags),
    ):
        with pytest.raises((ElementError, ValueError), match="1024"):
            call()
    s.enqueue("good", 3, 3.0, {"k": "v" * 1024})
    report = s.close()
    assert report.failed_points == 0
    assert target.points() == {SeriesKey.of("good", {"k": "v" * 1024}): [(1, 1.0), (3, 3.0)]}


def test_over_long_transform_tag_fails_at_construction() -> None:
    from beam_nominal.beam import WriteToNominal

    for tags in ({"site": "x" * 1025}, {"s" * 1025: "x"}):
        with pytest.raises(ValueError, match="over 1024 characters"):
            WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", tags=tags)
