"""WriteToNominal with DataFrames on FnApiRunner into a real local server, read back exactly:
pandas and polars DataFrame elements, and the Beam DataFrame API's output
(``to_pcollection``: schema'd rows, one per DataFrame row, or DataFrames with
``yield_elements="pandas"``). Elements it cannot take go to ``failed`` saying what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pandas as pd
import polars as pl
import pytest
from apache_beam.dataframe.convert import to_dataframe, to_pcollection
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.server import LocalServer

RID = "ri.frames.beam"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with LocalServer(tmp_path / "data", port=0) as srv:
        yield srv


def _read(server: Any) -> dict[str, tuple[str, list[tuple[int, Any]]]]:
    out = {}
    for info in server.store.list_series(RID):
        table = server.store.read(RID, info.channel, info.tags).to_pydict()
        out[info.channel] = (info.value_type.value, list(zip(table["timestamp"], table["value"], strict=True)))
    return out


def _pandas(start: int) -> pd.DataFrame:
    index = pd.DatetimeIndex(pd.to_datetime([T0 + start, T0 + start + 1], unit="ns", utc=True))
    return pd.DataFrame(
        {
            "pd.count": pd.array([2**63 - 1, None], dtype="Int64"),
            "pd.temp": [20.5, np.nan],
            "pd.phase": pd.Categorical(["taxi", "climb"]),
            "pd.label": pd.array([None, "ü✓"], dtype="string"),
        },
        index=index.tz_convert("Europe/Berlin"),
    )


def _polars(start: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "timestamp": pl.Series([T0 + start, T0 + start + 1], dtype=pl.Int64).cast(pl.Datetime("ns", "UTC")),
            "pl.u": pl.Series([2**64 - 1, None], dtype=pl.UInt64),
            "pl.s": ["a", "b"],
        }
    )


def _check_failed(failed: list[FailedElement]) -> None:
    """The frame without timestamps and the naive one, each saying what to do."""
    reasons = [f.reason for f in failed]
    assert len(reasons) == 2, reasons
    (no_time,) = [r for r in reasons if "no 'timestamp' column" in r]
    (naive,) = [r for r in reasons if "no timezone" in r]
    assert "df.set_index" in no_time and "tz_localize('UTC')" in naive, reasons
    assert {f.error for f in failed} == {"ElementError"}


def _check_none(failed: list[FailedElement]) -> None:
    assert failed == [], failed


@pytest.mark.parametrize("cross_bundle", [False, True])
def test_dataframe_elements_land_exactly_and_what_cannot_land_says_why(server: Any, cross_bundle: bool) -> None:
    no_time = pd.DataFrame({"v": [1.0]})
    naive = pd.DataFrame({"v": [1.0]}, index=pd.DatetimeIndex([pd.Timestamp(T0)]))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        frames = p | beam.Create([_pandas(0), _pandas(10), _polars(0), no_time, naive], reshuffle=False)
        result = frames | WriteToNominal(server.target, dataset_rid=RID, cross_bundle_batching=cross_bundle)
        assert_that(result.failed, _check_failed)
    assert _read(server) == {
        "pd.count": ("int64", [(T0, 2**63 - 1), (T0 + 10, 2**63 - 1)]),
        "pd.temp": ("double", [(T0, 20.5), (T0 + 10, 20.5)]),
        "pd.phase": ("string", [(T0, "taxi"), (T0 + 1, "climb"), (T0 + 10, "taxi"), (T0 + 11, "climb")]),
        "pd.label": ("string", [(T0 + 1, "ü✓"), (T0 + 11, "ü✓")]),
        "pl.u": ("uint64", [(T0, 2**64 - 1)]),
        "pl.s": ("string", [(T0, "a"), (T0 + 1, "b")]),
    }


def test_a_naive_dataframe_lands_in_the_zone_named(server: Any) -> None:
    naive = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.DatetimeIndex([pd.Timestamp(T0), pd.Timestamp(T0 + 1)]))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([naive], reshuffle=False) | WriteToNominal(server.target, dataset_rid=RID, timezone="UTC")
    assert _read(server) == {"v": ("double", [(T0, 1.0), (T0 + 1, 2.0)])}


def test_beam_dataframe_api_output_lands_as_rows_and_as_frames(server: Any) -> None:
    """``to_pcollection`` yields schema'd rows (one field ``timestamp``, the others channels):
    wide records. With ``yield_elements="pandas"`` it yields DataFrames: tables."""
    rows = [beam.Row(timestamp=T0 + i, speed=float(i) / 3, count=2**62 + i) for i in range(5)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        df = to_dataframe(p | beam.Create(rows))
        df["speed2"] = df["speed"] * 2
        df["big"] = df["count"] + 1
        as_rows = to_pcollection(df, label="AsRows")
        result = as_rows | "WriteRows" >> WriteToNominal(server.target, dataset_rid=RID)
        renamed = df[["timestamp", "speed"]].rename(columns={"speed": "f.speed"})
        frames = to_pcollection(renamed, yield_elements="pandas", label="AsFrames")
        result2 = frames | "WriteFrames" >> WriteToNominal(server.target, dataset_rid=RID)
        assert_that(result.failed, _check_none, label="NoFailedRows")
        assert_that(result2.failed, _check_none, label="NoFailedFrames")
    want = {
        "speed": ("double", [(T0 + i, float(i) / 3) for i in range(5)]),
        "speed2": ("double", [(T0 + i, float(i) / 3 * 2) for i in range(5)]),
        "count": ("int64", [(T0 + i, 2**62 + i) for i in range(5)]),
        "big": ("int64", [(T0 + i, 2**62 + i + 1) for i in range(5)]),
        "f.speed": ("double", [(T0 + i, float(i) / 3) for i in range(5)]),
    }
    got = _read(server)
    assert {k: (vt, sorted(pts)) for k, (vt, pts) in got.items()} == want


def test_dataframe_api_rows_take_tag_fields_and_a_prefix(server: Any) -> None:
    """``to_pcollection``'s rows are schema'd (numpy-typed): the timestamp found by name (``t``),
    int64 past 2**53 kept, a text column as a tag, channel names prefixed."""
    rows = [beam.Row(t=T0 + i, rpm=2400.0 + i, count=2**62 + i, mode="A" if i < 2 else "B") for i in range(3)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        df = to_dataframe(p | beam.Create(rows))
        df["half"] = df["rpm"] / 2
        result = to_pcollection(df) | WriteToNominal(
            server.target, dataset_rid=RID, tag_fields=["mode"], channel_prefix="df."
        )
        assert_that(result.failed, _check_none)
    got = {}
    for info in server.store.list_series(RID):
        table = server.store.read(RID, info.channel, info.tags).to_pydict()
        got[(info.channel, dict(info.tags)["mode"])] = (
            info.value_type.value,
            sorted(zip(table["timestamp"], table["value"], strict=True)),
        )
    assert got == {
        ("df.rpm", "A"): ("double", [(T0, 2400.0), (T0 + 1, 2401.0)]),
        ("df.rpm", "B"): ("double", [(T0 + 2, 2402.0)]),
        ("df.count", "A"): ("int64", [(T0, 2**62), (T0 + 1, 2**62 + 1)]),
        ("df.count", "B"): ("int64", [(T0 + 2, 2**62 + 2)]),
        ("df.half", "A"): ("double", [(T0, 1200.0), (T0 + 1, 1200.5)]),
        ("df.half", "B"): ("double", [(T0 + 2, 1201.0)]),
    }
