"""DataFrames through NominalStream into a real local server, read back exactly: pandas (every
nullable and string dtype, categoricals, tz-aware index and columns), polars, any
``__arrow_c_stream__`` object, a pandas Series with its DatetimeIndex; and the one missing-value
rule (a missing value is no point) for NA and NaT, in tables, columns and records."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from beam_nominal import LocalServer, NominalStream
from beam_nominal.errors import SeriesTypeError
from tests.integration._exact import exact

RID = "ri.frames.dataset"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
TS = [T0 + 1, T0 + 10**9 + 2, T0 + 2 * 10**9 + 3]  # nanoseconds a µs type would lose
NAN = float("nan")


def _pandas3_str() -> Any:
    """pandas 3's default string dtype (``str``: Arrow-backed, NaN as its missing value), as
    pandas 2.3 spells it, or 2.1-2.2's name for the same dtype."""
    try:
        return pd.StringDtype("pyarrow", na_value=np.nan)
    except TypeError:
        return pd.StringDtype("pyarrow_numpy")


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with LocalServer(tmp_path / "data", port=0) as srv:
        yield srv


def _stream(server: Any, **kw: Any) -> NominalStream:
    return NominalStream(server.target, dataset_rid=RID, linger=None, **kw)


def _read(server: Any) -> dict[str, tuple[str, list[tuple[int, Any]]]]:
    """Every series of the dataset: channel -> (value type, [(ts, value)]), values exact."""
    out = {}
    for info in server.store.list_series(RID):
        table = server.store.read(RID, info.channel, info.tags).to_pydict()
        points = list(zip(table["timestamp"], exact(table["value"]), strict=True))
        out[info.channel] = (info.value_type.value, points)
    return out


def _pts(values: list[Any]) -> list[tuple[int, Any]]:
    """(ts, value) for the values that are not None (the missing ones), exact."""
    return [(t, exact(v)) for t, v in zip(TS, values, strict=True) if v is not None]


PANDAS_WANT = {
    "f64": ("double", _pts([1.5, None, -0.0])),
    "i64": ("int64", _pts([2**53 + 1, -(2**63), 2**63 - 1])),
    "I64": ("int64", _pts([2**63 - 1, None, -(2**63)])),
    "U64": ("uint64", _pts([2**64 - 1, None, 0])),
    "F64": ("double", _pts([0.1, None, 2.5])),
    "flag": ("int64", _pts([1, None, 0])),
    "text": ("string", _pts(["a", None, "ü✓"])),
    "text3": ("string", _pts(["x", None, "y"])),
    "phase": ("string", _pts(["taxi", None, "climb"])),
    "obj": ("string", _pts(["p", None, None])),
}


def _pandas_frame(index: pd.DatetimeIndex) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "f64": [1.5, NAN, -0.0],  # NaN in a numpy float column is pandas' missing value
            "i64": np.array([2**53 + 1, -(2**63), 2**63 - 1], dtype=np.int64),
            "I64": pd.array([2**63 - 1, None, -(2**63)], dtype="Int64"),
            "U64": pd.array([2**64 - 1, None, 0], dtype="UInt64"),
            "F64": pd.array([0.1, None, 2.5], dtype="Float64"),
            "flag": pd.array([True, None, False], dtype="boolean"),
            "text": pd.array(["a", None, "ü✓"], dtype="string"),
            "text3": pd.array(["x", None, "y"], dtype=_pandas3_str()),
            "phase": pd.Categorical(["taxi", None, "climb"]),
            "obj": ["p", pd.NA, None],
        },
        index=index,
    )


def test_a_pandas_dataframe_of_every_dtype_lands_exactly(server: Any) -> None:
    """Was ``AttributeError: column_names``. Index tz-aware in a zone other than UTC."""
    index = pd.DatetimeIndex(pd.to_datetime(TS, unit="ns", utc=True)).tz_convert("America/New_York")
    with _stream(server) as s:
        s.enqueue_table(_pandas_frame(index))
    assert _read(server) == PANDAS_WANT


