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
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

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
_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


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


def timestamps_to_ns(column: Any, unit: str, where: str) -> np.ndarray:
    """Convert an Arrow column of timestamps to int64 nanoseconds, exactly where the input is exact.

    Raises:
        ValueError: nulls, unparseable strings, or values out of range; the message names ``where``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from beam_nominal.model import timestamps_ns

    if column.null_count:
        raise ValueError(f"{where}: {column.null_count} empty timestamps")
    typ = column.type
    if pa.types.is_timestamp(typ):
        if typ.tz is None:
            logging.getLogger(__name__).debug("%s: naive timestamps taken as UTC", where)
        return np.asarray(pc.cast(column, pa.timestamp("ns")).cast(pa.int64()).to_numpy(zero_copy_only=False))
    if pa.types.is_integer(typ):
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64) * _UNIT_NS[unit]
    if pa.types.is_floating(typ):
        values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
        # Decimal seconds such as 1.000000001 are not exact in float64: round to the nearest ns.
        return np.round(values * _UNIT_NS[unit]).astype(np.int64)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        # CSV timestamps arrive as text (see _arrow_batches): numbers in the unit, or ISO-8601.
        if pc.all(pc.match_substring_regex(column, r"^\s*-?\d+\s*$")).as_py():
            return timestamps_to_ns(pc.cast(pc.utf8_trim_whitespace(column), pa.int64()), unit, where)
        if pc.all(pc.match_substring_regex(column, r"^\s*-?\d*\.\d*(e-?\d+)?\s*$")).as_py():
            return timestamps_to_ns(pc.cast(pc.utf8_trim_whitespace(column), pa.float64()), unit, where)
        try:
            return timestamps_ns(column.to_pylist())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    raise ValueError(f"{where}: timestamp column of type {typ} is not a number, string or timestamp")


def _infer_text(values: np.ndarray) -> Any:
    """One channel's CSV cells: int64 if all are integers, float64 if all are numbers, else text."""
    texts = [str(v).strip() for v in values.tolist()]
    try:
        ints = [int(t) for t in texts]
        if all(-(2**63) <= i < 2**63 for i in ints):
            return np.array(ints, dtype=np.int64)
    except ValueError:
        pass
    try:
        return np.array([float(t) for t in texts], dtype=np.float64)
    except ValueError:
        return texts


def _open(readable: Any) -> Any:
    return readable.open() if hasattr(readable, "open") else open(readable, "rb")


