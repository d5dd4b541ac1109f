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
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from beam_nominal.beam._tokens import token_from_spec
from pipelines._read import (
    COLUMN_TYPES,
    FIXES,
    FORMATS,
    NAMESPACE,
    PROGRESS,
    UNIT_NS,
    BadFile,
    BadRow,
    MergeScans,
    Options,
    ReadFile,
    ScanFile,
    format_of,
    match_glob,
)

__all__ = [
    "FORMATS",
    "NAMESPACE",
    "PROGRESS",
    "build",
    "format_of",
    "launch",
    "main",
    "make_parser",
    "parse_args",
    "summary",
]


def _is_failure(x: Any) -> bool:
    return isinstance(x, (BadRow, BadFile))


def _is_element(x: Any) -> bool:
    return not isinstance(x, (BadRow, BadFile))


def _failed_json(f: Any) -> str:
    return json.dumps({"kind": "element", "element": repr(f.element)[:1000], "error": f.error, "reason": f.reason})


def _failure_json(b: BadRow | BadFile) -> str:
    return b.to_json()


def _count_file(f: Any) -> Any:
    from apache_beam.metrics.metric import Metrics

    Metrics.counter(NAMESPACE, "files_written").inc()
    Metrics.counter(NAMESPACE, "bytes_written").inc(int(getattr(f, "bytes", 0)))
    return f


def _is_url(target: str) -> bool:
    return target.split("://", 1)[0].lower() in ("http", "https", "grpc", "grpcs")


def token(args: argparse.Namespace) -> Any:
    """The token WriteToNominal gets: the workers read ``--token-secret``; ``--token-env`` is read here."""
    if args.token_secret is not None:
        return token_from_spec(args.token_secret)
    return os.environ.get(args.token_env) if args.token_env else None


def options(args: argparse.Namespace) -> Options:
    """The reader's settings from the command line."""
    return Options(
        layout=args.layout,
        timestamp_column=args.timestamp_column,
        timestamp_unit=args.timestamp_unit,
        timezone=args.timezone,
        channel_column=args.channel_column,
        value_column=args.value_column,
        tags_column=args.tags_column,
        column_types=dict(t.split("=", 1) for t in args.column_type),
        # Avro files hold integers as long (int64): larger ones are failed rows, not a failed job.
        int64_only=bool(args.target) and (args.target.endswith((".avro", "/")) and not _is_url(args.target)),
        encoding=args.encoding,
        delimiter="\t" if args.delimiter in ("\\t", "tab") else args.delimiter,
        decimal=args.decimal,
        format=args.format,
    )


def build(p: Any, args: argparse.Namespace, failed_output: str | None = None) -> Any:
    """Add reading and writing to pipeline ``p``; returns the WriteToNominal result.

    Two passes over the files: the first sums what every file holds, so types and the timestamp
    unit are decided for the whole input before the second pass writes anything.
    """
    import apache_beam as beam

    from beam_nominal.beam import WriteToNominal

    opts = options(args)
    matched = p | "Globs" >> beam.Create(list(args.input)) | "Match" >> beam.FlatMap(match_glob)
    no_match = matched | "Unmatched" >> beam.Filter(_is_failure)
    files = matched | "Files" >> beam.Filter(_is_element) | "Spread" >> beam.Reshuffle()
    scan = files | "Scan" >> beam.ParDo(ScanFile(opts)) | "MergeScans" >> beam.CombineGlobally(MergeScans())
    read = files | "Read" >> beam.ParDo(ReadFile(opts), beam.pvalue.AsSingleton(scan))
    result = (
        read
        | "Elements" >> beam.Filter(_is_element)
        | "Write"
        >> WriteToNominal(
            args.target,
            dataset_rid=args.dataset_rid,
            token=token(args),
            tags=dict(t.split("=", 1) for t in args.tag) if args.tag else None,
            local_data_dir=args.data_dir,
        )
    )
    files_written = getattr(result, "files", None)
    if files_written is not None:
        _ = files_written | "CountFiles" >> beam.Map(_count_file)
    if failed_output:
        failures = read | "Failures" >> beam.Filter(_is_failure)
        _ = (
            (no_match, failures)
            | "AllFailures" >> beam.Flatten()
            | "FailureJson" >> beam.Map(_failure_json)
            | "WriteFailures" >> beam.io.WriteToText(failed_output + "-rows", file_name_suffix=".failed.jsonl")
        )
        _ = (
            result.failed
            | "FailedJson" >> beam.Map(_failed_json)
            | "WriteFailedElements" >> beam.io.WriteToText(failed_output + "-elements", file_name_suffix=".jsonl")
        )
    return result


