"""Telemetry files → WriteToNominal: the scheduled batch job.

Reads CSV, Parquet, JSON-lines and Avro (nominal-streaming ``AvroStream``) files matched by one
or more globs (local paths or any filesystem Beam knows, e.g. ``gs://``), in either layout:

* ``long``: one row per point, columns channel, timestamp, value (names configurable);
* ``wide``: one row per timestamp, one column per channel (empty cells are gaps).

Avro ``AvroStream`` files carry their own layout (one record per series run).

Timestamps: integers or floats in ``--timestamp-unit`` (s, ms, us, ns), ISO-8601 strings with a
timezone, or typed Arrow/Parquet timestamps. Standard Beam options pass through, so the same
command runs on the local runner in a cron job or on Dataflow::

    python -m pipelines.files_to_nominal --input 'data/*.csv' --layout wide \\
        --target grpcs://api.example:443 --dataset-rid ri.datasource... \\
        --runner DataflowRunner --project P --region R --temp_location gs://b/tmp \\
        --extra_package dist/beam_nominal-0.1.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from pipelines._read import COLUMN_TYPES, UNIT_NS, BadRow, Layout, csv_rows, elements, reader_for

FORMATS = ("csv", "parquet", "jsonl", "avro")
_EXTENSIONS = {
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".avro": "avro",
}


def format_of(path: str, given: str | None) -> str:
    """The file format: ``given`` if set, else from the extension (``.csv.gz`` counts as csv)."""
    if given:
        return given
    name = path.lower()
    for ext in (".gz", ".bz2", ".zst"):
        name = name.removesuffix(ext)
    fmt = _EXTENSIONS.get(os.path.splitext(name)[1])
    if fmt is None:
        raise ValueError(f"cannot tell the format of {path!r} from its extension: give --format")
    return fmt


def _open(readable: Any) -> Any:
    return readable.open() if hasattr(readable, "open") else open(readable, "rb")


def _avro_values(values: list[Any]) -> Any:
    if values and isinstance(values[0], dict):
        if "items" in values[0]:
            items = [v["items"] for v in values]
            if items and items[0] and isinstance(items[0][0], str):
                return items
            return [np.asarray(v, dtype=np.float64) for v in items]
        if "json" in values[0]:
            return [json.loads(v["json"]) for v in values]
    if values and isinstance(values[0], float):
        return np.asarray(values, dtype=np.float64)
    if values and isinstance(values[0], int) and not isinstance(values[0], bool):
        return np.asarray(values, dtype=np.int64)
    return values


class ReadTelemetry:
    """Turns one file into WriteToNominal elements and :class:`BadRow` s (picklable, used in a FlatMap)."""

    def __init__(
        self,
        fmt: str | None,
        layout: str,
        timestamp_column: str,
        timestamp_unit: str,
        channel_column: str,
        value_column: str,
        tags_column: str | None,
        column_types: Mapping[str, str] | None = None,
        int64_only: bool = False,
    ) -> None:
        self.fmt = fmt
        self.cfg = Layout(
            layout,
            timestamp_column,
            timestamp_unit,
            channel_column,
            value_column,
            tags_column,
            dict(column_types or {}),
            int64_only,
        )

    def __call__(self, readable: Any) -> Iterator[Any]:
        from apache_beam.metrics.metric import Metrics

        rows_counter = Metrics.counter(NAMESPACE, "rows")
        bad_counter = Metrics.counter(NAMESPACE, "bad_rows")
        path = readable.metadata.path if hasattr(readable, "metadata") else str(readable)
        fmt = format_of(path, self.fmt)
        with _open(readable) as f:
            if fmt == "avro":
                for element in self._avro(f):
                    # A record's points are its rows: the summary's "rows" counts them too.
                    rows_counter.inc(len(element[1]))
                    yield element
                PROGRESS.add(files=1)
                Metrics.counter(NAMESPACE, "files").inc()
                return
            rows = csv_rows(f, path, reopen=lambda: _open(readable)) if fmt == "csv" else reader_for(fmt)(f, path)
            for item in rows:
                if isinstance(item, BadRow):
                    rows_counter.inc()
                    bad_counter.inc()
                    PROGRESS.add(rows=1, bad=1)
                    yield item
                    continue
                rows_counter.inc(len(item))
                for out in elements(item, self.cfg):
                    if isinstance(out, BadRow):
                        bad_counter.inc()
                        PROGRESS.add(bad=1)
                    yield out
                PROGRESS.add(rows=len(item))
        PROGRESS.add(files=1)
        Metrics.counter(NAMESPACE, "files").inc()

    def _avro(self, f: Any) -> Iterator[Any]:
        import fastavro

        for rec in fastavro.reader(f):
            yield (
                rec["channel"],
                np.asarray(rec["timestamps"], dtype=np.int64),
                _avro_values(rec["values"]),
                rec.get("tags") or None,
            )
            PROGRESS.add(rows=len(rec["timestamps"]))


#: Beam metrics namespace of the reader (``rows``, ``bad_rows``, ``files``).
NAMESPACE = "files_to_nominal"


class _Progress:
    """Rows and files read by this process, for the local runner's progress line.

    Beam metrics are only readable once a local job ends; the in-process FnApiRunner runs the
    reader in this process, so a plain counter shows progress while it runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows = self.bad = self.files = 0

    def add(self, rows: int = 0, bad: int = 0, files: int = 0) -> None:
        with self._lock:
            self.rows += rows
            self.bad += bad
            self.files += files

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.rows, self.bad, self.files