def _arrow_batches(
    f: Any, fmt: str, timestamp_column: str, text_columns: Sequence[str] = ()
) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    if fmt == "csv":
        # Timestamps and channel names stay strings unless they look numeric: parsing them is ours.
        # pyarrow would infer naive ISO strings as UTC timestamps; we read them as text and
        # parse them ourselves, which rejects naive ones and keeps nanoseconds.
        reader = pcsv.open_csv(
            f,
            read_options=pcsv.ReadOptions(block_size=8 << 20),
            # An empty cell is a gap (null), in text columns too.
            convert_options=pcsv.ConvertOptions(
                column_types={timestamp_column: pa.string(), **{c: pa.string() for c in text_columns}},
                strings_can_be_null=True,
            ),
        )
        yield from reader
    elif fmt == "parquet":
        yield from pq.ParquetFile(f).iter_batches(batch_size=262_144)
    elif fmt == "jsonl":
        yield from pjson.read_json(f).to_batches(max_chunksize=262_144)
    else:
        raise ValueError(f"no Arrow reader for {fmt}")


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
    """Turns one file into WriteToNominal elements (picklable configuration, used in a FlatMap)."""

    def __init__(
        self,
        fmt: str | None,
        layout: str,
        timestamp_column: str,
        timestamp_unit: str,
        channel_column: str,
        value_column: str,
        tags_column: str | None,
    ) -> None:
        self.fmt, self.layout = fmt, layout
        self.timestamp_column, self.timestamp_unit = timestamp_column, timestamp_unit
        self.channel_column, self.value_column, self.tags_column = channel_column, value_column, tags_column

    def __call__(self, readable: Any) -> Iterator[Any]:
        path = readable.metadata.path if hasattr(readable, "metadata") else str(readable)
        fmt = format_of(path, self.fmt)
        with _open(readable) as f:
            if fmt == "avro":
                yield from self._avro(f)
                return
            text = (self.value_column,) if self.layout == "long" else ()
            for i, batch in enumerate(_arrow_batches(f, fmt, self.timestamp_column, text)):
                yield from self._batch(batch, f"{path} (batch {i})")

    def _avro(self, f: Any) -> Iterator[Any]:
        import fastavro

        for rec in fastavro.reader(f):
            yield (
                rec["channel"],
                np.asarray(rec["timestamps"], dtype=np.int64),
                _avro_values(rec["values"]),
                rec.get("tags") or None,
            )

    def _batch(self, batch: Any, where: str) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        names = batch.schema.names
        if self.timestamp_column not in names:
            raise ValueError(f"{where}: no timestamp column {self.timestamp_column!r}; columns {names}")
        ts = timestamps_to_ns(batch.column(self.timestamp_column), self.timestamp_unit, where)
        if self.layout == "wide":
            columns = {n: batch.column(n) for n in names if n != self.timestamp_column}
            yield pa.RecordBatch.from_pydict({self.timestamp_column: pa.array(ts, pa.int64()), **columns})
            return
        for col in (self.channel_column, self.value_column):
            if col not in names:
                raise ValueError(f"{where}: long layout needs column {col!r}; columns {names}")
        channels = batch.column(self.channel_column)
        values = batch.column(self.value_column)
        tags_col = batch.column(self.tags_column) if self.tags_column and self.tags_column in names else None
        # Group rows per (channel, tags) into series elements: far cheaper than one element per row.
        keys = pc.binary_join_element_wise(
            pc.cast(channels, pa.string()),
            pc.cast(tags_col, pa.string()) if tags_col is not None else pa.scalar(""),
            "\x00",
        )
        keys_np = np.asarray(keys.to_numpy(zero_copy_only=False), dtype=object)
        order = np.argsort(keys_np, kind="stable")
        sorted_keys = keys_np[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        ends = np.r_[starts[1:], len(order)]
        # CSV values arrive as text so each channel gets its own type (see _arrow_batches).
        text_values = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
        if text_values:
            values = pc.if_else(pc.equal(values, ""), pa.scalar(None, values.type), values)
        value_np = values.to_numpy(zero_copy_only=False)
        valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            rows = order[s:e]
            rows = rows[valid[rows]]
            if not rows.size:
                continue
            first = int(rows[0])
            channel = channels[first].as_py()
            tags = None
            if tags_col is not None and tags_col[first].is_valid:
                raw = tags_col[first].as_py()
                tags = json.loads(raw) if isinstance(raw, str) else dict(raw)
            vals = value_np[rows]
            if text_values:
                vals = _infer_text(vals)
            elif vals.dtype == object:
                vals = vals.tolist()
            yield channel, ts[rows], vals, tags


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
    )
    tags = dict(t.split("=", 1) for t in args.tag) if args.tag else None
    globs = p | "Globs" >> beam.Create(list(args.input))
    result = (
        globs
        | "Match" >> fileio.MatchAll()
        | "Open" >> fileio.ReadMatches()
        | "Read" >> beam.FlatMap(reader)
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
    if args.failed_output:
        _ = (
            result.failed
            | "FailedJson"
            >> beam.Map(
                lambda f: json.dumps(
                    {"element": repr(f.element)[:1000], "error": f.error, "reason": f.reason}
                )
            )
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
        choices=tuple(_UNIT_NS),
        default="ns",
        help="unit of numeric timestamps (strings are ISO-8601 with a timezone)",
    )
    parser.add_argument("--channel-column", default="channel", help="long layout: channel name column")
    parser.add_argument("--value-column", default="value", help="long layout: value column")
    parser.add_argument("--tags-column", default=None, help="long layout: column of JSON tag objects")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="tag every series")
    parser.add_argument(
        "--target", default=None, help="grpc(s)://host:port or .avro path; none = embedded server"
    )
    parser.add_argument("--dataset-rid", default=None, help="dataset to write (required with --target)")
    parser.add_argument("--token-env", default="NOMINAL_TOKEN", help="environment variable holding the token")
    parser.add_argument("--data-dir", default="nominal-data", help="embedded server data directory")
    parser.add_argument("--failed-output", default=None, help="path prefix for failed elements (JSON lines)")
    args, rest = parser.parse_known_args(argv)
    for t in args.tag:
        if "=" not in t:
            parser.error(f"--tag {t!r} is not KEY=VALUE")
    return args, rest


def main(argv: Sequence[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    runner: Any = None
    if not any(a.startswith("--runner") for a in beam_args):
        # FnApiRunner runs in-process with no download (DirectRunner would first fetch Prism).
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner = FnApiRunner()
    p = beam.Pipeline(runner=runner, options=PipelineOptions(beam_args))
    build(p, args)
    result = p.run()
    result.wait_until_finish()
    failed = _failed_count(result)
    if failed:
        where = (
            f" (see {args.failed_output}*)" if args.failed_output else " (use --failed-output to keep them)"
        )
        print(f"files_to_nominal: {failed} elements were not written{where}", file=sys.stderr)
        return 2
    return 0


def _failed_count(result: Any) -> int:
    from apache_beam.metrics.metric import MetricsFilter

    try:
        query = result.metrics().query(
            MetricsFilter().with_namespace("beam_nominal").with_name("failed_elements")
        )
    except Exception:  # runners without a metrics API
        return 0
    return sum(int(c.committed or c.attempted or 0) for c in query["counters"])


if __name__ == "__main__":
    sys.exit(main())