def _underscored(option: str) -> list[str]:
    """``--dataset-rid`` and its alias ``--dataset_rid``: the spelling of Beam's own options and of
    Dataflow Flex Template parameters (pipelines/templates/files_to_nominal/metadata.json)."""
    name = option[2:]
    return [option, "--" + name.replace("-", "_")] if "-" in name else [option]


def make_parser() -> argparse.ArgumentParser:
    """The command line's options (``parse_args`` adds the checks across them)."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.files_to_nominal",
        description="Write telemetry files (CSV, Parquet, JSON-lines, nominal-streaming Avro) to Nominal "
        "with WriteToNominal. Every row lands exactly or is a failed row saying why (docs/files.md). "
        "Unknown options are Beam pipeline options (--runner, --project ...).",
    )
    parser.add_argument("--input", action="append", required=True, help="file glob; repeat for more")
    parser.add_argument(
        "--format",
        choices=FORMATS[:4],
        default=None,
        help="default: from each file's extension (.csv, .tsv, .parquet, .jsonl, .avro; .gz/.bz2/.zst compressed; "
        "*.failed.jsonl: failed rows of an earlier run, read again)",
    )
    parser.add_argument(
        "--layout",
        choices=("long", "wide"),
        default="long",
        help="long: channel,timestamp,value rows; wide: one column per channel",
    )
    parser.add_argument(*_underscored("--timestamp-column"), default="timestamp")
    parser.add_argument(
        *_underscored("--timestamp-unit"),
        choices=tuple(UNIT_NS),
        default=None,
        help="unit of numeric timestamps. Default: inferred from their magnitude where it names one unit "
        "(10, 13, 16, 19 digits: s, ms, us, ns since the epoch, 2001..2286), else such rows fail",
    )
    parser.add_argument(
        "--timezone",
        default=None,
        help="zone of timestamps written without one (ISO text without an offset, Parquet timestamps "
        "without a tz): UTC, +02:00, Europe/Berlin. Default: such rows fail",
    )
    parser.add_argument(*_underscored("--channel-column"), default="channel", help="long layout: channel name column")
    parser.add_argument(*_underscored("--value-column"), default="value", help="long layout: value column")
    parser.add_argument(*_underscored("--tags-column"), default=None, help="long layout: column of JSON tag objects")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="tag every series")
    parser.add_argument(
        *_underscored("--column-type"),
        action="append",
        default=[],
        metavar="NAME=TYPE",
        help=f"type of a channel (long layout) or column (wide): one of {', '.join(COLUMN_TYPES)}; "
        "cells that are not of that type are failed rows. Default: decided from the whole input",
    )
    parser.add_argument("--encoding", default="utf-8", help="text encoding of CSV and JSON-lines (strict)")
    parser.add_argument("--delimiter", default=",", help="CSV field delimiter (one character; 'tab' for tabs)")
    parser.add_argument("--decimal", default=".", choices=(".", ","), help="CSV decimal separator")
    parser.add_argument(
        "--target",
        default=None,
        help="https://host/api, grpc(s)://host:port, a .avro path, or a prefix ending in / (local "
        "directory, gs://bucket/dir/ ...) for ingest-ready Avro files; none = embedded local server",
    )
    parser.add_argument(*_underscored("--dataset-rid"), default=None, help="dataset to write (required with --target)")
    parser.add_argument(
        *_underscored("--token-env"),
        default="NOMINAL_TOKEN",
        help="environment variable holding the token, read where the job is launched (the token then travels "
        "in the job's graph: on remote workers give --token-secret instead)",
    )
    parser.add_argument(
        *_underscored("--token-secret"),
        default=None,
        metavar="SPEC",
        help="where the workers read the token, instead of --token-env: a Beam secret string "
        "('type:GcpSecret;version_name:projects/P/secrets/S/versions/V') or env:NAME (an environment "
        "variable of the workers)",
    )
    parser.add_argument(*_underscored("--data-dir"), default="nominal-data", help="embedded server data directory")
    parser.add_argument(
        *_underscored("--failed-output"),
        default=None,
        help="path prefix for what was not written: PREFIX-rows-*.failed.jsonl (rows and files: file, "
        "row, line, column, raw text, reason; give the fixed file as --input to write its rows) and "
        "PREFIX-elements-*.jsonl",
    )
    parser.add_argument(
        *_underscored("--max-bad-rows"),
        type=int,
        default=0,
        metavar="N",
        help="exit 0 with up to N failed rows, files and elements (default 0: any failure exits 2)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        *_underscored("--progress-every"), type=float, default=5.0, metavar="SECONDS", help=argparse.SUPPRESS
    )
    return parser


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = make_parser()
    args, rest = parser.parse_known_args(argv)
    for t in args.tag:
        if "=" not in t:
            parser.error(f"--tag {t!r} is not KEY=VALUE")
    for t in args.column_type:
        name, _, typ = t.partition("=")
        if not name or typ not in COLUMN_TYPES:
            parser.error(f"--column-type {t!r} is not NAME=TYPE with TYPE one of {', '.join(COLUMN_TYPES)}")
    if args.target and not args.dataset_rid:
        parser.error(f"--target {args.target} needs --dataset-rid: the dataset to write into")
    if args.max_bad_rows < 0:
        parser.error(f"--max-bad-rows {args.max_bad_rows} is negative")
    if args.token_secret is not None:
        try:
            token_from_spec(args.token_secret)
        except ValueError as exc:
            parser.error(f"--token-secret: {exc}")
    try:
        options(args)
    except ValueError as exc:
        parser.error(str(exc))
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
            scanned, rows, bad, files = PROGRESS.snapshot()
            elapsed = time.perf_counter() - self._t0
            print(
                f"files_to_nominal: {elapsed:.0f} s, {scanned:,} rows scanned for types, {rows:,} rows read, "
                f"{bad:,} failed, {files} files done",
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
    failed_output = args.failed_output
    scratch = None
    if failed_output is None and local:
        # Failed rows are kept for the summary's samples even when the user keeps none.
        scratch = tempfile.mkdtemp(prefix="files_to_nominal-")
        failed_output = os.path.join(scratch, "failed")
    t0 = time.perf_counter()
    try:
        p = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
        build(p, args, failed_output)
        PROGRESS.__init__()  # type: ignore[misc]
        printer = _ProgressPrinter(args.progress_every, sys.stderr)
        with printer if local and not args.quiet else contextlib.nullcontext():
            result = p.run()
            result.wait_until_finish()
        elapsed = time.perf_counter() - t0
        m = _metrics(result)
        samples = _samples(failed_output) if failed_output else {}
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    text, code = summary(args, m, elapsed, samples)
    print(text)
    return code


def launch(argv: Sequence[str] | None = None) -> int:
    """Submit the job and return once the runner has it, without waiting for it to finish: the
    Dataflow Flex Template's entry (pipelines/templates/files_to_nominal/launch.py), whose
    launcher must exit after submitting. Its workers are remote, so ``--target`` is required.
    """
    args, beam_args = parse_args(argv)
    if not args.target:
        make_parser().error(
            "a launched job runs on remote workers, which cannot reach an embedded local server: give "
            "--target (https://<your Nominal>/api, grpcs://host:port, or gs://bucket/dir/ for Avro files) "
            "and --dataset-rid"
        )
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    p = beam.Pipeline(options=PipelineOptions(beam_args))
    build(p, args, args.failed_output)
    p.run()
    return 0


def _samples(prefix: str, per_category: int = 3) -> dict[str, list[dict[str, Any]]]:
    """A few failed records of each category, from the failed output."""
    import glob

    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(glob.glob(prefix + "-*")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                cat = rec.get("category") or ("element" if rec.get("kind") == "element" else "?")
                got = out.setdefault(cat, [])
                if len(got) < per_category:
                    got.append(rec)
    return out


def summary(
    args: argparse.Namespace,
    m: Mapping[str, int],
    elapsed: float,
    samples: Mapping[str, list[dict[str, Any]]] | None = None,
) -> tuple[str, int]:
    """The closing report and the exit status: what landed where, what did not, why, and what to do."""
    from beam_nominal.beam.transform import DEFAULT_LOCAL_DATASET

    samples = samples or {}
    points = m.get("points", 0)
    bad, failed, bad_files = m.get("bad_rows", 0), m.get("failed_elements", 0), m.get("bad_files", 0)
    empty_globs = m.get("empty_globs", 0)
    files = m.get("files", 0)
    target = args.target or f"embedded local server (data in {os.path.abspath(args.data_dir)})"
    dataset = args.dataset_rid or DEFAULT_LOCAL_DATASET
    total_failed = bad + failed + bad_files + empty_globs
    if total_failed:
        where = (
            f"in {args.failed_output}-*" if args.failed_output else "not kept: give --failed-output PREFIX to keep them"
        )
    else:
        where = "none"
    lines = [
        f"files_to_nominal: done in {elapsed:.1f} s",
        f"  files read     {files:,} of {m.get('files_matched', 0):,} matched, rows {m.get('rows', 0):,}",
    ]
    inferred = [u for u in UNIT_NS if m.get(f"unit_inferred_{u}")]
    if inferred:
        lines.append(
            f"  timestamps     numbers read as {inferred[0]} since the epoch (inferred from their magnitude; "
            "--timestamp-unit sets it)"
        )
    lines.append(
        f"  points written {points:,} in {m.get('series', 0):,} series ({points / max(elapsed, 1e-9):,.0f} points/s)"
    )
    already = m.get("already_stored_points", 0)
    if already:
        lines.append(
            f"  already stored {already:,} of them: the server had stored identical requests before "
            "(a re-run of the same input), and stored nothing again"
        )
    lines += [
        f"  failed         {bad:,} rows, {bad_files + empty_globs:,} files, {failed:,} elements ({where})",
    ]
    categories = {k.split(":", 1)[1]: v for k, v in m.items() if k.startswith("bad:") and v}
    if bad_files or empty_globs:
        categories["file"] = bad_files + empty_globs
    if failed:
        categories["element"] = failed
    for cat, count in sorted(categories.items(), key=lambda kv: -kv[1]):
        fix = FIXES.get(cat, "see the reason")
        lines.append(f"    {count:,} {cat}: {fix}")
        for rec in samples.get(cat, []):
            lines.append("      " + _sample_text(rec))
    lines += [f"  dataset        {dataset}", f"  target         {target}"]
    if m.get("files_written"):
        lines.append(f"  files written  {m['files_written']:,} ({m.get('bytes_written', 0):,} bytes)")
    code = 0
    if not files and not m.get("files_matched", 0):
        lines.append("  exit 2: no file matched --input")
        code = 2
    elif not files:
        lines.append("  exit 2: no file could be read")
        code = 2
    elif total_failed > args.max_bad_rows:
        allowed = f"--max-bad-rows {args.max_bad_rows}"
        lines.append(f"  exit 2: {total_failed:,} failed, more than {allowed} allows")
        code = 2
    return "\n".join(lines), code


def _sample_text(rec: Mapping[str, Any]) -> str:
    if rec.get("kind") == "element":
        return f"element {rec.get('element', '')[:120]}: {rec.get('reason', '')}"[:400]
    if rec.get("kind") == "file":
        return f"{rec['file']}: {rec['reason']}"[:400]
    at = f"{rec['file']} row {rec['row']}"
    if rec.get("line") is not None:
        at += f" (line {rec['line']})"
    if rec.get("column"):
        at += f" column {rec['column']!r}"
    return f"{at}: {rec['reason']}"[:400]


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