PROGRESS = _Progress()


def _is_bad_row(x: Any) -> bool:
    return isinstance(x, BadRow)


def _is_element(x: Any) -> bool:
    return not isinstance(x, BadRow)


def _failed_json(f: Any) -> str:
    return json.dumps({"kind": "element", "element": repr(f.element)[:1000], "error": f.error, "reason": f.reason})


def _bad_row_json(b: BadRow) -> str:
    return b.to_json()


def _count_file(f: Any) -> Any:
    from apache_beam.metrics.metric import Metrics

    Metrics.counter(NAMESPACE, "files_written").inc()
    Metrics.counter(NAMESPACE, "bytes_written").inc(int(getattr(f, "bytes", 0)))
    return f


def _is_url(target: str) -> bool:
    return target.split("://", 1)[0].lower() in ("http", "https", "grpc", "grpcs")


def build(p: Any, args: argparse.Namespace) -> Any:
    """Add reading and writing to pipeline ``p``; returns the WriteToNominal result."""
    import apache_beam as beam
    from apache_beam.io import fileio

    from beam_nominal.beam import WriteToNominal

    reader = ReadTelemetry(
        args.format,
        args.layout,
        args.timestamp_column,
        args.timestamp_unit,
        args.channel_column,
        args.value_column,
        args.tags_column,
        dict(t.split("=", 1) for t in args.column_type),
        # Avro files hold integers as long (int64): larger ones are bad rows, not a failed job.
        int64_only=bool(args.target) and (args.target.endswith((".avro", "/")) and not _is_url(args.target)),
    )
    tags = dict(t.split("=", 1) for t in args.tag) if args.tag else None
    globs = p | "Globs" >> beam.Create(list(args.input))
    read = globs | "Match" >> fileio.MatchAll() | "Open" >> fileio.ReadMatches() | "Read" >> beam.FlatMap(reader)
    result = (
        read
        | "Elements" >> beam.Filter(_is_element)
        | "Write"
        >> WriteToNominal(
            args.target,
            dataset_rid=args.dataset_rid,
            token=os.environ.get(args.token_env) if args.token_env else None,
            timestamp_field=args.timestamp_column,
            tags=tags,
            local_data_dir=args.data_dir,
        )
    )
    files = getattr(result, "files", None)
    if files is not None:
        _ = files | "CountFiles" >> beam.Map(_count_file)
    if args.failed_output:
        bad_rows = read | "BadRows" >> beam.Filter(_is_bad_row) | "BadRowJson" >> beam.Map(_bad_row_json)
        failed = result.failed | "FailedJson" >> beam.Map(_failed_json)
        _ = (
            (bad_rows, failed)
            | "AllFailed" >> beam.Flatten()
            | "WriteFailed" >> beam.io.WriteToText(args.failed_output, file_name_suffix=".jsonl")
        )
    return result


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.files_to_nominal",
        description="Write telemetry files (CSV, Parquet, JSON-lines, nominal-streaming Avro) to Nominal "
        "with WriteToNominal. Unknown options are Beam pipeline options (--runner, --project ...).",
    )
    parser.add_argument("--input", action="append", required=True, help="file glob; repeat for more")
    parser.add_argument("--format", choices=FORMATS, default=None, help="default: from each file's extension")
    parser.add_argument(
        "--layout",
        choices=("long", "wide"),
        default="long",
        help="long: channel,timestamp,value rows; wide: one column per channel",
    )
    parser.add_argument("--timestamp-column", default="timestamp")
    parser.add_argument(
        "--timestamp-unit",
        choices=tuple(UNIT_NS),
        default="ns",
        help="unit of numeric timestamps (strings are ISO-8601 with a timezone)",
    )
    parser.add_argument("--channel-column", default="channel", help="long layout: channel name column")
    parser.add_argument("--value-column", default="value", help="long layout: value column")
    parser.add_argument("--tags-column", default=None, help="long layout: column of JSON tag objects")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="tag every series")
    parser.add_argument(
        "--column-type",
        action="append",
        default=[],
        metavar="NAME=TYPE",
        help=f"type of a channel (long layout) or column (wide): one of {', '.join(COLUMN_TYPES)}; "
        "cells that are not of that type are failed rows. Default: inferred per batch",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="https://host/api, grpc(s)://host:port, a .avro path, or a prefix ending in / (local "
        "directory, gs://bucket/dir/ ...) for ingest-ready Avro files; none = embedded local server",
    )
    parser.add_argument("--dataset-rid", default=None, help="dataset to write (required with --target)")
    parser.add_argument("--token-env", default="NOMINAL_TOKEN", help="environment variable holding the token")
    parser.add_argument("--data-dir", default="nominal-data", help="embedded server data directory")
    parser.add_argument(
        "--failed-output",
        default=None,
        help="path prefix for rows and elements not written (JSON lines: file, row, line, column, reason)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args, rest = parser.parse_known_args(argv)
    for t in args.tag:
        if "=" not in t:
            parser.error(f"--tag {t!r} is not KEY=VALUE")
    for t in args.column_type:
        name, _, typ = t.partition("=")
        if not name or typ not in COLUMN_TYPES:
            parser.error(f"--column-type {t!r} is not NAME=TYPE with TYPE one of {', '.join(COLUMN_TYPES)}")
    return args, rest


class _ProgressPrinter:
    """Prints a progress line every ``every`` seconds while the local runner works."""

    def __init__(self, every: float, out: Any) -> None:
        self._every, self._out = every, out
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="files_to_nominal-progress", daemon=True)

    def __enter__(self) -> _ProgressPrinter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            rows, bad, files = PROGRESS.snapshot()
            elapsed = time.perf_counter() - self._t0
            print(
                f"files_to_nominal: {elapsed:.0f} s, {files} files done, {rows:,} rows read, {bad:,} bad rows",
                file=self._out,
                flush=True,
            )


