"""Defects found by review of issues 12 and 13, each as a user hits it.

files_to_nominal on inputs that are common in the wild (a CSV ending in a blank line, a header
naming a column twice, a Parquet sentinel date, JSON text with a lone surrogate escape), the
Avro prefix target with a value Avro cannot hold or a ``file://`` prefix, and two defects that
need changes outside the files this review may edit (strict xfails naming the fix).
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
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import Lineage
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.server import LocalServer
from pipelines import files_to_nominal

T0 = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z
S = 10**9

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("review2"), port=0) as srv:
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
    # pyarrow's reader made the blank line a row of nulls: a bad row "empty timestamp", and
    # without --failed-output the job exited 2.
    path = tmp_path / "in.csv"
    lines = ["channel,timestamp,value", f"a,{T0},1", "", f"a,{T0 + S},2", "", ""]
    path.write_text(newline.join(lines), newline="")
    rid = f"ri.review2.blank.{len(newline)}"
    code, _ = _run(server, tmp_path, rid, path, failed=False)
    assert code == 0
    assert _points(server, rid, "a") == [(T0, 1), (T0 + S, 2)]


def test_a_blank_line_before_a_bad_row_keeps_its_row_and_line(server: LocalServer, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text(f"channel,timestamp,value\na,{T0},1\n\n,{T0 + S},2\na,{T0 + 2 * S},3\n")
    code, records = _run(server, tmp_path, "ri.review2.blank.row", path)
    assert code == 0
    assert [(r["row"], r["line"], r["reason"]) for r in records] == [(2, 4, "empty channel")]
    assert _points(server, "ri.review2.blank.row", "a") == [(T0, 1), (T0 + 2 * S, 3)]


def test_a_header_naming_a_column_twice_is_a_clear_error(server: LocalServer, tmp_path: Path) -> None:
    # Was KeyError: 'Field "value" exists 2 times in schema' from the reader (CSV and Parquet).
    csv_path = tmp_path / "dup.csv"
    csv_path.write_text(f"channel,timestamp,value,value\na,{T0},1,2\n")
    pq_path = tmp_path / "dup.parquet"
    table = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array([T0]), pa.array([1.0]), pa.array([2.0])], ["channel", "timestamp", "value", "value"]
    )
    pq.write_table(table, pq_path)
    for path in (csv_path, pq_path):
        code, records = _run(server, tmp_path / path.suffix[1:], "ri.review2.dup", path)
        assert code == 2
        assert [(r["kind"], r["file"]) for r in records] == [("file", str(path))]
        assert "column 'value' appears more than once in the header" in records[0]["reason"]


def test_a_parquet_timestamp_beyond_the_nanosecond_range_is_a_bad_row(server: LocalServer, tmp_path: Path) -> None:
    # A 9999-12-31 "no end" sentinel in a timestamp[us] column failed the whole job (ArrowInvalid).
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
    code, records = _run(server, tmp_path, "ri.review2.sentinel", path)
    assert code == 0
    assert [(r["row"], r["column"]) for r in records] == [(2, "timestamp"), (3, "timestamp")]
    assert "outside the int64 nanosecond range" in records[0]["reason"] and records[1]["reason"] == "empty timestamp"
    assert _points(server, "ri.review2.sentinel", "a") == [(T0, 1.0), (T0 + S + 5000, 4.0)]


def test_json_text_with_a_lone_surrogate_is_a_bad_row(server: LocalServer, tmp_path: Path) -> None:
    # Was UnicodeEncodeError from the write, failing the whole job.
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
    code, records = _run(server, tmp_path, "ri.review2.surrogate", path)
    assert code == 0
    assert [(r["row"], r["line"]) for r in records] == [(2, 2), (3, 3)]
    assert all("lone surrogate" in r["reason"] for r in records)
    assert _points(server, "ri.review2.surrogate", "ok") == [(T0, 1), (T0 + S, 3)]


def _read_avro(directory: Path) -> dict[str, list[tuple[int, Any]]]:
    out: dict[str, list[tuple[int, Any]]] = {}
    for f in sorted(directory.glob("*.avro")):
        with f.open("rb") as fh:
            for rec in fastavro.reader(fh):
                out.setdefault(rec["channel"], []).extend(zip(rec["timestamps"], rec["values"], strict=True))
    return out


def test_a_value_avro_cannot_hold_fails_its_series_not_the_job(tmp_path: Path) -> None:
    # A uint64 above 2**63 - 1 (no Avro long holds it) made every request of the bundle fail, the
    # bundle was retried and the job failed: one element cost the whole write.
    out = tmp_path / "out"
    elements = [("a", T0 + i, float(i)) for i in range(50)] + [("big", T0, 2**64 - 1), ("neg", T0, -5)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(elements) | WriteToNominal(f"{out}/", dataset_rid="ri.review2.avro")
        failed = result.failed | beam.Map(lambda f: (type(f) is FailedElement, f.element["channel"], f.error))
        assert_that(failed, equal_to([(True, "big", "RejectedSeries")]))
    assert _read_avro(out) == {"a": [(T0 + i, float(i)) for i in range(50)], "neg": [(T0, -5)]}
    assert not list((out / ".beam-nominal-tmp").glob("*"))


def test_a_file_url_prefix_writes_local_files(tmp_path: Path) -> None:
    # The docstring names file:///data/out/; Beam's FileSystems has no file:// scheme, so every
    # bundle failed ("Unable to get filesystem from specified path").
    out = tmp_path / "via-url"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([("a", T0, 1.0), ("a", T0 + S, 2.0)]) | WriteToNominal(f"file://{out}/", dataset_rid="ri.x")
    assert _read_avro(out) == {"a": [(T0, 1.0), (T0 + S, 2.0)]}


def test_a_prefix_target_reports_its_files_as_sink_lineage(tmp_path: Path) -> None:
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | beam.Create([("a", T0, 1.0)]) | WriteToNominal(f"{tmp_path}/pre/", dataset_rid="ri.x")
    result = p.run()
    result.wait_until_finish()
    sinks = Lineage.query(result.metrics(), Lineage.SINK)
    assert sinks and all(not s.startswith("nominal:`:") for s in sinks), sinks


class _Record(beam.DoFn):  # type: ignore[misc]
    """Appends each failed element to a file: ``assert_that`` groups by key, and a failure found
    after cross-bundle batching sits at the end of the global window, late for any grouping."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, f: Any) -> Iterator[Any]:
        with open(self._path, "a") as out:
            out.write(json.dumps([f.error, f.element, "text now" in f.reason]) + "\n")
        return iter(())


