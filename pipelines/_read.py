"""Reading telemetry files so that every input row lands exactly or is a failed row saying why.

Used by :mod:`pipelines.files_to_nominal`; the rules are stated for users in docs/files.md.

The job reads its input twice. The first pass (:class:`ScanFile`) looks at every value and every
numeric timestamp of every file and sums what it saw into a :class:`Scan`; the scans of all files
are merged, and from the total the second pass (:class:`ReadFile`) takes each column's type and
the timestamp unit, so a type is decided once for the whole input before any point is written.
Every row then either becomes points of series elements or a :class:`BadRow` naming its file,
row, line, column, raw text, a category and the reason; a file that cannot be read at all is a
:class:`BadFile`. Nothing is skipped, replaced or rounded on the way:

* text becomes a number only when it is spelled as one (ASCII digits, an optional sign, one
  decimal separator, an exponent; ``nan``/``inf``/``infinity`` for those values); ``1_000``,
  ``0x1F`` and ``1,000`` are text. A decimal that overflows or underflows a double is a failed
  row, never ``inf`` or ``0``;
* numeric timestamps are converted from their digits (``1767225600.123457`` s is exactly
  ``1767225600123457000`` ns); a fraction finer than a nanosecond is a failed row; without
  ``--timestamp-unit`` the unit is inferred only from magnitudes whose ranges cannot overlap;
* a timestamp without a zone (naive ISO text, a naive Arrow/Parquet timestamp or date) needs
  ``--timezone``, which is applied as that zone's wall clock (a time that zone skips or repeats
  is a failed row); without it the row fails, naming the option;
* bytes are decoded strictly in ``--encoding``: a bad byte is a failed row naming its offset.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import decimal
import io
import json
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np

from beam_nominal.model import check_timezone, localize_each, timestamp_ns

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
#: What ``--column-type`` accepts.
COLUMN_TYPES = ("double", "int64", "uint64", "string")
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
#: Digits after the decimal point each unit allows before a nanosecond is split.
UNIT_FRACTION_DIGITS = {"s": 9, "ms": 6, "us": 3, "ns": 0}
#: Digits of the integer part of an epoch timestamp from 2001-09-09 to 2286-11-20 in each unit:
#: 10, 13, 16 and 19 digits, ranges 100x apart, so a magnitude names one unit and no other.
UNIT_DIGITS = {10: "s", 13: "ms", 16: "us", 19: "ns"}
#: Rows per batch of the JSON-lines and Python CSV readers, and of Parquet.
BATCH_ROWS = 262_144
#: Bytes of CSV pyarrow parses per batch.
CSV_BLOCK_BYTES = 8 << 20
#: Raw text kept per failed row.
RAW_CHARS = 2000

#: What a user can do about each category of failed row (printed by the summary).
FIXES: dict[str, str] = {
    "file": "check the path and that the file is complete and in the format its extension says",
    "encoding": "give --encoding (e.g. latin-1, cp1252, utf-16) if the file is not UTF-8",
    "field count": "fix the row, or give --delimiter if the file is not comma-separated",
    "csv syntax": "fix the quoting of the row",
    "json": "fix the line: one JSON object per line",
    "timestamp": "fix the cell: a number in --timestamp-unit or ISO-8601 such as 2026-01-01T00:00:00.5Z",
    "timestamp unit": "give --timestamp-unit s|ms|us|ns",
    "timestamp precision": "give a coarser --timestamp-unit only if the digits are wrong; else fix the cells",
    "timezone": "give --timezone (e.g. UTC, Europe/Berlin, +02:00) for timestamps without a zone",
    "channel": "fill in the channel column",
    "tags": "give the tags as a JSON object of text values",
    "empty value": "fill in the value, or drop the row",
    "number": "fix the cell, or give --column-type NAME=string to keep the text",
    "type clash": "fix the cell, or give --column-type NAME=TYPE (double, int64, uint64, string)",
    "column type": "give --column-type NAME=TYPE (string keeps every cell as written)",
    "avro long": "write to a server target, or give --column-type NAME=double if rounding is acceptable",
}


class BadRow(NamedTuple):
    """A row (or one cell of a wide row) that was not written, and why."""

    file: str
    #: 1-based data row of the file (CSV: not counting the header; JSON-lines: non-blank lines).
    row: int
    #: 1-based physical line where the row ends (CSV, JSON-lines); None for Parquet.
    line: int | None
    #: The column the reason is about, if one.
    column: str | None
    category: str
    reason: str
    #: The row as read: CSV text in the file's dialect, a JSON-lines line, Parquet as JSON.
    raw: str
    #: What replays ``raw``: ``csv`` (with ``header``) or ``jsonl``.
    format: str = "jsonl"
    header: str | None = None

    def to_json(self) -> str:
        return json.dumps({"kind": "row", **self._asdict()}, ensure_ascii=False)


class BadFile(NamedTuple):
    """A file that could not be read at all."""

    file: str
    reason: str
    category: str = "file"

    def to_json(self) -> str:
        return json.dumps({"kind": "file", **self._asdict()}, ensure_ascii=False)


class FileError(Exception):
    """The whole file cannot be read; the message says why."""


@dataclasses.dataclass(frozen=True)
class Options:
    """How files are read. Validated at construction; messages show the bad value."""

    layout: str = "long"
    timestamp_column: str = "timestamp"
    #: None: inferred from magnitudes (see :data:`UNIT_DIGITS`).
    timestamp_unit: str | None = None
    #: Zone of timestamps that carry none; None: such timestamps are failed rows.
    timezone: str | None = None
    channel_column: str = "channel"
    value_column: str = "value"
    tags_column: str | None = None
    column_types: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Writing Avro files, whose ``long`` is int64: integers above 2**63 - 1 are failed rows there.
    int64_only: bool = False
    encoding: str = "utf-8"
    delimiter: str = ","
    decimal: str = "."
    format: str | None = None

    def __post_init__(self) -> None:
        import codecs

        if self.layout not in ("long", "wide"):
            raise ValueError(f"layout {self.layout!r} is not long or wide")
        if self.timestamp_unit is not None and self.timestamp_unit not in UNIT_NS:
            raise ValueError(f"timestamp unit {self.timestamp_unit!r} is not one of {', '.join(UNIT_NS)}")
        check_timezone(self.timezone, "--timezone")
        for name, typ in self.column_types.items():
            if typ not in COLUMN_TYPES:
                raise ValueError(f"column type {name}={typ!r} is not one of {', '.join(COLUMN_TYPES)}")
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise ValueError(f"encoding {self.encoding!r} is not one Python knows") from None
        if len(self.delimiter) != 1 or self.delimiter in '\r\n"':
            raise ValueError(f"delimiter {self.delimiter!r} is not one character other than a quote or newline")
        if self.decimal not in (".", ","):
            raise ValueError(f"decimal separator {self.decimal!r} is not '.' or ','")

    @property
    def utf8(self) -> bool:
        import codecs

        return codecs.lookup(self.encoding).name in ("utf-8", "utf-8-sig")


# ---------------------------------------------------------------------------------------------
# Progress of this process (the local runner runs the readers in it)
# ---------------------------------------------------------------------------------------------


class Progress:
    """Rows and files seen by this process, for the local runner's progress line.

    Beam metrics are only readable once a local job ends. This lives in an importable module
    (never ``__main__``) so the readers the runner unpickles count into the instance the
    progress line reads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.scanned = self.rows = self.bad = self.files = 0

    def add(self, rows: int = 0, bad: int = 0, files: int = 0, scanned: int = 0) -> None:
        with self._lock:
            self.rows += rows
            self.bad += bad
            self.files += files
            self.scanned += scanned

    def snapshot(self) -> tuple[int, int, int, int]:
        with self._lock:
            return self.scanned, self.rows, self.bad, self.files


PROGRESS = Progress()


# ---------------------------------------------------------------------------------------------
# Opening files (through Beam's filesystems, compressed or not)
# ---------------------------------------------------------------------------------------------


class _Raw(io.RawIOBase):
    """A raw binary stream over anything with ``read(n)``, closing ``also`` with it."""

    def __init__(self, f: Any, also: Any = None) -> None:
        self._f, self._also = f, also

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._f.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._f.close()
            if self._also is not None:
                self._also.close()
        finally:
            super().close()


class _Zstd:
    """zstd frames decompressed from ``raw``; input that ends inside a frame is an error (the
    zstandard stream reader returns what it has and says nothing)."""

    def __init__(self, raw: Any) -> None:
        import zstandard

        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._d = self._new()
        self._pending = b""
        self._started = False

    def read(self, n: int) -> bytes:
        while len(self._pending) < n:
            chunk = self._raw.read(1 << 20)
            if not chunk:
                if self._started and not self._d.eof:
                    raise EOFError("the zstd data ends inside a frame: the file is truncated")
                break
            while chunk:
                if self._d.eof:
                    self._d = self._new()
                self._started = True
                self._pending += self._d.decompress(chunk)
                chunk = self._d.unused_data if self._d.eof else b""
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def close(self) -> None:
        self._raw.close()


def open_binary(readable: Any) -> Any:
    """A binary stream of the file's bytes, decompressed by its extension (.gz, .bz2, .zst, .xz).

    Bytes come through Beam's filesystems (local, gs://, s3:// ...); decompression is Python's
    own, whose readers raise on a truncated file where Beam's ``CompressedFile`` ends quietly.
    """
    import bz2
    import gzip
    import lzma

    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    path = path_of(readable)
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    name = path.lower()
    if name.endswith(".gz"):
        return io.BufferedReader(_Raw(gzip.GzipFile(fileobj=raw, mode="rb"), raw), buffer_size=1 << 20)
    if name.endswith(".bz2"):
        return io.BufferedReader(_Raw(bz2.BZ2File(raw), raw), buffer_size=1 << 20)
    if name.endswith(".xz"):
        return io.BufferedReader(_Raw(lzma.LZMAFile(raw), raw), buffer_size=1 << 20)
    if name.endswith((".zst", ".zstd")):
        return io.BufferedReader(_Raw(_Zstd(raw)), buffer_size=1 << 20)
    return raw


def path_of(readable: Any) -> str:
    return str(readable.metadata.path) if hasattr(readable, "metadata") else str(readable)