def main(argv: Sequence[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    runner: Any = None
    local = not any(a.startswith("--runner") for a in beam_args)
    if local:
        # FnApiRunner runs in-process with no download (DirectRunner would first fetch Prism).
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner = FnApiRunner()
    t0 = time.perf_counter()
    p = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
    build(p, args)
    PROGRESS.__init__()  # type: ignore[misc]
    with _ProgressPrinter(5.0, sys.stderr) if local and not args.quiet else contextlib.nullcontext():
        result = p.run()
        result.wait_until_finish()
    elapsed = time.perf_counter() - t0
    m = _metrics(result)
    failed = m.get("bad_rows", 0) + m.get("failed_elements", 0)
    print(summary(args, m, elapsed))
    if failed and not args.failed_output:
        return 2
    return 0


def summary(args: argparse.Namespace, m: Mapping[str, int], elapsed: float) -> str:
    """The closing report: what landed where, what did not and where it went, how fast."""
    from beam_nominal.beam.transform import DEFAULT_LOCAL_DATASET

    points = m.get("points", 0)
    bad, failed = m.get("bad_rows", 0), m.get("failed_elements", 0)
    target = args.target or f"embedded local server (data in {os.path.abspath(args.data_dir)})"
    dataset = args.dataset_rid or DEFAULT_LOCAL_DATASET
    if bad or failed:
        where = f"in {args.failed_output}*.jsonl" if args.failed_output else "not kept: use --failed-output PREFIX"
    else:
        where = "none"
    lines = [
        f"files_to_nominal: done in {elapsed:.1f} s",
        f"  files read     {m.get('files', 0):,}, rows {m.get('rows', 0):,}",
        f"  points written {points:,} in {m.get('series', 0):,} series ({points / max(elapsed, 1e-9):,.0f} points/s)",
        f"  failed         {bad:,} rows, {failed:,} elements ({where})",
        f"  dataset        {dataset}",
        f"  target         {target}",
    ]
    if m.get("files_written"):
        lines.append(f"  files written  {m['files_written']:,} ({m.get('bytes_written', 0):,} bytes)")
    return "\n".join(lines)


def _metrics(result: Any) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, int] = {}
    try:
        query = result.metrics().query(MetricsFilter())
    except Exception:  # runners without a metrics API
        return out
    for c in query["counters"]:
        if c.key.metric.namespace in ("beam_nominal", NAMESPACE):
            name = c.key.metric.name
            out[name] = out.get(name, 0) + int(c.committed or c.attempted or 0)
    return out


if __name__ == "__main__":
    sys.exit(main())
