"""One naive-timestamp rule for every container: a reading without a zone (an ISO string
without an offset, a naive ``datetime`` or pandas ``Timestamp``, numpy ``datetime64`` scalars and
arrays, Arrow ``timestamp`` without a tz, a naive pandas DatetimeIndex, polars' naive
``Datetime``) is refused with the fix named, unless the caller names the zone; then it is that
zone's reading, exact to the nanosecond. Int ns are UTC by definition; aware values are what they
say, whatever zone is named."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from beam_nominal import NominalStream
from beam_nominal._pipeline.staging import ElementError, PointBatch
from beam_nominal.model import check_timezone, timestamp_ns, timestamps_ns

# 2026-01-02T03:04:05.123456789 as a wall-clock reading; two instants in the batch, 1 ns apart.
WALL = dt.datetime(2026, 1, 2, 3, 4, 5, 123456)
NS_FRACTION = 789
UTC_NS = int(pd.Timestamp("2026-01-02T03:04:05.123456789", tz="UTC").value)
BERLIN_NS = UTC_NS - 3600 * 10**9  # CET is UTC+1 in January


def _times(b: PointBatch) -> list[int]:
    """Every timestamp the batch holds, in order, of its one series."""
    batches = [batch for batch, _ in b.take()]
    assert {s.key.channel for s in batches} == {"c"}
    return [int(t) for s in batches for t in s.timestamps]


def _naive_text() -> str:
    return "2026-01-02T03:04:05.123456789"


# Each container: (how the batch takes it, the exact ns its reading maps to as UTC, words of its fix).
# The datetime (µs) containers drop the 789 ns the others carry.
US = -NS_FRACTION
CONTAINERS: dict[str, tuple[Callable[[PointBatch], None], int, tuple[str, ...]]] = {
    "iso-str": (lambda b: b.add_point("c", _naive_text(), 1.0, None), 0, ("ISO-8601", "add the offset")),
    "datetime": (lambda b: b.add_point("c", WALL, 1.0, None), US, ("naive datetime", ".replace(tzinfo=")),
    "pd.Timestamp": (
        lambda b: b.add_point("c", pd.Timestamp(_naive_text()), 1.0, None),
        0,
        ("naive pandas Timestamp", "tz_localize('UTC')"),
    ),
    "np.datetime64": (
        lambda b: b.add_point("c", np.datetime64(_naive_text(), "ns"), 1.0, None),
        0,
        ("numpy", "view('int64')"),
    ),
    "np.datetime64-array": (
        lambda b: b.add_series("c", np.array([_naive_text()], dtype="datetime64[ns]"), [1.0]),
        0,
        ("datetime64[ns] array", "view('int64')"),
    ),
    "np.datetime64-us-in-record": (
        lambda b: b.add_record(np.datetime64(WALL, "us"), {"c": 1.0}),
        US,
        ("numpy", "view('int64')"),
    ),
    "arrow-table": (
        lambda b: b.add_table(
            pa.table({"timestamp": pa.array([pd.Timestamp(_naive_text())], pa.timestamp("ns")), "c": [1.0]}),
            "timestamp",
        ),
        0,
        ("Arrow type timestamp[ns]", "pa.timestamp('ns', tz='UTC')"),
    ),
    "arrow-parquet-us": (
        lambda b: b.add_table(pa.table({"timestamp": pa.array([WALL], pa.timestamp("us")), "c": [1.0]}), "timestamp"),
        US,
        ("timestamp[us]", "pa.timestamp('ns', tz='UTC')"),
    ),
    "arrow-array-in-series": (
        lambda b: b.add_series("c", pa.array([WALL], pa.timestamp("us")), [1.0]),
        US,
        ("timestamp[us]", "tz='UTC'"),
    ),
    "pandas-DatetimeIndex-series": (
        lambda b: b.add_series("c", pd.DatetimeIndex([_naive_text()]), [1.0]),
        0,
        ("pandas", "tz_localize('UTC')"),
    ),
    "pandas-DatetimeIndex-frame": (
        lambda b: b.add_table(pd.DataFrame({"c": [1.0]}, index=pd.DatetimeIndex([_naive_text()])), "timestamp"),
        0,
        ("DataFrame timestamps", "tz_localize('UTC')"),
    ),
    "pandas-column-frame": (
        lambda b: b.add_table(pd.DataFrame({"timestamp": [pd.Timestamp(_naive_text())], "c": [1.0]}), "timestamp"),
        0,
        ("DataFrame timestamps", "tz_localize('UTC')"),
    ),
    "polars-frame": (
        lambda b: b.add_table(
            pl.DataFrame({"timestamp": pl.Series([WALL], dtype=pl.Datetime("us")), "c": [1.0]}), "timestamp"
        ),
        US,
        ("timestamp[us]", "tz='UTC'"),
    ),
}


@pytest.mark.parametrize("name", list(CONTAINERS))
def test_a_naive_reading_is_refused_naming_the_fix(name: str) -> None:
    add, _, words = CONTAINERS[name]
    b = PointBatch()
    with pytest.raises(ElementError, match="no timezone") as info:
        add(b)
    for word in (*words, "timezone='UTC'"):
        assert word in str(info.value), (word, str(info.value))
    assert b.points == 0 and b.take() == []


@pytest.mark.parametrize("name", list(CONTAINERS))
@pytest.mark.parametrize(("zone", "ns"), [("UTC", UTC_NS), ("Europe/Berlin", BERLIN_NS), ("+05:30", None)])
def test_a_named_zone_reads_every_container_alike_to_the_ns(name: str, zone: str, ns: int | None) -> None:
    add, shift, _ = CONTAINERS[name]
    if ns is None:  # a fixed offset: 05:30 ahead of UTC
        ns = UTC_NS - (5 * 3600 + 1800) * 10**9
    b = PointBatch(timezone=zone)
    add(b)
    assert _times(b) == [ns + shift]


def test_int_ns_and_aware_values_are_exact_whatever_zone_is_named() -> None:
    aware = [
        UTC_NS,
        np.int64(UTC_NS),
        "2026-01-02T03:04:05.123456789Z",
        "2026-01-02T04:04:05.123456789+01:00",
        pd.Timestamp("2026-01-02T03:04:05.123456789", tz="UTC"),
        pd.Timestamp("2026-01-01T22:04:05.123456789", tz="America/New_York"),
    ]
    for zone in (None, "UTC", "Asia/Tokyo"):
        b = PointBatch(timezone=zone)
        for ts in aware:
            b.add_point("c", ts, 1.0, None)
        b.add_point("c", dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=ZoneInfo("UTC")), 1.0, None)
        idx = pd.DatetimeIndex(["2026-01-02T03:04:05.123456789"]).tz_localize("UTC").tz_convert("Asia/Kolkata")
        b.add_series("c", idx, [2.0])
        assert _times(b) == [UTC_NS] * len(aware) + [UTC_NS - NS_FRACTION, UTC_NS], zone


@pytest.mark.parametrize(
    ("wall", "why"),
    [
        ("2026-03-29T02:30:00", "doesn't exist"),  # skipped by the spring change in Berlin
        ("2026-10-25T02:30:00", "ambiguous"),  # twice in the autumn
    ],
)
def test_a_reading_a_dst_change_skips_or_repeats_is_refused_not_guessed(wall: str, why: str) -> None:
    for add in (
        lambda b: b.add_point("c", wall, 1.0, None),
        lambda b: b.add_series("c", np.array([wall], dtype="datetime64[s]"), [1.0]),
        lambda b: b.add_table(pd.DataFrame({"c": [1.0]}, index=pd.DatetimeIndex([wall])), "timestamp"),
    ):
        b = PointBatch(timezone="Europe/Berlin")
        with pytest.raises(ElementError, match=why):
            add(b)
        assert b.take() == []


def test_scalar_and_array_conversions_agree() -> None:
    values = np.array(["2026-01-02T03:04:05.123456789", "1969-12-31T23:59:59.999999999"], dtype="datetime64[ns]")
    for zone in ("UTC", "Europe/Berlin"):
        one_by_one = [timestamp_ns(v, zone) for v in values]
        assert timestamps_ns(values, zone).tolist() == one_by_one
        assert timestamps_ns(pa.array(values), zone).tolist() == one_by_one
    assert timestamps_ns(values, "UTC").tolist() == values.view("int64").tolist()


@pytest.mark.parametrize("bad", ["Mars/Olympus", "", "UTC+99", 5])
def test_an_unknown_zone_is_refused_where_it_is_given(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="timezone"):
        check_timezone(bad)
    with pytest.raises((TypeError, ValueError), match=re.escape(repr(bad))):
        PointBatch(timezone=bad)
    with pytest.raises((TypeError, ValueError), match=f"NominalStream timezone.*{re.escape(repr(bad))}"):
        NominalStream("x.avro", dataset_rid="ri.x.1", timezone=bad)


def test_nat_as_a_timestamp_is_missing_not_ambiguous() -> None:
    for nat in (pd.NaT, np.datetime64("NaT"), None):
        b = PointBatch(timezone="UTC")
        with pytest.raises(ElementError, match="timestamp is missing") as info:
            b.add_point("c", nat, 1.0, None)
        assert "ambiguous" not in str(info.value)
    with pytest.raises(ElementError, match=r"missing.*NaT.*drop the rows"):
        PointBatch().add_series("c", np.array(["NaT", "2026-01-01"], dtype="datetime64[ns]"), [1.0, 2.0])
    with pytest.raises(ElementError, match="1 null timestamps"):
        PointBatch().add_table(pd.DataFrame({"c": [1.0, 2.0]}, index=pd.DatetimeIndex([None, UTC_NS], tz="UTC")), "t")


def test_a_cleared_batch_keeps_its_zone() -> None:
    """WriteToNominal clears its batch at every bundle: the zone must survive it."""
    b = PointBatch(timezone="Europe/Berlin")
    b.clear()
    b.add_point("c", _naive_text(), 1.0, None)
    assert _times(b) == [BERLIN_NS]