def test_a_pandas_dataframe_with_a_timestamp_column_and_other_index(server: Any) -> None:
    frame = _pandas_frame(pd.DatetimeIndex(pd.to_datetime(TS, unit="ns", utc=True))).reset_index(names="time")
    frame.index = pd.Index([10, 20, 30])  # not data: left out
    with _stream(server) as s:
        s.enqueue_table(frame, timestamp_column="time")
    assert _read(server) == PANDAS_WANT


def test_a_naive_pandas_index_is_refused_with_the_fix_or_read_in_the_zone_named(server: Any) -> None:
    naive = pd.DatetimeIndex(pd.to_datetime(TS, unit="ns"))
    with _stream(server) as s, pytest.raises(ValueError, match=r"tz_localize\('UTC'\)"):
        s.enqueue_table(pd.DataFrame({"v": [1.0, 2.0, 3.0]}, index=naive))
    with _stream(server, timezone="Europe/Berlin") as s:  # CET, UTC+1 in January
        s.enqueue_table(pd.DataFrame({"v": [1.0, 2.0, 3.0]}, index=naive))
    assert _read(server) == {"v": ("double", [(t - 3600 * 10**9, exact(float(i + 1))) for i, t in enumerate(TS)])}


def test_a_polars_dataframe_lands_exactly(server: Any) -> None:
    frame = pl.DataFrame(
        {
            "timestamp": pl.Series(TS, dtype=pl.Int64).cast(pl.Datetime("ns", "UTC")),
            "I64": pl.Series([2**63 - 1, None, -5], dtype=pl.Int64),
            "U64": pl.Series([2**64 - 1, 1, None], dtype=pl.UInt64),
            "f": [NAN, None, 1.0],  # polars tells NaN (a value) from null (missing)
            "text": ["a", None, "ü✓"],
            "phase": pl.Series(["taxi", "climb", None], dtype=pl.Categorical),
            "flag": [True, None, False],
            "spectrum": [[1.0, 2.0], None, [3.0]],
        }
    )
    with _stream(server) as s:
        s.enqueue_table(frame)
    assert _read(server) == {
        "I64": ("int64", _pts([2**63 - 1, None, -5])),
        "U64": ("uint64", _pts([2**64 - 1, 1, None])),
        "f": ("double", _pts([NAN, None, 1.0])),
        "text": ("string", _pts(["a", None, "ü✓"])),
        "phase": ("string", _pts(["taxi", "climb", None])),
        "flag": ("int64", _pts([1, None, 0])),
        "spectrum": ("double_array", _pts([[1.0, 2.0], None, [3.0]])),
    }