# ---------------------------------------------------------------------------------------------
# Files -> Rows
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Rows:
    """A batch of rows of one file, column by column.

    A column is a pyarrow Array (CSV text as strings, Parquet typed) or a list of Python values
    (JSON-lines). ``text`` says the cells are text to be typed (CSV).
    """

    path: str
    columns: dict[str, Any]
    rows: np.ndarray  # 1-based data row numbers
    lines: np.ndarray | None
    text: bool
    #: CSV: the header line as written, for replaying failed rows.
    header: str | None = None
    delimiter: str = ","
    #: JSON-lines: each row's line as written.
    lines_text: list[str] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def raw(self, i: int, only: list[str] | None = None) -> tuple[str, str, str | None]:
        """Row ``i`` (its columns ``only``, if given) as text that reads back the same, its format
        and (CSV) its header."""
        if self.lines_text is not None and only is None:
            return self.lines_text[i][:RAW_CHARS], "jsonl", None
        names = only if only is not None else list(self.columns)
        cells = [self.columns[n][i] if isinstance(self.columns[n], list) else self.columns[n][i].as_py() for n in names]
        if self.text:
            header = self.header if only is None else _csv_text(names, self.delimiter)
            return _csv_text(["" if c is None else c for c in cells], self.delimiter), "csv", header
        record = dict(zip(names, cells, strict=True))
        return json.dumps(record, default=_json_default, ensure_ascii=False)[:RAW_CHARS], "jsonl", None

    def bad(
        self, i: int, category: str, reason: str, column: str | None = None, only: list[str] | None = None
    ) -> BadRow:
        """A failed row; ``only``: the columns its raw text keeps (a wide row's timestamp and the
        failed cell, so a replay writes that cell and not again the ones that landed)."""
        line = int(self.lines[i]) if self.lines is not None else None
        raw, fmt, header = self.raw(i, only)
        return BadRow(self.path, int(self.rows[i]), line, column, category, reason, raw, fmt, header)