def test_streaming_default_fails_a_type_clash_found_after_batching_as_its_series_points(
    server: LocalServer, tmp_path: Path
) -> None:
    """With cross-bundle batching (the default for unbounded inputs) a clash between elements of
    different bundles is found once their chunks are batched, when the elements are gone: the
    failure names the series, its points and their time range (as a series the server refused),
    not an internal chunk; with batching off it would be the element in its own window."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import FixedWindows, TimestampedValue

    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(("x", T0 + S, 1.0), 1)])
        .add_elements([TimestampedValue(("x", T0 + 2 * S, "text now"), 2)])
        .advance_watermark_to_infinity()
    )
    seen = tmp_path / "failed.jsonl"
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        result = (
            p
            | stream
            | beam.WindowInto(FixedWindows(10))
            | WriteToNominal(server.target, dataset_rid="ri.review2.stream")
        )
        _ = result.failed | beam.ParDo(_Record(str(seen)))
    described = {"channel": "x", "tags": {}, "points": 1, "first_timestamp": T0 + 2 * S, "last_timestamp": T0 + 2 * S}
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [["SeriesTypeError", described, False]]
    assert [(s.channel, s.value_type.value, s.count) for s in server.store.list_series("ri.review2.stream")] == [
        ("x", "double", 1)
    ]


def test_the_summary_counts_the_rows_of_avro_inputs(server: LocalServer, tmp_path: Path) -> None:
    # Reading Avro stream files back printed "rows 0" next to the points written.
    out = tmp_path / "avro"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([("a", T0 + i, float(i)) for i in range(7)]) | WriteToNominal(f"{out}/", dataset_rid="ri.x")
    argv = ["--input", f"{out}/*.avro", "--target", server.target, "--dataset-rid", "ri.review2.avro.rows", "--quiet"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert files_to_nominal.main(argv) == 0
    assert "rows 7\n" in text.getvalue() and "points written 7 " in text.getvalue(), text.getvalue()