class _ArrowStream:
    """Any library's table: only the Arrow PyCapsule stream protocol."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._table.__arrow_c_stream__(requested_schema)


def test_an_arrow_c_stream_object_lands_exactly(server: Any) -> None:
    table = pa.table(
        {
            "timestamp": pa.array(TS, pa.timestamp("ns", "Asia/Kolkata")),
            "n": pa.array([2**63 - 1, None, 7], pa.int64()),
            "s": pa.array(["a", "b", None], pa.large_string()),
        }
    )
    with _stream(server) as s:
        s.enqueue_table(_ArrowStream(table))
    assert _read(server) == {"n": ("int64", _pts([2**63 - 1, None, 7])), "s": ("string", _pts(["a", "b", None]))}


def test_a_pandas_series_with_its_datetimeindex(server: Any) -> None:
    """``enqueue_batch(ch, series.index, series.values)`` refused the DatetimeIndex; and the
    Series itself is one channel, named by its name."""
    index = pd.DatetimeIndex(pd.to_datetime(TS, unit="ns", utc=True))
    nullable = pd.Series(pd.array([2**63 - 1, None, -1], dtype="Int64"), index=index, name="counter")
    floats = pd.Series([0.5, NAN, 2.5], index=index, name="temp")
    with _stream(server) as s:
        s.enqueue_batch("batch.counter", nullable.index, nullable.values)
        s.enqueue_batch("batch.temp", floats.index, floats)
        s.enqueue_batch("batch.raw", floats.index, floats.to_numpy())  # a numpy NaN is a value
        s.enqueue_table(nullable)
        with pytest.raises(ValueError, match=r"rename\('engine.rpm'\)"):
            s.enqueue_table(floats.rename(None))
        with pytest.raises(ValueError, match=r"tz_localize\('UTC'\)"):
            s.enqueue_batch("naive", floats.index.tz_localize(None), floats.to_numpy())
    want_counter = ("int64", _pts([2**63 - 1, None, -1]))
    assert _read(server) == {
        "batch.counter": want_counter,
        "counter": want_counter,
        "batch.temp": ("double", _pts([0.5, None, 2.5])),
        "batch.raw": ("double", _pts([0.5, NAN, 2.5])),
    }


def test_pd_na_in_a_record_is_a_gap_not_a_series_type_error(server: Any) -> None:
    """Was ``SeriesTypeError … NAType``, for a first value and for a pinned series alike."""
    with _stream(server) as s:
        s.enqueue_from_dict(TS[0], {"r.a": 1.5, "r.b": pd.NA, "r.c": pd.NaT, "r.d": None})
        s.enqueue_from_dict(TS[1], {"r.a": pd.NA, "r.b": 2, "r.c": np.datetime64("NaT")})
        s.enqueue_from_dict(TS[2], {"r.a": 2.5, "r.b": pd.NA})
    assert _read(server) == {"r.a": ("double", _pts([1.5, None, 2.5])), "r.b": ("int64", _pts([None, 2, None]))}


def test_a_missing_point_value_is_refused_by_name_not_as_a_type(server: Any) -> None:
    with _stream(server) as s:
        s.enqueue("p", TS[0], 1.0)
        for missing in (pd.NA, pd.NaT, None):
            with pytest.raises(ValueError, match="missing value is no point") as info:
                s.enqueue("p", TS[1], missing)
            assert not isinstance(info.value, SeriesTypeError)
            with pytest.raises(ValueError, match="missing value is no point"):
                s.enqueue("q", TS[1], missing)  # a new series: nothing pinned
    assert _read(server) == {"p": ("double", _pts([1.0, None, None]))}


def test_nat_as_a_timestamp_names_the_fix_not_an_ambiguity(server: Any) -> None:
    """Was ``naive datetime NaT is ambiguous``."""
    with _stream(server) as s:
        with pytest.raises(ValueError, match=r"timestamp is missing \(NaT\)") as info:
            s.enqueue("p", pd.NaT, 1.0)
        assert "ambiguous" not in str(info.value)
        index = pd.DatetimeIndex([pd.NaT, pd.Timestamp(TS[1], tz="UTC")])
        with pytest.raises(ValueError, match=r"1 null timestamps.*dropna"):
            s.enqueue_table(pd.DataFrame({"v": [1.0, 2.0]}, index=index))
        s.enqueue("p", TS[2], 3.0)
    assert _read(server) == {"p": ("double", _pts([None, None, 3.0]))}


def test_a_frame_without_timestamps_or_with_bad_names_is_refused_saying_what_to_do(server: Any) -> None:
    with _stream(server) as s:
        with pytest.raises(ValueError, match=r"no 'timestamp' column.*RangeIndex.*set_index"):
            s.enqueue_table(pd.DataFrame({"v": [1.0]}))
        with pytest.raises(ValueError, match=r"column 0 is not named by a str.*astype\(str\)"):
            s.enqueue_table(pd.DataFrame({0: [1.0]}, index=pd.DatetimeIndex([TS[0]], tz="UTC")))
        with pytest.raises(ValueError, match="dict is not a table: give a pyarrow Table"):
            s.enqueue_table({"timestamp": [TS[0]], "v": [1.0]})
        s.enqueue_table(pd.DataFrame({"v": [1.0]}, index=pd.DatetimeIndex([TS[0]], tz="UTC")))
    assert _read(server) == {"v": ("double", [(TS[0], exact(1.0))])}


def test_the_readme_dataframe_example_runs_as_printed(tmp_path: Path) -> None:
    """README.md's DataFrame example, run as a user would from a fresh directory: it prints what
    its comment says."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "enqueue_table(frame)" in b]
    printed = re.search(r"# (\{'timestamp'.*\}): ", block)
    assert printed is not None, block
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed.group(1)