def _json_default(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        return v.isoformat()
    if isinstance(v, (_dt.date, decimal.Decimal)):
        return str(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return str(v)


def _check_names(path: str, names: list[str]) -> None:
    """A header naming a column twice fails the file: which of the two a value is would be a guess."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise FileError(f"column {name!r} appears more than once in the header {names}: rename one")
        seen.add(name)


def csv_rows(open_file: Callable[[], Any], path: str, opts: Options) -> Iterator[Rows | BadRow]:
    """CSV with a header line; empty cells are nulls.

    UTF-8 files go through pyarrow's reader as long as every row number and cell it gives is
    exact: up to the first batch with a row of another field count, a blank line, a newline
    inside a quoted cell, a trailing delimiter's cell, or a byte that is not UTF-8. From that
    batch on, Python's ``csv`` module reads, which knows each row's lines and bytes.
    """
    header, header_text = _csv_header(open_file, path, opts)
    if header is None:
        raise FileError("the file is empty: no header line")
    done = 0
    if opts.utf8:
        fast = _csv_arrow(open_file, path, opts, header, header_text)
        try:
            while True:
                yield next(fast)
        except StopIteration as stop:
            done = stop.value
        if done < 0:
            return
    yield from _csv_python(open_file, path, opts, header, header_text, skip=done)


def _names(path: str, header: list[str]) -> tuple[list[str], int]:
    """The header's column names without trailing empty ones (a trailing delimiter), and how many those were."""
    names = list(header)
    trailing = 0
    while names and not names[-1].strip():
        names.pop()
        trailing += 1
    if not names:
        raise FileError("the header line names no column")
    for name in names:
        if not name.strip():
            raise FileError(f"the header {header} has an empty column name: name every column")
    _check_names(path, names)
    return names, trailing


def _physical_lines(f: Any) -> Iterator[bytes]:
    yield from f


def _decode_lines(f: Any, opts: Options, errors: dict[int, str]) -> Iterator[str]:
    """The file's lines, decoded strictly; a line with bad bytes is recorded in ``errors`` (by
    1-based line) with its byte offset, and given on decoded with backslash escapes."""
    import codecs

    name = codecs.lookup(opts.encoding).name
    if name.startswith(("utf-16", "utf-32")):
        # Lines are not split on single bytes there: decode the whole file strictly.
        data = f.read()
        try:
            text = data.decode(opts.encoding)
        except UnicodeDecodeError as exc:
            raise FileError(f"byte {exc.start} is not {opts.encoding}: {exc.reason}") from None
        yield from io.StringIO(text.lstrip("\ufeff"), newline="")
        return
    offset = 0
    for n, line in enumerate(_physical_lines(f), 1):
        if n == 1 and line.startswith(codecs.BOM_UTF8) and name in ("utf-8", "utf-8-sig"):
            offset += 3
            line = line[3:]
        try:
            text = line.decode(opts.encoding)
        except UnicodeDecodeError as exc:
            bad = line[exc.start : exc.start + 1]
            errors[n] = (
                f"byte 0x{bad.hex().upper()} at byte offset {offset + exc.start} (line {n}) is not "
                f"{opts.encoding}: {exc.reason}"
            )
            text = line.decode(opts.encoding, "backslashreplace")
        offset += len(line)
        yield text


def _csv_header(open_file: Callable[[], Any], path: str, opts: Options) -> tuple[list[str] | None, str]:
    errors: dict[int, str] = {}
    with open_file() as f:
        lines = _decode_lines(f, opts, errors)
        reader = csv.reader(lines, delimiter=opts.delimiter, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            return None, ""
        except csv.Error as exc:
            raise FileError(f"the header line is not valid CSV: {exc}") from None
        if errors:
            raise FileError(f"the header line: {next(iter(errors.values()))}; {FIXES['encoding']}")
        if reader.line_num != 1:
            raise FileError("the header spans more than one line (a quoted newline in a column name)")
    out = io.StringIO()
    csv.writer(out, delimiter=opts.delimiter, lineterminator="").writerow(header)
    return header, out.getvalue()


def _csv_arrow(
    open_file: Callable[[], Any], path: str, opts: Options, header: list[str], header_text: str
) -> Iterator[Rows]:
    """Batches while rows and cells are exact; returns the rows read (-1: the whole file)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    names, trailing = _names(path, header)
    all_names = names + [f"\x00trailing{i}" for i in range(trailing)]
    trouble: list[Any] = []

    def invalid(row: Any) -> str:
        trouble.append(row)
        return "skip"

    done = 0
    with open_file() as f:
        try:
            reader = pcsv.open_csv(
                f,
                read_options=pcsv.ReadOptions(
                    block_size=CSV_BLOCK_BYTES, use_threads=False, column_names=all_names, skip_rows=1
                ),
                # A blank line must show too (as a row of too few fields): it shifts line numbers.
                parse_options=pcsv.ParseOptions(
                    delimiter=opts.delimiter, invalid_row_handler=invalid, ignore_empty_lines=False
                ),
                convert_options=pcsv.ConvertOptions(
                    column_types={name: pa.string() for name in all_names},
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=True,
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return 0
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                # Rows pyarrow skipped as invalid are read again by Python's csv, which says why.
                return done if trouble else -1
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return done
            if trouble:
                return done
            columns = {name: batch.column(name) for name in batch.schema.names}
            if any(columns[t].null_count != len(batch) for t in all_names[len(names) :]):
                return done  # a cell under a trailing delimiter: the Python reader makes it a failed row
            for t in all_names[len(names) :]:
                del columns[t]
            if any(_holds_newline(c) for c in columns.values()):
                return done
            # pyarrow reads a blank line as a row of nulls: Python's csv skips it, and line numbers shift.
            if batch.num_rows and _any_all_null(list(columns.values())):
                return done
            rows = np.arange(done + 1, done + batch.num_rows + 1, dtype=np.int64)
            done += batch.num_rows
            yield Rows(path, columns, rows, rows + 1, text=True, header=header_text, delimiter=opts.delimiter)


def _holds_newline(col: Any) -> bool:
    """Whether a cell of a string array holds a newline (one search of its data buffer, not a
    per-cell substring match)."""
    data = col.buffers()[2]
    return data is not None and data.to_pybytes().find(b"\n") >= 0


def _any_all_null(columns: list[Any]) -> bool:
    import pyarrow.compute as pc

    if min(c.null_count for c in columns) == 0:
        return False
    every = columns[0].is_null()
    for c in columns[1:]:
        every = pc.and_(every, c.is_null())
    return bool(pc.any(every).as_py())


def _csv_python(
    open_file: Callable[[], Any], path: str, opts: Options, header: list[str], header_text: str, skip: int = 0
) -> Iterator[Rows | BadRow]:
    names, trailing = _names(path, header)
    width = len(names)
    errors: dict[int, str] = {}
    batch: list[list[str]] = []
    rows: list[int] = []
    lines: list[int] = []
    n = 0
    with open_file() as f:
        reader = csv.reader(_decode_lines(f, opts, errors), delimiter=opts.delimiter, strict=True)
        next(reader)
        for _ in range(skip):
            # Rows an exact fast pass already delivered: one line each, none blank.
            next(reader)
            n += 1
        last_line = reader.line_num
        while True:
            first_line = last_line + 1
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                n += 1
                last_line = reader.line_num
                yield BadRow(path, n, last_line, None, "csv syntax", f"not valid CSV: {exc}", "", "csv", header_text)
                continue
            last_line = reader.line_num
            if not fields:
                continue  # a blank line
            n += 1
            raw = _csv_text(fields, opts.delimiter)
            bad_bytes = [errors[i] for i in range(first_line, last_line + 1) if i in errors]
            if bad_bytes:
                yield BadRow(path, n, last_line, None, "encoding", bad_bytes[0], raw, "csv", header_text)
                continue
            if (
                len(fields) > width
                and not any(x.strip() for x in fields[width:])
                and len(fields) <= width + 1 + trailing
            ):
                fields = fields[:width]  # a trailing delimiter: the cell after it holds nothing
            if len(fields) != width:
                more = " (a trailing delimiter?)" if len(fields) > width else ""
                reason = f"{len(fields)} fields, the header has {width}{more}"
                yield BadRow(path, n, last_line, None, "field count", reason, raw, "csv", header_text)
                continue
            batch.append(fields)
            rows.append(n)
            lines.append(last_line)
            if len(batch) >= BATCH_ROWS:
                yield _text_rows(path, names, batch, rows, lines, header_text, opts.delimiter)
                batch, rows, lines = [], [], []
    if batch:
        yield _text_rows(path, names, batch, rows, lines, header_text, opts.delimiter)


def _csv_text(fields: list[str], delimiter: str) -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="").writerow(fields)
    return out.getvalue()[:RAW_CHARS]


def _text_rows(
    path: str,
    header: list[str],
    batch: list[list[str]],
    rows: list[int],
    lines: list[int],
    header_text: str,
    delim: str,
) -> Rows:
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = {}
    for name, col in zip(header, zip(*batch, strict=True), strict=True):
        arr = pa.array(col, pa.string())
        # An empty cell is a null (a gap in the wide layout, a failed row where a value is needed).
        columns[name] = pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)
    return Rows(path, columns, np.asarray(rows, np.int64), np.asarray(lines, np.int64), True, header_text, delim)


class JsonNumber(str):
    """A JSON number with a fraction or exponent, kept as its text: converted exactly where used."""


def _json_constant(name: str) -> float:
    return float(name)  # NaN, Infinity, -Infinity: the spellings Python's json accepts


def jsonl_rows(open_file: Callable[[], Any], path: str, opts: Options) -> Iterator[Rows | BadRow]:
    """One JSON object per line; integers exact, decimals kept as their digits."""
    records: list[dict[str, Any]] = []
    texts: list[str] = []
    rows: list[int] = []
    lines: list[int] = []
    n = 0
    errors: dict[int, str] = {}
    with open_file() as f:
        for line_no, text in enumerate(_decode_lines(f, opts, errors), 1):
            line = text.strip()
            if not line:
                continue
            n += 1
            if line_no in errors:
                yield BadRow(path, n, line_no, None, "encoding", errors[line_no], line[:RAW_CHARS])
                continue
            try:
                rec = json.loads(line, parse_float=JsonNumber, parse_constant=_json_constant)
            except ValueError as exc:
                yield BadRow(path, n, line_no, None, "json", f"not JSON: {exc}", line[:RAW_CHARS])
                continue
            if not isinstance(rec, dict):
                reason = f"a JSON {type(rec).__name__}, not an object"
                yield BadRow(path, n, line_no, None, "json", reason, line[:RAW_CHARS])
                continue
            if "\\u" in line and _has_lone_surrogate(rec):
                # "\ud800" is valid JSON but no text Nominal (or UTF-8) can hold.
                reason = "text with a lone surrogate escape (\\ud800-\\udfff)"
                yield BadRow(path, n, line_no, None, "json", reason, line[:RAW_CHARS])
                continue
            records.append(rec)
            texts.append(line)
            rows.append(n)
            lines.append(line_no)
            if len(records) >= BATCH_ROWS:
                yield _json_rows(path, records, rows, lines, texts)
                records, rows, lines, texts = [], [], [], []
    if records:
        yield _json_rows(path, records, rows, lines, texts)


def _has_lone_surrogate(rec: Any) -> bool:
    try:
        json.dumps(rec, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _json_rows(path: str, records: list[dict[str, Any]], rows: list[int], lines: list[int], texts: list[str]) -> Rows:
    names: dict[str, None] = {}
    for rec in records:
        names.update(dict.fromkeys(rec))
    columns = {name: [rec.get(name) for rec in records] for name in names}
    return Rows(path, columns, np.asarray(rows, np.int64), np.asarray(lines, np.int64), False, lines_text=texts)


def parquet_rows(open_file: Callable[[], Any], path: str, opts: Options) -> Iterator[Rows]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_file() as f:
        data = f if f.seekable() else io.BytesIO(f.read())
        try:
            pf = pq.ParquetFile(data)
        except (pa.ArrowInvalid, OSError) as exc:
            raise FileError(f"not a Parquet file: {exc}") from None
        _check_names(path, pf.schema_arrow.names)
        start = 0
        for batch in pf.iter_batches(batch_size=BATCH_ROWS):
            columns = {name: batch.column(name) for name in batch.schema.names}
            rows = np.arange(start + 1, start + batch.num_rows + 1, dtype=np.int64)
            start += batch.num_rows
            yield Rows(path, columns, rows, None, text=False)


def rows_of(fmt: str, open_file: Callable[[], Any], path: str, opts: Options) -> Iterator[Rows | BadRow]:
    if fmt == "csv":
        return csv_rows(open_file, path, opts)
    if fmt == "jsonl":
        return jsonl_rows(open_file, path, opts)
    if fmt == "parquet":
        return parquet_rows(open_file, path, opts)
    if fmt == "failed":
        return failed_rows(open_file, path, opts)
    raise ValueError(f"no row reader for {fmt}")


def failed_rows(open_file: Callable[[], Any], path: str, opts: Options) -> Iterator[Rows | BadRow]:
    """The rows of a failed-rows file (``*.failed.jsonl``), read again as the files they came from."""
    by_source: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}
    with open_file() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                yield BadRow(
                    path, n, n, None, "json", f"not a failed-row record: {exc}", line.decode("utf-8", "replace")
                )
                continue
            if rec.get("kind") != "row" or not rec.get("raw"):
                continue  # a file record or an element: nothing to replay
            by_source.setdefault((rec["file"], rec.get("format", "jsonl"), rec.get("header")), []).append(rec)
    for (source, fmt, header), recs in by_source.items():
        if fmt == "csv":
            text = "\n".join([header or "", *(r["raw"] for r in recs)]) + "\n"
            data = text.encode("utf-8")
            replay = dataclasses.replace(opts, encoding="utf-8")
            reader = csv_rows(lambda data=data: io.BytesIO(data), f"{path} (rows of {source})", replay)  # type: ignore[misc]
        else:
            data = "\n".join(r["raw"] for r in recs).encode("utf-8") + b"\n"
            replay = dataclasses.replace(opts, encoding="utf-8")
            reader = jsonl_rows(lambda data=data: io.BytesIO(data), f"{path} (rows of {source})", replay)  # type: ignore[misc]
        yield from reader


# ---------------------------------------------------------------------------------------------
# Cells -> kinds (numbers spelled exactly)
# ---------------------------------------------------------------------------------------------

NULL, INT, DEC, NONFINITE, TEXT, BADNUM, DARR, SARR, OBJECT, OTHER = range(10)
KIND_NAMES = ("empty", "integer", "decimal", "nan/inf", "text", "number", "double array", "string array", "object", "?")
_NUMBER_KINDS = (INT, DEC, NONFINITE, BADNUM)
_GROUPS = {
    "number": _NUMBER_KINDS,
    "text": (TEXT,),
    "double array": (DARR,),
    "string array": (SARR,),
    "object": (OBJECT,),
}

_INT_RE = r"^[-+]?[0-9]+$"
_NONFINITE_RE = r"^[-+]?([nN][aA][nN]|[iI][nN][fF]([iI][nN][iI][tT][yY])?)$"
_ZERO_RE = r"^[-+]?0*[.,]?0*([eE][-+]?[0-9]+)?$"
_PY_INT = re.compile(_INT_RE)
_PY_NONFINITE = re.compile(_NONFINITE_RE)


def _dec_re(sep: str) -> str:
    s = re.escape(sep)
    return rf"^[-+]?([0-9]+{s}?[0-9]*|{s}[0-9]+)([eE][-+]?[0-9]+)?$"


_PY_DEC = {sep: re.compile(_dec_re(sep)) for sep in ".,"}
_PY_ZERO = re.compile(_ZERO_RE)


@dataclasses.dataclass
class Cells:
    """A column's cells classified: a kind per cell and the parsed value where it is a number."""

    kind: np.ndarray  # int8 kinds
    i64: np.ndarray  # INT cells that fit int64
    big: dict[int, int]  # INT cells outside int64, by position
    f64: np.ndarray  # DEC and NONFINITE cells
    reasons: dict[int, str]  # BADNUM and OTHER cells
    source: Any  # the column, for text and JSON values

    def take(self, idx: np.ndarray) -> Cells:
        pos = {int(p): j for j, p in enumerate(idx.tolist())} if (self.big or self.reasons) else {}
        big = {pos[i]: v for i, v in self.big.items() if i in pos}
        reasons = {pos[i]: r for i, r in self.reasons.items() if i in pos}
        if isinstance(self.source, list):
            source: Any = [self.source[i] for i in idx.tolist()]
        else:
            import pyarrow as pa

            source = self.source.take(pa.array(idx, pa.int64()))
        return Cells(self.kind[idx], self.i64[idx], big, self.f64[idx], reasons, source)


def _trim(col: Any) -> Any:
    import pyarrow.compute as pc

    return pc.utf8_trim(col, characters=" \t")


def classify(col: Any, text: bool, sep: str = ".") -> Cells:
    """The kind of every cell of a column (text to be typed if ``text``, else typed cells)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, list):
        return _classify_py(col, text, sep)
    n = len(col)
    kind = np.full(n, NULL, np.int8)
    i64 = np.zeros(n, np.int64)
    f64 = np.zeros(n, np.float64)
    big: dict[int, int] = {}
    reasons: dict[int, str] = {}
    typ = col.type
    valid = _valid(col)
    if text:
        fast = _classify_castable(col, valid, sep)
        if fast is not None:
            return fast
        t = _trim(col)
        is_int = _mask(pc.match_substring_regex(t, _INT_RE))
        is_dec = _mask(pc.match_substring_regex(t, _dec_re(sep))) & ~is_int
        is_nf = _mask(pc.match_substring_regex(t, _NONFINITE_RE))
        kind[valid] = TEXT
        if is_int.any():
            kind[is_int] = INT
            ints = t.filter(pa.array(is_int))
            ints = pc.replace_substring_regex(ints, r"^\+", "")
            short = _mask(pc.less_equal(pc.utf8_length(ints), 18))  # 18 digits always fit int64
            where = np.flatnonzero(is_int)
            if short.all():
                i64[where] = _np(pc.cast(ints, pa.int64()), np.int64)
            else:
                i64[where[short]] = _np(pc.cast(ints.filter(pa.array(short)), pa.int64()), np.int64)
                for j, s in zip(where[~short].tolist(), ints.filter(pa.array(~short)).to_pylist(), strict=True):
                    v = int(s)
                    if INT64_MIN <= v <= INT64_MAX:
                        i64[j] = v
                    else:
                        big[j] = v
        if is_dec.any():
            dec = t.filter(pa.array(is_dec))
            if sep == ",":
                dec = pc.replace_substring(dec, ",", ".")
            vals = _np(pc.cast(dec, pa.float64()), np.float64)
            where = np.flatnonzero(is_dec)
            f64[where] = vals
            kind[is_dec] = DEC
            inf = ~np.isfinite(vals)
            zero = vals == 0
            if inf.any() or zero.any():
                zero_text = _mask(pc.match_substring_regex(dec, _ZERO_RE))
                for j in np.flatnonzero(inf | (zero & ~zero_text)).tolist():
                    kind[where[j]] = BADNUM
                    what = "overflows" if inf[j] else "underflows"
                    reasons[int(where[j])] = f"number {dec[j].as_py()!r} {what} a double"
        if is_nf.any():
            kind[is_nf] = NONFINITE
            nf = t.filter(pa.array(is_nf)).to_pylist()
            f64[np.flatnonzero(is_nf)] = [float(s.lower().replace("infinity", "inf")) for s in nf]
        return Cells(kind, i64, big, f64, reasons, col)
    if pa.types.is_boolean(typ):
        kind[valid] = INT
        i64[:] = _np(col.fill_null(False), np.int64) if n else i64
        return Cells(kind, i64, big, f64, reasons, col)
    if pa.types.is_integer(typ):
        kind[valid] = INT
        if typ == pa.uint64():
            raw = _np(col.fill_null(0), np.uint64)
            over = raw > np.uint64(INT64_MAX)
            i64[~over] = raw[~over].astype(np.int64)
            for j in np.flatnonzero(over & valid).tolist():
                big[j] = int(raw[j])
        else:
            i64[:] = _np(col.fill_null(0), np.int64) if n else i64
        return Cells(kind, i64, big, f64, reasons, col)
    if pa.types.is_floating(typ):
        vals = _np(col.fill_null(0), np.float64) if n else f64
        f64[:] = vals
        kind[valid] = np.where(np.isfinite(vals), DEC, NONFINITE)[valid]
        return Cells(kind, i64, big, f64, reasons, col)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        kind[valid] = TEXT
        return Cells(kind, i64, big, f64, reasons, col)
    return _classify_py(col.to_pylist(), False, sep, source=col)


def _classify_castable(col: Any, valid: np.ndarray, sep: str) -> Cells | None:
    """The common case first: text every cell of which pyarrow reads as a double (then each is an
    integer, a decimal or a NaN/inf spelling); None when one is not, for the regex path.

    One cast and one substring search: far cheaper than regexes per cell.
    Hex ("0x1F"), which pyarrow's integer cast would read, never gets here: its double cast fails.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if sep != ".":
        return None
    try:
        doubles = pc.cast(col, pa.float64())
        f = np.array(_np(doubles.fill_null(0) if doubles.null_count else doubles, np.float64))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    n = len(col)
    kind = np.full(n, NULL, np.int8)
    i64 = np.zeros(n, np.int64)
    big: dict[int, int] = {}
    reasons: dict[int, str] = {}
    # A plain search for the point (cheaper than a regex for [.eE]); the few cells without a
    # point that are not integers ("1e5", "+5") fail the integer cast below.
    decimal_text = _mask(pc.greater_equal(pc.find_substring(col, "."), 0))
    odd = valid & ~np.isfinite(f)  # NaN/inf spellings, and overflow: read one by one
    ints = valid & ~decimal_text & ~odd
    kind[valid & decimal_text] = DEC
    kind[ints] = INT
    if ints.any():
        where = np.flatnonzero(ints)
        sub = col.filter(pa.array(ints)) if len(where) < n else col
        try:
            i64[where] = _np(pc.cast(sub, pa.int64()), np.int64)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # "1e5", "+5", or past int64
            for j, text in zip(where.tolist(), sub.to_pylist(), strict=True):
                k, v = _number_text(text, ".")
                kind[j] = k
                if k == INT:
                    if INT64_MIN <= v <= INT64_MAX:
                        i64[j] = v
                    else:
                        big[j] = v
                elif k == BADNUM:
                    reasons[j] = v
                else:
                    f[j] = v
    zero = valid & decimal_text & (f == 0)
    for j in np.flatnonzero(odd | zero).tolist():
        k, v = _number_text(col[j].as_py(), ".")
        kind[j] = k
        if k == BADNUM:
            reasons[j] = v
        elif k in (DEC, NONFINITE):
            f[j] = v
    return Cells(kind, i64, big, np.where(np.isin(kind, (DEC, NONFINITE)), f, 0.0), reasons, col)


def _classify_py(cells: list[Any], text: bool, sep: str, source: Any = None) -> Cells:
    n = len(cells)
    kind = np.full(n, NULL, np.int8)
    i64 = np.zeros(n, np.int64)
    f64 = np.zeros(n, np.float64)
    big: dict[int, int] = {}
    reasons: dict[int, str] = {}
    for i, v in enumerate(cells):
        if v is None:
            continue
        if isinstance(v, JsonNumber) or (text and isinstance(v, str)):
            k, parsed = _number_text(v, "." if isinstance(v, JsonNumber) else sep)
            kind[i] = k
            if k == INT:
                if INT64_MIN <= parsed <= INT64_MAX:
                    i64[i] = parsed
                else:
                    big[i] = parsed
            elif k in (DEC, NONFINITE):
                f64[i] = parsed
            elif k == BADNUM:
                reasons[i] = parsed
        elif isinstance(v, int):  # bool included
            kind[i] = INT
            if INT64_MIN <= v <= INT64_MAX:
                i64[i] = int(v)
            else:
                big[i] = int(v)
        elif isinstance(v, float):
            kind[i] = DEC if math.isfinite(v) else NONFINITE
            f64[i] = v
        elif isinstance(v, str):
            kind[i] = TEXT
        elif isinstance(v, Mapping):
            kind[i] = OBJECT
        elif isinstance(v, (list, tuple, np.ndarray)):
            items = list(v)
            if items and all(isinstance(x, str) and not isinstance(x, JsonNumber) for x in items):
                kind[i] = SARR
            elif all(isinstance(x, (int, float, JsonNumber)) and not isinstance(x, bool) for x in items):
                kind[i] = DARR
                if any(isinstance(x, JsonNumber) and _number_text(x, ".")[0] != DEC for x in items):
                    kind[i] = OTHER
                    reasons[i] = f"array {v!r:.60} holds a number a double cannot hold"
            else:
                kind[i] = OTHER
                reasons[i] = f"array {v!r:.60} mixes types or holds ones that are neither numbers nor text"
        else:
            kind[i] = OTHER
            reasons[i] = f"value {v!r:.60} is a {type(v).__name__}, which has no Nominal type"
    return Cells(kind, i64, big, f64, reasons, cells if source is None else source)


def _number_text(v: str, sep: str) -> tuple[int, Any]:
    s = v.strip(" \t")
    if _PY_INT.match(s):
        return INT, int(s)
    if _PY_DEC[sep].match(s):
        f = float(s.replace(",", ".") if sep == "," else s)
        if math.isinf(f):
            return BADNUM, f"number {s!r} overflows a double"
        if f == 0 and not _PY_ZERO.match(s):
            return BADNUM, f"number {s!r} underflows a double"
        return DEC, f
    if _PY_NONFINITE.match(s):
        return NONFINITE, float(s.lower().replace("infinity", "inf"))
    return TEXT, v


def _np(arr: Any, dtype: Any) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)


def _mask(arr: Any) -> np.ndarray:
    return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _valid(col: Any) -> np.ndarray:
    return np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


# ---------------------------------------------------------------------------------------------
# Scans: what the whole input holds, to decide types and the timestamp unit
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Profile:
    """The values one channel (long layout) or column (wide) holds across the input."""

    counts: list[int] = dataclasses.field(default_factory=lambda: [0] * 10)
    int_min: int | None = None  # over integers that some integer type holds
    int_max: int | None = None
    over_int64: int = 0  # integers in (2**63 - 1, 2**64 - 1]
    negative: int = 0
    inexact: int = 0  # integers a double cannot hold exactly
    inexact_sample: int | None = None

    def add(self, cells: Cells) -> None:
        k = np.bincount(cells.kind, minlength=10)
        for i in range(10):
            self.counts[i] += int(k[i])
        ints = cells.kind == INT
        if not ints.any():
            return
        big_keys = set(cells.big)
        small = ints.copy()
        if big_keys:
            small[list(big_keys)] = False
        vals = cells.i64[small]
        values: list[int] = []
        if vals.size:
            values += [int(vals.min()), int(vals.max())]
            self.negative += int((vals < 0).sum())
            f = vals.astype(np.float64)
            exact = _exact_doubles(vals, f)
            if not exact.all():
                self.inexact += int((~exact).sum())
                if self.inexact_sample is None:
                    self.inexact_sample = int(vals[~exact][0])
        for v in cells.big.values():
            if 0 <= v <= UINT64_MAX:
                values.append(v)
                self.over_int64 += 1
                if float(v) != v:
                    self.inexact += 1
                    self.inexact_sample = self.inexact_sample if self.inexact_sample is not None else v
        if values:
            lo, hi = min(values), max(values)
            self.int_min = lo if self.int_min is None else min(self.int_min, lo)
            self.int_max = hi if self.int_max is None else max(self.int_max, hi)

    def merge(self, other: Profile) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        for name, pick in (("int_min", min), ("int_max", max)):
            a, b = getattr(self, name), getattr(other, name)
            setattr(self, name, b if a is None else a if b is None else pick(a, b))
        self.over_int64 += other.over_int64
        self.negative += other.negative
        self.inexact += other.inexact
        if self.inexact_sample is None:
            self.inexact_sample = other.inexact_sample


@dataclasses.dataclass
class Scan:
    """What a pass over files found: a :class:`Profile` per type key and the magnitude classes
    of numeric timestamps (``s``, ``ms``, ``us``, ``ns``, or ``None`` for none of them)."""

    profiles: dict[str, Profile] = dataclasses.field(default_factory=dict)
    units: dict[str | None, int] = dataclasses.field(default_factory=dict)

    def merge(self, other: Scan) -> Scan:
        for key, p in other.profiles.items():
            self.profiles.setdefault(key, Profile()).merge(p)
        for u, c in other.units.items():
            self.units[u] = self.units.get(u, 0) + c
        return self


@dataclasses.dataclass(frozen=True)
class Decision:
    """The type a channel or column lands as: ``double``, ``int64``, ``uint64``, ``string``,
    ``double array``, ``string array``, ``object``, or ``fail`` (every cell a failed row)."""

    type: str
    group: str
    reason: str | None = None
    counts: str = ""


def decide(key: str, profile: Profile, forced: str | None) -> Decision:
    if forced is not None:
        group = "text" if forced == "string" else "number"
        return Decision(forced, group)
    totals = {g: sum(profile.counts[k] for k in kinds) for g, kinds in _GROUPS.items()}
    group = max(_GROUPS, key=lambda g: (totals[g], -list(_GROUPS).index(g)))
    counts = ", ".join(f"{c:,} {g}" for g, c in totals.items() if c)
    if totals[group] == 0:
        return Decision("string", "text", counts=counts)
    if group == "text":
        return Decision("string", group, counts=counts)
    if group != "number":
        return Decision(group, group, counts=counts)
    c = profile.counts
    if c[DEC] or c[NONFINITE]:
        if profile.inexact:
            reason = (
                f"column {key!r} holds decimals and integers, and integer {profile.inexact_sample} (one of "
                f"{profile.inexact:,}) is not exact as a double, so no one type holds every value: give "
                f"--column-type {key}=string to keep the text, or --column-type {key}=double to round"
                " those integers away as failed rows"
            )
            return Decision("fail", group, reason, counts)
        return Decision("double", group, counts=counts)
    if profile.over_int64 and profile.negative:
        reason = (
            f"column {key!r} holds negative integers and integers above 2**63 - 1, which neither int64 "
            f"nor uint64 holds: give --column-type {key}=string to keep the text"
        )
        return Decision("fail", group, reason, counts)
    return Decision("uint64" if profile.over_int64 else "int64", group, counts=counts)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the whole input's scan decided: types and the timestamp unit."""

    decisions: Mapping[str, Decision]
    unit: str | None
    #: Why numeric timestamps have no unit (several units seen), if so.
    unit_refusal: str | None = None
    inferred: bool = False


def plan(scan: Scan, opts: Options) -> Plan:
    decisions = {key: decide(key, p, opts.column_types.get(key)) for key, p in scan.profiles.items()}
    if opts.timestamp_unit is not None:
        return Plan(decisions, opts.timestamp_unit)
    seen = {u: c for u, c in scan.units.items() if u is not None and c}
    if len(seen) == 1:
        return Plan(decisions, next(iter(seen)), inferred=True)
    if len(seen) > 1:
        looks = " and ".join(f"{u} ({c:,} cells)" for u, c in sorted(seen.items(), key=lambda x: -x[1]))
        refusal = f"numeric timestamps look like {looks}: give --timestamp-unit s|ms|us|ns"
        return Plan(decisions, None, refusal)
    return Plan(decisions, None)


def scan_rows(rows: Rows, opts: Options, scan: Scan) -> None:
    """Add a batch's values and numeric timestamps to ``scan``."""
    if opts.timestamp_unit is None and opts.timestamp_column in rows.columns:
        for u, c in timestamp_units(rows.columns[opts.timestamp_column], rows.text, opts.decimal).items():
            scan.units[u] = scan.units.get(u, 0) + c
    if opts.layout == "wide":
        for name, col in rows.columns.items():
            if name != opts.timestamp_column:
                scan.profiles.setdefault(name, Profile()).add(classify(col, rows.text, opts.decimal))
        return
    if opts.channel_column not in rows.columns or opts.value_column not in rows.columns:
        return
    codes, values = _codes(rows.columns[opts.channel_column])
    cells = classify(rows.columns[opts.value_column], rows.text, opts.decimal)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    for start, idx in zip(np.r_[0, bounds].tolist(), np.split(order, bounds), strict=True):
        c = int(sorted_codes[start]) if len(sorted_codes) else -1
        if c < 0:
            continue
        scan.profiles.setdefault(str(values[c]), Profile()).add(cells.take(idx))


# ---------------------------------------------------------------------------------------------
# Timestamps
# ---------------------------------------------------------------------------------------------

_ISO_RE = (
    r"^[ \t]*(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[T ](?P<h>[0-9]{2}):(?P<mi>[0-9]{2})"
    r"(?::(?P<s>[0-9]{2})(?:[.,](?P<f>[0-9]{1,9}))?)?(?P<tz>Z|z|[+-][0-9]{2}:?[0-9]{2})?[ \t]*$"
)
_PY_ISO = re.compile(_ISO_RE.replace("?P<", "?P<"))
_NUM_TS_RE = r"^[ \t]*[-+]?[0-9]+([.,][0-9]*)?[ \t]*$"


def _unit_of_digits(int_part: str) -> str | None:
    digits = int_part.lstrip("+")
    if digits.startswith("-"):
        return None
    digits = digits.lstrip("0") or "0"
    unit = UNIT_DIGITS.get(len(digits))
    if unit == "ns" and int(digits) > INT64_MAX:
        return None
    return unit


def timestamp_units(col: Any, text: bool, sep: str) -> dict[str | None, int]:
    """How many numeric timestamp cells look like each unit (None: like none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str | None, int] = {}
    if isinstance(col, list):
        for v in col:
            if isinstance(v, bool) or v is None:
                continue
            if isinstance(v, (int, float, JsonNumber)) or (isinstance(v, str) and re.match(_NUM_TS_RE, v)):
                s = str(int(v)) if isinstance(v, int) else repr(v) if isinstance(v, float) else str(v).strip()
                u = _unit_of_digits(re.split(r"[.,eE]", s)[0])
                out[u] = out.get(u, 0) + 1
        return out
    typ = col.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        if _aware_iso(col) is not None:
            return out
        num = pc.filter(col, pc.match_substring_regex(col, _NUM_TS_RE))
        if not len(num):
            return out
        ints = pc.extract_regex(num, r"^[ \t]*(?P<i>[-+]?[0-9]+)").field("i")
        lengths = _np(pc.utf8_length(pc.utf8_ltrim(ints, characters="+0")), np.int64)
        neg = _mask(pc.starts_with(ints, "-"))
        for length, unit in UNIT_DIGITS.items():
            hit = (lengths == length) & ~neg
            if unit == "ns" and hit.any():
                # 19 digits: ns only up to 2**63 - 1.
                vals = [int(s) for s in ints.filter(pa.array(hit)).to_pylist()]
                good = sum(1 for v in vals if v <= INT64_MAX)
                if good:
                    out[unit] = good
                if len(vals) - good:
                    out[None] = out.get(None, 0) + len(vals) - good
                continue
            if hit.any():
                out[unit] = int(hit.sum())
        rest = len(num) - sum(out.values())
        if rest:
            out[None] = out.get(None, 0) + rest
        return out
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        vals = col.drop_null()
        if pa.types.is_floating(typ):
            return timestamp_units(vals.to_pylist(), False, sep)
        arr = _np(vals, np.uint64 if typ == pa.uint64() else np.int64)
        for length, unit in UNIT_DIGITS.items():
            lo, hi = 10 ** (length - 1), (10**length if length < 19 else INT64_MAX + 1)
            hit = int(((arr >= lo) & (arr < hi)).sum())
            if hit:
                out[unit] = hit
        rest = len(arr) - sum(out.values())
        if rest:
            out[None] = rest
    return out


class _TsBad(NamedTuple):
    category: str
    reason: str


def timestamps(col: Any, text: bool, opts: Options, pl: Plan) -> tuple[np.ndarray, dict[int, _TsBad]]:
    """A column of timestamps as int64 ns, and why each row that has none has none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(col)
    out = np.zeros(n, np.int64)
    bad: dict[int, _TsBad] = {}
    if isinstance(col, list):
        for i, v in enumerate(col):
            try:
                out[i] = timestamp_cell(v, opts, pl)
            except _CellError as exc:
                bad[i] = _TsBad(exc.category, str(exc))
        return out, bad
    typ = col.type
    valid = _valid(col)
    for i in np.flatnonzero(~valid).tolist():
        bad[i] = _TsBad("timestamp", "empty timestamp")
    if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
        return _arrow_times(col, opts, out, bad, valid)
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        if pa.types.is_integer(typ) and typ != pa.uint64():
            return _int_times(_np(col.fill_null(0), np.int64), valid, opts, pl, out, bad)
        rest = np.flatnonzero(valid)
        cells = col.to_pylist()
        for i in rest.tolist():
            try:
                out[i] = timestamp_cell(cells[i], opts, pl)
            except _CellError as exc:
                bad[i] = _TsBad(exc.category, str(exc))
        return out, bad
    aware = _aware_iso(col)
    if aware is not None:
        out[:] = aware
        return out, bad
    # Text: ISO-8601 vectorised, whole numbers vectorised, the rest cell by cell.
    parts = pc.extract_regex(col, _ISO_RE)
    iso = _mask(parts.is_valid())
    pending = valid & ~iso
    if iso.any():
        sub = parts.filter(pa.array(iso))
        ns, ok, naive = _iso_ns(sub)
        where = np.flatnonzero(iso)
        out[where] = ns
        if naive.any():
            if opts.timezone is None:
                for j in where[naive & ok].tolist():
                    bad[j] = _TsBad("timezone", _naive_reason(col[j].as_py()))
            else:
                wall = ns[naive & ok]
                utc, good = localize_each(wall, opts.timezone)
                w = where[naive & ok]
                out[w] = utc
                for j in w[~good].tolist():
                    bad[j] = _TsBad("timezone", _zone_gap_reason(col[j].as_py(), opts.timezone))
        pending[where[~ok]] = True  # not a calendar time: the cell path says why
    if pending.any():
        sub = col.filter(pa.array(pending))
        t = _trim(sub)
        ints = _mask(pc.match_substring_regex(t, r"^[-+]?[0-9]{1,18}$"))
        where = np.flatnonzero(pending)
        if ints.any():
            vals = _np(pc.cast(t.filter(pa.array(ints)), pa.int64()), np.int64)
            sub_out = np.zeros(len(vals), np.int64)
            sub_bad: dict[int, _TsBad] = {}
            _int_times(vals, np.ones(len(vals), bool), opts, pl, sub_out, sub_bad)
            w = where[ints]
            out[w] = sub_out
            for j, b in sub_bad.items():
                bad[int(w[j])] = b
        for j, v in zip(where[~ints].tolist(), sub.filter(pa.array(~ints)).to_pylist(), strict=True):
            try:
                out[j] = timestamp_cell(v, opts, pl, text=True)
            except _CellError as exc:
                bad[j] = _TsBad(exc.category, str(exc))
    return out, bad


def _aware_iso(col: Any) -> np.ndarray | None:
    """Text every cell of which is ISO-8601 with a zone, as ns (nulls 0); else None.

    pyarrow's parser checks the calendar, the range and the offset, refuses text without a zone
    and fractions finer than a nanosecond, far faster than the fields regex below.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        ts = pc.cast(col, pa.timestamp("ns", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return _np(ts.cast(pa.int64()).fill_null(0), np.int64)


def _iso_ns(parts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ISO fields (from :data:`_ISO_RE`) as ns (the wall clock if naive), valid, naive."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def num(name: str, pad: int = 0) -> np.ndarray:
        f = parts.field(name)
        if pad:
            f = pc.utf8_rpad(f, width=pad, padding="0")
        f = pc.if_else(pc.equal(f, ""), "0", f)
        return _np(pc.cast(f, pa.int64()), np.int64)

    y, mo, d, h, mi, s = (num(x) for x in ("y", "mo", "d", "h", "mi", "s"))
    frac = num("f", 9)
    tz = parts.field("tz")
    naive = _mask(pc.equal(tz, ""))
    zulu = _mask(pc.is_in(tz, pa.array(["Z", "z"])))
    offset = ~naive & ~zulu
    off_s = np.zeros(len(y), np.int64)
    ok = (mo >= 1) & (mo <= 12) & (d >= 1) & (h <= 23) & (mi <= 59) & (s <= 59)
    if offset.any():
        sign = np.where(_mask(pc.starts_with(tz, "-")), -1, 1)
        oh = _np(pc.cast(pc.if_else(offset, pc.utf8_slice_codeunits(tz, 1, 3), "0"), pa.int64()), np.int64)
        om = _np(pc.cast(pc.if_else(offset, pc.utf8_slice_codeunits(tz, -2), "0"), pa.int64()), np.int64)
        ok &= (oh <= 23) & (om <= 59)
        off_s = np.where(offset, sign * (oh * 3600 + om * 60), 0)
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    mdays = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)[np.clip(mo, 0, 12)]
    mdays = mdays + ((mo == 2) & leap)
    ok &= d <= mdays
    # Days from civil (H. Hinnant), vectorised.
    yy = y - (mo <= 2)
    era = np.floor_divide(yy, 400)
    yoe = yy - era * 400
    mp = (mo + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    secs = days * 86400 + h * 3600 + mi * 60 + s - off_s
    # int64 ns spans 1677-09-21..2262-04-11: outside it the cell path names the range.
    ok &= (secs > -9_223_372_036) & (secs < 9_223_372_036)
    ns = np.where(ok, secs, 0) * 10**9 + np.where(ok, frac, 0)
    return ns, ok, naive


def _naive_reason(v: Any) -> str:
    return f"timestamp {v!r:.60} has no timezone: give --timezone (e.g. UTC) to say which zone's clock it is"


def _zone_gap_reason(v: Any, zone: str) -> str:
    return f"timestamp {v!r:.60} does not exist or exists twice in {zone} (a daylight-saving change): give it an offset"


def _arrow_times(
    col: Any, opts: Options, out: np.ndarray, bad: dict[int, _TsBad], valid: np.ndarray
) -> tuple[np.ndarray, dict[int, _TsBad]]:
    import pyarrow as pa

    typ = col.type
    if pa.types.is_date32(typ):
        unit_ns, storage, tz = 86_400 * 10**9, pa.int32(), None
    elif pa.types.is_date64(typ):
        unit_ns, storage, tz = 10**6, pa.int64(), None
    else:
        unit_ns, storage, tz = UNIT_NS[typ.unit], pa.int64(), typ.tz
    raw = _np(col.view(storage).fill_null(0), np.int64)
    limit = INT64_MAX // unit_ns
    inside = (raw <= limit) & (raw >= -limit) & valid
    for i in np.flatnonzero(valid & ~inside).tolist():
        bad[i] = _TsBad("timestamp", _range_reason(int(raw[i]) * unit_ns))
    ns = np.where(inside, raw, 0) * unit_ns
    if tz is not None:
        out[:] = ns
        return out, bad
    # A timestamp column without a zone (pandas' default) holds wall-clock readings, as naive
    # text does: the same rule.
    if opts.timezone is None:
        for i in np.flatnonzero(inside).tolist():
            bad[i] = _TsBad(
                "timezone",
                f"{typ} column without a timezone: give --timezone (e.g. UTC) to say which zone's clock it is",
            )
        return out, bad
    utc, good = localize_each(ns, opts.timezone)
    out[:] = np.where(inside & good, utc, 0)
    for i in np.flatnonzero(inside & ~good).tolist():
        bad[i] = _TsBad("timezone", _zone_gap_reason(col[i].as_py(), opts.timezone))
    return out, bad


def _range_reason(ns: int) -> str:
    return f"timestamp {ns} ns is outside the int64 nanosecond range (1677..2262)"


def _int_times(
    raw: np.ndarray, valid: np.ndarray, opts: Options, pl: Plan, out: np.ndarray, bad: dict[int, _TsBad]
) -> tuple[np.ndarray, dict[int, _TsBad]]:
    unit = pl.unit
    if unit is not None and pl.inferred:
        # Only the inferred unit's magnitudes are read in it; the others say why they fail.
        length = next(k for k, u in UNIT_DIGITS.items() if u == unit)
        inside = valid & (raw >= 10 ** (length - 1)) & (raw < (10**length if length < 19 else INT64_MAX))
        out[:] = np.where(inside, raw, 0) * UNIT_NS[unit]
        valid = valid & ~inside
    if unit is None or pl.inferred:
        for i in np.flatnonzero(valid).tolist():
            try:
                out[i] = timestamp_cell(int(raw[i]), opts, pl)
            except _CellError as exc:
                bad[i] = _TsBad(exc.category, str(exc))
        return out, bad
    mult = UNIT_NS[unit]
    limit = INT64_MAX // mult
    inside = (raw <= limit) & (raw >= -limit) & valid
    out[:] = np.where(inside, raw, 0) * mult
    for i in np.flatnonzero(valid & ~inside).tolist():
        bad[i] = _TsBad("timestamp", _range_reason(int(raw[i]) * mult))
    return out, bad


class _CellError(ValueError):
    def __init__(self, category: str, reason: str) -> None:
        super().__init__(reason)
        self.category = category


def timestamp_cell(v: Any, opts: Options, pl: Plan, text: bool = False) -> int:
    """One timestamp cell in nanoseconds, exactly; raises :class:`_CellError` saying why not."""
    if v is None:
        raise _CellError("timestamp", "empty timestamp")
    if isinstance(v, bool):
        raise _CellError("timestamp", f"timestamp {v!r} is a boolean")
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _CellError("timestamp", f"timestamp {v!r} is not a finite number")
        # The shortest decimal that reads back as this double: the digits its writer meant.
        return _numeric_ts(repr(v), opts, pl)
    if isinstance(v, (int, JsonNumber)):
        return _numeric_ts(str(v), opts, pl)
    if isinstance(v, str):
        s = v.strip(" \t")
        if not s:
            raise _CellError("timestamp", "empty timestamp")
        if re.fullmatch(r"[-+]?([0-9]+([.,][0-9]*)?|[.,][0-9]+)([eE][-+]?[0-9]+)?", s):
            if "," in s and (opts.decimal != "," or not text):
                raise _CellError("timestamp", f"timestamp {v!r:.60} has a ',' but --decimal is '.'")
            return _numeric_ts(s.replace(",", "."), opts, pl)
        m = _PY_ISO.match(s)
        if m is None:
            aware = _aware_iso(_one_text(s))
            if aware is not None:
                return int(aware[0])  # an ISO form pyarrow reads, with a zone (2026-01-01T00Z)
            raise _CellError(
                "timestamp",
                f"timestamp {v!r:.60} is neither a number nor ISO-8601 (e.g. 2026-01-01T00:00:00.5Z)",
            )
        return _iso_cell(v, m, opts)
    if isinstance(v, (_dt.datetime, np.datetime64)):
        try:
            return timestamp_ns(v, opts.timezone)
        except (TypeError, ValueError) as exc:
            raise _CellError("timestamp", f"timestamp {v!r:.60}: {exc}") from None
    raise _CellError("timestamp", f"timestamp {v!r:.60} is a {type(v).__name__}, not a number, text or time")


def _one_text(s: str) -> Any:
    import pyarrow as pa

    return pa.array([s], pa.string())


def _iso_cell(v: str, m: re.Match[str], opts: Options) -> int:
    try:
        wall = _dt.datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"] or 0))
    except ValueError as exc:
        raise _CellError("timestamp", f"timestamp {v!r:.60} is not a valid date and time: {exc}") from None
    frac = int((m["f"] or "").ljust(9, "0"))
    wall_ns = (wall - _dt.datetime(1970, 1, 1)) // _dt.timedelta(microseconds=1) * 1000 + frac
    tz = m["tz"]
    if tz:
        if tz in ("Z", "z"):
            ns = wall_ns
        else:
            digits = tz[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:])
            if hours > 23 or minutes > 59:
                raise _CellError("timestamp", f"timestamp {v!r:.60} has UTC offset {tz}, outside -23:59..+23:59")
            ns = wall_ns - (-1 if tz[0] == "-" else 1) * (hours * 3600 + minutes * 60) * 10**9
    elif opts.timezone is None:
        raise _CellError("timezone", _naive_reason(v))
    else:
        utc, one = localize_each(np.array([wall_ns], np.int64), opts.timezone)
        if not one[0]:
            raise _CellError("timezone", _zone_gap_reason(v, opts.timezone))
        ns = int(utc[0])
    if not INT64_MIN < ns <= INT64_MAX:
        raise _CellError("timestamp", _range_reason(ns))
    return ns


def _numeric_ts(s: str, opts: Options, pl: Plan) -> int:
    """A number's text in the plan's unit, to ns from its digits."""
    unit = pl.unit
    if unit is None:
        if pl.unit_refusal:
            raise _CellError("timestamp unit", f"timestamp {s}: {pl.unit_refusal}")
        raise _CellError(
            "timestamp unit",
            f"timestamp {s} has no unit: its magnitude is not that of 2001..2286 in s, ms, us or ns; "
            "give --timestamp-unit s|ms|us|ns",
        )
    try:
        d = decimal.Decimal(s)
    except decimal.InvalidOperation:
        raise _CellError("timestamp", f"timestamp {s!r:.60} is not a number") from None
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        ns = d * UNIT_NS[unit]
    if not INT64_MIN < ns <= INT64_MAX:
        raise _CellError("timestamp", _range_reason(int(ns)))
    if pl.inferred:
        int_part = str(abs(int(d))) if d >= 0 else "-"
        if _unit_of_digits(int_part) != unit:
            raise _CellError(
                "timestamp unit",
                f"timestamp {s} is not of the magnitude of the other timestamps, whose unit was inferred "
                f"as {unit}: give --timestamp-unit",
            )
    if ns != ns.to_integral_value():
        raise _CellError(
            "timestamp precision",
            f"timestamp {s} {unit} has a fraction finer than a nanosecond",
        )
    out = int(ns)
    if not INT64_MIN < out <= INT64_MAX:
        raise _CellError("timestamp", _range_reason(out))
    return out


# ---------------------------------------------------------------------------------------------
# Rows -> elements
# ---------------------------------------------------------------------------------------------


def elements(rows: Rows, opts: Options, pl: Plan) -> Iterator[Any]:
    """Series elements ``(channel, timestamps, values, tags)`` and :class:`BadRow` s of a batch.

    Raises:
        FileError: a column the layout needs is missing (the whole file is unusable).
    """
    names = list(rows.columns)
    if opts.timestamp_column not in rows.columns:
        raise FileError(f"no timestamp column {opts.timestamp_column!r} (columns {names}): give --timestamp-column")
    if opts.layout == "long":
        missing = [c for c in (opts.channel_column, opts.value_column) if c not in rows.columns]
        if missing:
            hint = " It looks like a wide file (one column per channel): give --layout wide." if len(names) > 2 else ""
            raise FileError(
                f"the long layout needs columns {opts.channel_column!r} and {opts.value_column!r}, and there is no "
                f"{' and no '.join(repr(m) for m in missing)} (columns {names[:12]}).{hint} Or name them with "
                "--channel-column and --value-column."
            )
    ts, bad_ts = timestamps(rows.columns[opts.timestamp_column], rows.text, opts, pl)
    for i, b in sorted(bad_ts.items()):
        yield rows.bad(i, b.category, b.reason, opts.timestamp_column)
    if opts.layout == "wide":
        yield from _wide(rows, opts, pl, ts, bad_ts)
    else:
        yield from _long(rows, opts, pl, ts, bad_ts)


def _wide(rows: Rows, opts: Options, pl: Plan, ts: np.ndarray, bad_ts: Mapping[int, Any]) -> Iterator[Any]:
    keep = np.ones(len(rows), dtype=bool)
    keep[list(bad_ts)] = False
    good = np.flatnonzero(keep)
    for name, col in rows.columns.items():
        if name == opts.timestamp_column or not good.size:
            continue
        cells = classify(col, rows.text, opts.decimal).take(good)
        values, kept, bad = typed(cells, _decision(pl, opts, name), name, rows.text, opts)
        for pos, (category, reason) in sorted(bad.items()):
            yield rows.bad(int(good[pos]), category, reason, name, [opts.timestamp_column, name])
        if kept.size:
            yield name, ts[good[kept]], values, None


def _decision(pl: Plan, opts: Options, key: str) -> Decision:
    d = pl.decisions.get(key)
    if d is None:  # a channel the scan did not see (a file changed between the passes)
        return Decision("fail", "number", f"{key!r} was not in the input when its types were decided: run again")
    return d


def _long(rows: Rows, opts: Options, pl: Plan, ts: np.ndarray, bad_ts: Mapping[int, Any]) -> Iterator[Any]:
    n = len(rows)
    # Channels and tags are checked once per distinct cell, rows grouped by codes with numpy:
    # no Python work per row except for the failed ones.
    chan_codes, chan_values = _codes(rows.columns[opts.channel_column])
    chan_names: list[str | None] = []
    chan_reasons: list[str | None] = []
    for channel in chan_values:
        if isinstance(channel, str) and channel.strip():
            chan_names.append(channel)
            chan_reasons.append(None)
        elif isinstance(channel, (int, float)) and not isinstance(channel, bool) and not rows.text:
            chan_names.append(str(channel))
            chan_reasons.append(None)
        elif isinstance(channel, str):
            chan_names.append(None)
            chan_reasons.append("empty channel")
        else:
            chan_names.append(None)
            chan_reasons.append(f"channel {channel!r:.60} is not text")
    if opts.tags_column in rows.columns:
        tag_codes, tag_values = _codes(rows.columns[opts.tags_column])
    else:
        tag_codes, tag_values = np.full(n, -1, np.int64), []
    parsed_tags: dict[str, Any] = {}
    tag_parsed: list[tuple[dict[str, str] | None, str] | str] = []
    for cell in tag_values:
        try:
            tag_parsed.append(_tags(cell, parsed_tags))
        except ValueError as exc:
            tag_parsed.append(str(exc))
    chan_ok = np.asarray([r is None for r in chan_reasons] + [False], dtype=bool)  # [-1]: null
    tag_ok = np.asarray([not isinstance(t, str) for t in tag_parsed] + [True], dtype=bool)  # [-1]: none
    ok = chan_ok[chan_codes] & tag_ok[tag_codes]
    if bad_ts:
        ok[np.fromiter(bad_ts, np.int64, len(bad_ts))] = False
    for i in np.flatnonzero(~ok).tolist():
        if i in bad_ts:
            continue
        c = int(chan_codes[i])
        if c < 0 or chan_reasons[c] is not None:
            yield rows.bad(i, "channel", "empty channel" if c < 0 else str(chan_reasons[c]), opts.channel_column)
        else:
            yield rows.bad(i, "tags", str(tag_parsed[int(tag_codes[i])]), opts.tags_column)
    good = np.flatnonzero(ok)
    if not good.size:
        return
    # One group per series: distinct (channel cell, tags cell) pairs that name the same series
    # (e.g. the same tags in another key order) share a group.
    pair = chan_codes[good] * (len(tag_values) + 1) + (tag_codes[good] + 1)
    pairs, inverse = np.unique(pair, return_inverse=True)
    series_of_pair: list[int] = []
    series: dict[tuple[str, str], int] = {}
    series_tags: list[dict[str, str] | None] = []
    for p in pairs.tolist():
        c, t = divmod(p, len(tag_values) + 1)
        tags, tag_text = (None, "") if t == 0 else tag_parsed[t - 1]  # type: ignore[misc]
        channel = chan_names[c]
        assert channel is not None
        key = (channel, tag_text)
        if key not in series:
            series[key] = len(series)
            series_tags.append(tags)
        series_of_pair.append(series[key])
    group = np.asarray(series_of_pair, np.int64)[inverse.reshape(-1)]
    # A stable sort: each series' rows stay in file order, so its points keep their order.
    order = np.argsort(group, kind="stable")
    sorted_group = group[order]
    bounds = np.flatnonzero(np.diff(sorted_group)) + 1
    cells_all = classify(rows.columns[opts.value_column], rows.text, opts.decimal)
    keys = list(series)
    for start, idx in zip(np.r_[0, bounds].tolist(), np.split(good[order], bounds), strict=True):
        s_id = int(sorted_group[start])
        channel = keys[s_id][0]
        cells = cells_all.take(idx)
        values, kept, bad = typed(cells, _decision(pl, opts, channel), channel, rows.text, opts)
        for pos in np.flatnonzero(cells.kind == NULL).tolist():
            yield rows.bad(int(idx[pos]), "empty value", "empty value", opts.value_column)
        for pos, (category, reason) in sorted(bad.items()):
            yield rows.bad(int(idx[pos]), category, reason, opts.value_column)
        if kept.size:
            yield channel, ts[idx[kept]], values, series_tags[s_id]


def typed(
    cells: Cells, d: Decision, name: str, text: bool, opts: Options
) -> tuple[Any, np.ndarray, dict[int, tuple[str, str]]]:
    """The cells as values of decision ``d``.

    Returns:
        ``(values, kept, bad)``: values for positions ``kept``, a (category, reason) for each
        position that has none. Null cells are in neither.
    """
    kind = cells.kind
    bad: dict[int, tuple[str, str]] = {}
    for i, r in cells.reasons.items():
        bad[i] = ("number" if kind[i] == BADNUM else "type clash", r)
    present = (kind != NULL) & (kind != BADNUM) & (kind != OTHER)
    if d.type == "fail":
        for i in np.flatnonzero(present).tolist():
            bad[i] = ("column type", str(d.reason))
        return [], np.zeros(0, np.int64), bad
    if d.group == "number":
        ok = present & np.isin(kind, (INT, DEC, NONFINITE))
        clash = present & ~ok
    elif d.group == "text":
        ok = present & ((kind == TEXT) | (np.isin(kind, _NUMBER_KINDS) if text else False))
        clash = present & ~ok
    else:
        want = {"double array": DARR, "string array": SARR, "object": OBJECT}[d.group]
        ok = present & (kind == want)
        clash = present & ~ok
    for i in np.flatnonzero(clash).tolist():
        bad[i] = ("type clash", _clash(cells, i, d, name))
    if d.type in ("double", "int64", "uint64"):
        return _numbers(cells, ok, d.type, name, opts, bad)
    kept = np.flatnonzero(ok)
    src = cells.source
    if isinstance(src, list):
        vals = [src[i] for i in kept.tolist()]
    else:
        import pyarrow as pa

        vals = src.take(pa.array(kept, pa.int64())).to_pylist()
    if d.group == "double array":
        vals = [np.asarray([float(x) for x in v], dtype=np.float64) for v in vals]
    elif d.group == "string array":
        vals = [list(v) for v in vals]
    elif d.group == "object":
        vals = [_plain(v) for v in vals]
    return vals, kept, bad


def _plain(v: Any) -> Any:
    """A JSON value with its decimals (kept as text while reading) as floats again."""
    if isinstance(v, JsonNumber):
        return float(v)
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _clash(cells: Cells, i: int, d: Decision, name: str) -> str:
    src = cells.source
    v = src[i] if isinstance(src, list) else src[i].as_py()
    this = KIND_NAMES[int(cells.kind[i])]
    held = f" ({d.counts} in the input)" if d.counts else ""
    return (
        f"type clash: {name} holds {d.group} values{held}, this one is {this}: {v!r:.60} "
        f"(--column-type {name}=TYPE decides)"
    )


def _numbers(
    cells: Cells, ok: np.ndarray, vt: str, name: str, opts: Options, bad: dict[int, tuple[str, str]]
) -> tuple[Any, np.ndarray, dict[int, tuple[str, str]]]:
    kind = cells.kind
    ints = ok & (kind == INT)
    if vt == "double":
        keep = ok.copy()
        out = np.where(ints, cells.i64.astype(np.float64), cells.f64)
        vals = cells.i64[ints]
        f = vals.astype(np.float64)
        exact = _exact_doubles(vals, f)
        if not exact.all():
            for j in np.flatnonzero(ints)[~exact].tolist():
                keep[j] = False
                bad[j] = ("number", f"integer {int(cells.i64[j])} is not exact as a double ({name} is double)")
        for j, v in cells.big.items():
            if ok[j]:
                if float(v) == v:
                    out[j] = float(v)
                else:
                    keep[j] = False
                    bad[j] = ("number", f"integer {v} is not exact as a double ({name} is double)")
        kept = np.flatnonzero(keep)
        return out[kept], kept, bad
    nonint = ok & (kind != INT)
    for j in np.flatnonzero(nonint).tolist():
        bad[j] = ("type clash", f"{name} is {vt}, this is not an integer: {_cell_text(cells, j)!r:.60}")
    keep = ints.copy()
    if vt == "int64":
        for j, v in cells.big.items():
            if keep[j]:
                keep[j] = False
                bad[j] = ("number", f"integer {v} is outside int64 ({name} is int64)")
        kept = np.flatnonzero(keep)
        return cells.i64[kept], kept, bad
    # uint64
    neg = keep & (cells.i64 < 0)
    for j in np.flatnonzero(neg).tolist():
        keep[j] = False
        bad[j] = ("number", f"integer {int(cells.i64[j])} is outside uint64 ({name} is uint64)")
    out_u = cells.i64.astype(np.uint64)
    for j, v in cells.big.items():
        if keep[j]:
            if 0 <= v <= UINT64_MAX:
                out_u[j] = v
            else:
                keep[j] = False
                bad[j] = ("number", f"integer {v} is outside uint64 ({name} is uint64)")
    if opts.int64_only:
        over = keep & (out_u > np.uint64(INT64_MAX))
        for j in np.flatnonzero(over).tolist():
            keep[j] = False
            bad[j] = ("avro long", f"integer {int(out_u[j])} is above 2**63 - 1, which an Avro long cannot hold")
        kept = np.flatnonzero(keep)
        return out_u[kept].astype(np.int64), kept, bad
    kept = np.flatnonzero(keep)
    return out_u[kept], kept, bad


def _exact_doubles(vals: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Which int64 values their doubles ``f`` hold exactly (2**63 itself is no int64)."""
    below = f < 2.0**63
    return (np.abs(vals) <= 2**53) | (below & (np.where(below, f, 0).astype(np.int64) == vals))


def _cell_text(cells: Cells, i: int) -> Any:
    src = cells.source
    return src[i] if isinstance(src, list) else src[i].as_py()


def _codes(col: Any) -> tuple[np.ndarray, list[Any]]:
    """Each row's index into the column's distinct values (-1 for null), and those values."""
    import pyarrow as pa

    if isinstance(col, list):
        index: dict[Any, int] = {}
        values: list[Any] = []
        codes = np.empty(len(col), np.int64)
        for i, v in enumerate(col):
            if v is None:
                codes[i] = -1
                continue
            try:
                k = index.get(v)
            except TypeError:  # an unhashable cell (a JSON object or list): its own value
                k = None
                index_key = None
            else:
                index_key = v
            if k is None:
                k = len(values)
                values.append(v)
                if index_key is not None:
                    index[index_key] = k
            codes[i] = k
        return codes, values
    try:
        encoded = col.dictionary_encode()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return _codes(col.to_pylist())  # e.g. map<string, string> tags
    codes = np.asarray(encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, encoded.dictionary.to_pylist()


def _tags(cell: Any, cache: dict[str, Any]) -> tuple[dict[str, str] | None, str]:
    if isinstance(cell, str):
        hit = cache.get(cell)
        if hit is None:
            try:
                value = json.loads(cell)
            except ValueError as exc:
                hit = ValueError(f"tags {cell!r:.60} are not JSON: {exc}")
            else:
                hit = value
            cache[cell] = hit
        if isinstance(hit, ValueError):
            raise hit
        cell = hit
    if isinstance(cell, list) and all(isinstance(kv, tuple) and len(kv) == 2 for kv in cell):
        cell = dict(cell)  # an Arrow map<string, string> cell
    if not isinstance(cell, Mapping):
        raise ValueError(f"tags {cell!r:.60} are not an object of text values")
    for k, v in cell.items():
        if not isinstance(k, str) or not isinstance(v, str) or isinstance(v, JsonNumber) or not k:
            raise ValueError(f"tag {k!r:.40}: {v!r:.40} is not a non-empty text key with a text value")
    tags = dict(cell)
    return (tags or None), json.dumps(sorted(tags.items()))


# ---------------------------------------------------------------------------------------------
# Files: the two passes (picklable callables for beam.FlatMap)
# ---------------------------------------------------------------------------------------------

#: Beam metrics namespace of the reader.
NAMESPACE = "files_to_nominal"
FORMATS = ("csv", "parquet", "jsonl", "avro", "failed")
_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".avro": "avro",
}
_COMPRESSED = (".gz", ".bz2", ".zst", ".zstd", ".xz")


def format_of(path: str, given: str | None) -> str:
    """The file format: ``given`` if set, else from the extension (``.csv.gz`` counts as csv).

    Raises:
        FileError: the extension names no format.
    """
    name = path.lower()
    for ext in _COMPRESSED:
        name = name.removesuffix(ext)
    if name.endswith(".failed.jsonl"):
        return "failed"  # failed rows of an earlier run, replayed as the files they came from
    if given:
        return given
    import os

    fmt = _EXTENSIONS.get(os.path.splitext(name)[1])
    if fmt is None:
        raise FileError("cannot tell the format from the extension: give --format")
    return fmt


def _failure(exc: BaseException) -> str:
    if isinstance(exc, FileError):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


class ScanFile(beam.DoFn):  # type: ignore[misc]
    """First pass: what one file holds (a :class:`Scan`); failures are the second pass's to report."""

    def __init__(self, opts: Options) -> None:
        super().__init__()
        self.opts = opts

    def process(self, readable: Any) -> Iterator[Scan]:
        scan = Scan()
        path = path_of(readable)
        try:
            fmt = format_of(path, self.opts.format)
            if fmt != "avro":
                for item in rows_of(fmt, lambda: open_binary(readable), path, self.opts):
                    if isinstance(item, Rows):
                        scan_rows(item, self.opts, scan)
                        PROGRESS.add(scanned=len(item))
                        _release_memory()
        except Exception:
            pass
        yield scan


class ReadFile(beam.DoFn):  # type: ignore[misc]
    """Second pass: one file's rows as WriteToNominal elements, :class:`BadRow` s and, if the file
    cannot be read, a :class:`BadFile` (rows before the failure are as reported)."""

    def __init__(self, opts: Options) -> None:
        super().__init__()
        self.opts = opts
        self._plan: tuple[int, Plan] | None = None

    def plan(self, scan: Scan) -> Plan:
        if self._plan is None or self._plan[0] != id(scan):
            self._plan = (id(scan), plan(scan, self.opts))
        return self._plan[1]

    def process(self, readable: Any, scan: Scan) -> Iterator[Any]:
        from apache_beam.metrics.metric import Metrics

        pl = self.plan(scan)
        rows_counter = Metrics.counter(NAMESPACE, "rows")
        path = path_of(readable)
        read = 0
        try:
            fmt = format_of(path, self.opts.format)
            if pl.inferred and fmt != "avro":
                Metrics.counter(NAMESPACE, f"unit_inferred_{pl.unit}").inc()
            if fmt == "avro":
                for element in _avro(lambda: open_binary(readable), path):
                    rows_counter.inc(len(element[1]))
                    PROGRESS.add(rows=len(element[1]))
                    yield element
            else:
                for item in rows_of(fmt, lambda: open_binary(readable), path, self.opts):
                    if isinstance(item, BadRow):
                        rows_counter.inc()
                        read += 1
                        self._count_bad(item)
                        PROGRESS.add(rows=1, bad=1)
                        yield item
                        continue
                    rows_counter.inc(len(item))
                    for out in elements(item, self.opts, pl):
                        if isinstance(out, BadRow):
                            self._count_bad(out)
                            PROGRESS.add(bad=1)
                        yield out
                    read += len(item)
                    PROGRESS.add(rows=len(item))
                    _release_memory()
        except Exception as exc:
            where = f" (after {read:,} rows, which landed or failed as reported)" if read else ""
            Metrics.counter(NAMESPACE, "bad_files").inc()
            PROGRESS.add(bad=1)
            yield BadFile(path, _failure(exc) + where)
            return
        PROGRESS.add(files=1)
        Metrics.counter(NAMESPACE, "files").inc()

    @staticmethod
    def _count_bad(b: BadRow) -> None:
        from apache_beam.metrics.metric import Metrics

        Metrics.counter(NAMESPACE, "bad_rows").inc()
        Metrics.counter(NAMESPACE, "bad:" + b.category).inc()


def _release_memory() -> None:
    """Give the batch's freed Arrow memory back: pyarrow's default pool keeps it for reuse, which
    raises a big file's peak RSS (docs/benchmarks.md, "files_to_nominal")."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _avro(open_file: Callable[[], Any], path: str) -> Iterator[Any]:
    import fastavro

    with open_file() as f:
        for rec in fastavro.reader(f):
            yield (
                rec["channel"],
                np.asarray(rec["timestamps"], dtype=np.int64),
                _avro_values(rec["values"]),
                rec.get("tags") or None,
            )


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


def match_glob(glob: str) -> Iterator[Any]:
    """The files a glob matches, as ``fileio.ReadableFile``; a :class:`BadFile` if it matches none."""
    from apache_beam.io.fileio import ReadableFile
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.metrics.metric import Metrics

    try:
        found = FileSystems.match([glob])[0].metadata_list
    except Exception as exc:
        found, why = [], _failure(exc)
    else:
        why = "no file matches it"
    if not found:
        Metrics.counter(NAMESPACE, "empty_globs").inc()
        yield BadFile(glob, f"--input {glob!r}: {why}")
        return
    Metrics.counter(NAMESPACE, "files_matched").inc(len(found))
    for m in sorted(found, key=lambda m: m.path):
        yield ReadableFile(m)


class MergeScans(beam.CombineFn):  # type: ignore[misc]
    """The per-file scans merged into the whole input's."""

    def create_accumulator(self) -> Scan:
        return Scan()

    def add_input(self, acc: Scan, scan: Scan) -> Scan:
        return acc.merge(scan)

    def merge_accumulators(self, accs: Any) -> Scan:
        out = Scan()
        for a in accs:
            out.merge(a)
        return out

    def extract_output(self, acc: Scan) -> Scan:
        return acc
