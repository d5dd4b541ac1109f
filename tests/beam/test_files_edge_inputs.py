"""files_to_nominal on inputs common in the wild: a CSV ending in a blank line, a header naming a
column twice, a Parquet "no end" sentinel date, JSON text with a lone surrogate escape, and Avro
stream files read back. Each lands exactly, is a bad row naming why, or fails naming the file.
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer
from pipelines import files_to_nominal

T0 = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z
S = 10**9

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("files-edge"), port=0) as srv:
        yield srv


def _run(
    server: LocalServer, tmp_path: Path, rid: str, path: Path, *extra: str, failed: bool = True
) -> tuple[int, list]:
    argv = ["--input", str(path), "--target", server.target, "--dataset-rid", rid, "--quiet", *extra]
    prefix = tmp_path / "failed" / "out"
    if failed:
        argv += ["--failed-output", str(prefix), "--max-bad-rows", "100"]
    with contextlib.redirect_stdout(io.StringIO()):
        code = files_to_nominal.main(argv)
    records = [
        json.loads(line) for f in sorted(glob.glob(f"{prefix}*.jsonl")) for line in Path(f).read_text().splitlines()
    ]
    return code, records


def _points(server: LocalServer, rid: str, channel: str) -> list[tuple[int, Any]]:
    table = server.store.read(rid, channel)
    return list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_csv_ending_in_a_blank_line_has_no_bad_row(server: LocalServer, tmp_path: Path, newline: str) -> None:
    # pyarrow's CSV reader makes a blank line a row of nulls; it is no row at all.
    path = tmp_path / "in.csv"
    lines = ["channel,timestamp,value", f"a,{T0},1", "", f"a,{T0 + S},2", "", ""]
    path.write_text(newline.join(lines), newline="")
    rid = f"ri.test.edge.blank.{len(newline)}"
    code, _ = _run(server, tmp_path, rid, path, failed=False)
    assert code == 0
    assert _points(server, rid, "a") == [(T0, 1), (T0 + S, 2)]


def test_a_blank_line_before_a_bad_row_keeps_its_row_and_line(server: LocalServer, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text(f"channel,timestamp,value\na,{T0},1\n\n,{T0 + S},2\na,{T0 + 2 * S},3\n")
    code, records = _run(server, tmp_path, "ri.test.edge.blank.row", path)
    assert code == 0
    assert [(r["row"], r["line"], r["reason"]) for r in records] == [(2, 4, "empty channel")]
    assert _points(server, "ri.test.edge.blank.row", "a") == [(T0, 1), (T0 + 2 * S, 3)]


def test_a_header_naming_a_column_twice_is_a_clear_error(server: LocalServer, tmp_path: Path) -> None:
    csv_path = tmp_path / "dup.csv"
    csv_path.write_text(f"channel,timestamp,value,value\na,{T0},1,2\n")
    pq_path = tmp_path / "dup.parquet"
    table = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array([T0]), pa.array([1.0]), pa.array([2.0])], ["channel", "timestamp", "value", "value"]
    )
    pq.write_table(table, pq_path)
    for path in (csv_path, pq_path):
        code, records = _run(server, tmp_path / path.suffix[1:], "ri.test.edge.dup", path)
        assert code == 2
        assert [(r["kind"], r["file"]) for r in records] == [("file", str(path))]
        assert "column 'value' appears more than once in the header" in records[0]["reason"]


def test_a_parquet_timestamp_beyond_the_nanosecond_range_is_a_bad_row(server: LocalServer, tmp_path: Path) -> None:
    # A 9999-12-31 "no end" sentinel in a timestamp[us] column is beyond int64 nanoseconds.
    path = tmp_path / "sentinel.parquet"
    times = [
        datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC),
        None,
    ]
    times.append(datetime.datetime(2024, 1, 1, 0, 0, 1, 5, tzinfo=datetime.UTC))
    table = pa.table(
        {
            "channel": ["a"] * 4,
            "timestamp": pa.array(times, pa.timestamp("us", tz="UTC")),
            "value": [1.0, 2.0, 3.0, 4.0],
        }
    )
    pq.write_table(table, path)
    code, records = _run(server, tmp_path, "ri.test.edge.sentinel", path)
    assert code == 0
    assert [(r["row"], r["column"]) for r in records] == [(2, "timestamp"), (3, "timestamp")]
    assert "outside the int64 nanosecond range" in records[0]["reason"] and records[1]["reason"] == "empty timestamp"
    assert _points(server, "ri.test.edge.sentinel", "a") == [(T0, 1.0), (T0 + S + 5000, 4.0)]


def test_json_text_with_a_lone_surrogate_is_a_bad_row(server: LocalServer, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"channel": "ok", "timestamp": T0, "value": 1})
        + "\n"
        # json.dumps escapes a lone surrogate as \ud800, which json.loads reads back as one.
        + json.dumps({"channel": "bad\ud800", "timestamp": T0, "value": 2})
        + "\n"
        + json.dumps({"channel": "s", "timestamp": T0, "value": "x\udfff"})
        + "\n"
        + json.dumps({"channel": "ok", "timestamp": T0 + S, "value": 3, "note": "\u00e9"})
        + "\n"
    )
    code, records = _run(server, tmp_path, "ri.test.edge.surrogate", path)
    assert code == 0
    assert [(r["row"], r["line"]) for r in records] == [(2, 2), (3, 3)]
    assert all("lone surrogate" in r["reason"] for r in records)
    assert _points(server, "ri.test.edge.surrogate", "ok") == [(T0, 1), (T0 + S, 3)]


def test_the_summary_counts_the_rows_of_avro_inputs(server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "avro"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([("a", T0 + i, float(i)) for i in range(7)]) | WriteToNominal(f"{out}/", dataset_rid="ri.x")
    argv = ["--input", f"{out}/*.avro", "--target", server.target, "--dataset-rid", "ri.test.edge.avro.rows", "--quiet"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert files_to_nominal.main(argv) == 0
    assert "rows 7\n" in text.getvalue() and "points written 7 " in text.getvalue(), text.getvalue()
