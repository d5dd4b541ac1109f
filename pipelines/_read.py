"""Reading telemetry files cell by cell, so that one bad row costs that row and nothing else.

Used by :mod:`pipelines.files_to_nominal`. Every input row ends as either a point of a series
element or a :class:`BadRow` naming its file, row number and reason:

* timestamps are parsed per cell (an ``int`` in the unit, a decimal number, or ISO-8601 with a
  timezone): a stray ``not-a-time`` fails its own row, never the column;
* values are typed per channel (long layout) or per column (wide layout) from what the cells
  hold: the kind most cells have wins (numbers, text, arrays, objects) and a cell of another kind
  is a type clash, a bad row; numbers are ``int64`` when every one is an integer in range, ``uint64``
  when they are non-negative integers and some exceed ``2**63 - 1``, and ``double`` when any has a
  fraction (then an integer beyond ``2**53`` is a bad row rather than rounded). Integers are never
  read through floats: CSV cells are parsed as text and JSON-lines by Python's ``json`` (exact ints);
* ``--column-type NAME=TYPE`` fixes the type of a channel or column instead.

CSV goes through Python's ``csv`` module (not pyarrow's reader) so the line of every row is known
exactly, rows with the wrong number of fields included.
"""

from __future__ import annotations

import csv
import dataclasses
import decimal
import io
import json
import math
import re
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_EXACT_DOUBLE = 2**53
#: What ``--column-type`` accepts.
COLUMN_TYPES = ("double", "int64", "uint64", "string")
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
#: Rows per batch: types are settled per batch, so bigger batches see more of each channel.
BATCH_ROWS = 262_144
#: Bytes of CSV pyarrow parses per batch on the fast path.
CSV_BLOCK_BYTES = 8 << 20

_INT_TEXT = re.compile(r"^[-+]?\d+$")
_DECIMAL_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_LONG_DIGITS = r"^\s*[-+]?\d{16,}\s*$"


class BadRow(NamedTuple):
    """A row that was not written, and why."""

    file: str
    #: 1-based data row of the file (CSV: not counting the header; JSON-lines: non-blank lines).
    row: int
    #: 1-based physical line where the row ends (CSV, JSON-lines); None for Parquet.
    line: int | None
    #: The column (wide layout) or value/timestamp column the reason is about, if one.
    column: str | None
    reason: str
    #: The row as JSON text (cut to 500 characters).
    raw: str

    def to_json(self) -> str:
        return json.dumps({"kind": "row", **self._asdict()})


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

    def __len__(self) -> int:
        return len(self.rows)

    def bad(self, i: int, reason: str, column: str | None = None) -> BadRow:
        line = int(self.lines[i]) if self.lines is not None else None
        raw: dict[str, Any] = {}
        for name, col in self.columns.items():
            v = col[i] if isinstance(col, list) else col[i].as_py()
            raw[name] = v
        text = json.dumps(raw, default=str)
        return BadRow(self.path, int(self.rows[i]), line, column, reason, text[:500])


# ---------------------------------------------------------------------------------------------
# Files -> Rows
# ---------------------------------------------------------------------------------------------


def csv_rows(f: Any, path: str, reopen: Callable[[], Any] | None = None) -> Iterator[Rows | BadRow]:
    """CSV with a header line; empty cells are nulls.

    With ``reopen`` (a way to open the file again), pyarrow's reader reads it, ~30x faster than
    Python's, as long as every row number it implies is exact: up to the first row with the wrong
    number of fields, blank line, newline inside a quoted cell or invalid UTF-8. From there the
    file is read again with Python's ``csv`` module, which knows each row's line.
    """
    done = 0
    if reopen is not None:
        fast = _csv_arrow(f, path, reopen)
        try:
            while True:
                yield next(fast)
        except StopIteration as stop:
            done = stop.value
            if done < 0:
                return
        with reopen() as g:
            yield from _csv_python(g, path, skip=done)
        return
    yield from _csv_python(f, path)


def _csv_header(reopen: Callable[[], Any]) -> list[str] | None:
    with reopen() as g:
        text = io.TextIOWrapper(g, encoding="utf-8", errors="replace", newline="")
        try:
            return next(csv.reader(text))
        except StopIteration:
            return None


def _csv_arrow(f: Any, path: str, reopen: Callable[[], Any]) -> Generator[Rows, None, int]:
    """Batches while row numbers are exact; returns the rows read (-1: the whole file)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    header = _csv_header(reopen)
    if not header:
        return -1
    _check_header(path, header)
    trouble: list[Any] = []

    def invalid(row: Any) -> str:
        trouble.append(row)
        return "skip"

    try:
        reader = pcsv.open_csv(
            f,
            read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False),
            # A blank line must show too (as a row of too few fields): it shifts line numbers.
            parse_options=pcsv.ParseOptions(invalid_row_handler=invalid, ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return 0
    done = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return -1
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return done
        columns = {name: batch.column(name) for name in batch.schema.names}
        if trouble or any(pc.any(pc.match_substring(c, "\n")).as_py() for c in columns.values()):
            return done
        # pyarrow reads a blank line as a row of nulls (no invalid row): Python's csv skips it,
        # and a trailing blank line is no bad row.
        if batch.num_rows and _any_all_null(batch):
            return done
        rows = np.arange(done + 1, done + batch.num_rows + 1, dtype=np.int64)
        done += batch.num_rows
        yield Rows(path, columns, rows, rows + 1, text=True)


def _any_all_null(batch: Any) -> bool:
    import pyarrow.compute as pc

    null_counts = [c.null_count for c in batch.columns]
    if min(null_counts) == 0:
        return False
    every = batch.column(0).is_null()
    for c in batch.columns[1:]:
        every = pc.and_(every, c.is_null())
    return bool(pc.any(every).as_py())


def _check_header(path: str, names: list[str]) -> None:
    """A header naming a column twice is refused: which of the two a row's value is would be a guess."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{path}: column {name!r} appears more than once in the header {names}")
        seen.add(name)


def _csv_python(f: Any, path: str, skip: int = 0) -> Iterator[Rows | BadRow]:
    text = io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        return
    _check_header(path, header)
    width = len(header)
    batch: list[list[str]] = []
    rows: list[int] = []
    lines: list[int] = []
    n = 0
    for _ in range(skip):
        # Rows an exact fast pass already delivered: one line each, none blank.
        next(reader)
        n += 1
    # The loop does the least per row (csv's C reader does the parsing): columns are made from
    # the rows in one transpose per batch.
    for fields in reader:
        if not fields:
            continue  # a blank line
        n += 1
        if len(fields) != width:
            raw = json.dumps(fields)[:500]
            yield BadRow(path, n, reader.line_num, None, f"{len(fields)} fields, the header has {width}", raw)
            continue
        batch.append(fields)
        rows.append(n)
        lines.append(reader.line_num)
        if len(batch) >= BATCH_ROWS:
            yield _text_rows(path, header, batch, rows, lines)
            batch, rows, lines = [], [], []
    if batch:
        yield _text_rows(path, header, batch, rows, lines)


def _text_rows(path: str, header: list[str], batch: list[list[str]], rows: list[int], lines: list[int]) -> Rows:
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = {}
    for name, col in zip(header, zip(*batch, strict=True), strict=True):
        arr = pa.array(col, pa.string())
        # An empty cell is a null (a gap in the wide layout, a bad row where a value is needed).
        columns[name] = pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)
    return Rows(path, columns, np.asarray(rows, np.int64), np.asarray(lines, np.int64), text=True)


def jsonl_rows(f: Any, path: str) -> Iterator[Rows | BadRow]:
    """One JSON object per line; Python's json keeps integers exact."""
    records: list[dict[str, Any]] = []
    rows: list[int] = []
    lines: list[int] = []
    n = 0
    for line_no, raw in enumerate(f, 1):
        line = raw.strip()
        if not line:
            continue
        n += 1
        try:
            rec = json.loads(line)
        except ValueError as exc:
            yield BadRow(path, n, line_no, None, f"not JSON: {exc}", line[:500].decode("utf-8", "replace"))
            continue
        if not isinstance(rec, dict):
            yield BadRow(path, n, line_no, None, f"a JSON {type(rec).__name__}, not an object", line[:500].decode())
            continue
        if b"\\u" in line and _has_lone_surrogate(rec):
            # "\ud800" is valid JSON but no text Nominal (or UTF-8) can hold.
            raw = line[:500].decode("utf-8", "replace")
            yield BadRow(path, n, line_no, None, "text with a lone surrogate escape (\\ud800-\\udfff)", raw)
            continue
        records.append(rec)
        rows.append(n)
        lines.append(line_no)
        if len(records) >= BATCH_ROWS:
            yield _json_rows(path, records, rows, lines)
            records, rows, lines = [], [], []
    if records:
        yield _json_rows(path, records, rows, lines)


def _has_lone_surrogate(rec: Any) -> bool:
    try:
        json.dumps(rec, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _json_rows(path: str, records: list[dict[str, Any]], rows: list[int], lines: list[int]) -> Rows:
    names: dict[str, None] = {}
    for rec in records:
        names.update(dict.fromkeys(rec))
    columns = {name: [rec.get(name) for rec in records] for name in names}
    return Rows(path, columns, np.asarray(rows, np.int64), np.asarray(lines, np.int64), text=False)


def parquet_rows(f: Any, path: str) -> Iterator[Rows]:
    import pyarrow.parquet as pq

    start = 0
    pf = pq.ParquetFile(f)
    _check_header(path, pf.schema_arrow.names)
    for batch in pf.iter_batches(batch_size=BATCH_ROWS):
        columns = {name: batch.column(name) for name in batch.schema.names}
        rows = np.arange(start + 1, start + batch.num_rows + 1, dtype=np.int64)
        start += batch.num_rows
        yield Rows(path, columns, rows, None, text=False)


# ---------------------------------------------------------------------------------------------
# Timestamps
# ---------------------------------------------------------------------------------------------


def _check_ns(ns: int) -> int:
    if not INT64_MIN < ns <= INT64_MAX:
        raise ValueError(f"timestamp {ns} ns is outside the int64 nanosecond range (1677..2262)")
    return ns


def timestamp_cell(v: Any, unit: str) -> int:
    """One timestamp cell in nanoseconds, exactly.

    Raises:
        ValueError: empty, unparseable or out of range; the message says which.
    """
    from beam_nominal.model import timestamp_ns

    mult = UNIT_NS[unit]
    if v is None:
        raise ValueError("empty timestamp")
    if isinstance(v, bool):
        raise ValueError(f"timestamp {v!r} is a boolean")
    if isinstance(v, int):
        return _check_ns(v * mult)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"timestamp {v!r} is not a finite number")
        # Decimal keeps the float's exact value; rounding happens once, to the nanosecond.
        return _check_ns(int((decimal.Decimal(v) * mult).to_integral_value(decimal.ROUND_HALF_EVEN)))
    if isinstance(v, str):
        s = v.strip()
        if _INT_TEXT.match(s):
            return _check_ns(int(s) * mult)
        if _DECIMAL_TEXT.match(s):
            # Decimal text such as 1704067200.000000001 s is exact; float64 would not be.
            return _check_ns(int((decimal.Decimal(s) * mult).to_integral_value(decimal.ROUND_HALF_EVEN)))
        if not s:
            raise ValueError("empty timestamp")
        try:
            return timestamp_ns(s)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"timestamp {v!r:.60} is neither a number in {unit} nor ISO-8601 with a timezone ({exc})"
            ) from None
    if hasattr(v, "tzinfo") or isinstance(v, np.datetime64):
        try:
            return timestamp_ns(v)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"timestamp {v!r:.60}: {exc}") from None
    raise ValueError(f"timestamp {v!r:.60} is a {type(v).__name__}, not a number, text or time")


def timestamps(col: Any, unit: str) -> tuple[np.ndarray, dict[int, str]]:
    """A column of timestamps as int64 ns, and the reason for each row that has none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(col)
    bad: dict[int, str] = {}
    if isinstance(col, list):
        return _timestamps_slow(col, unit)
    typ = col.type
    if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
        try:
            ns = pc.cast(col, pa.timestamp("ns"), safe=True).cast(pa.int64()).fill_null(0)
        except pa.ArrowInvalid:
            # A cell beyond the nanosecond range (a 9999-12-31 sentinel): a bad row, not a
            # failed job. The cells' own counts in their unit, checked as integer timestamps are.
            if pa.types.is_date32(typ):
                unit_ns, storage = 86_400 * 10**9, pa.int32()
            elif pa.types.is_date64(typ):
                unit_ns, storage = 10**6, pa.int64()
            else:
                unit_ns, storage = _TS_UNIT_NS[typ.unit], pa.int64()
            raw = np.asarray(col.view(storage).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
            limit = INT64_MAX // unit_ns
            out_of_range = (raw > limit) | (raw < -limit)
            valid = _valid(col)
            for i in np.flatnonzero(~valid | out_of_range).tolist():
                bad[i] = "empty timestamp" if not valid[i] else _check_reason(int(raw[i]) * unit_ns)
            return np.where(out_of_range, 0, raw) * unit_ns, bad
        out = np.asarray(ns.to_numpy(zero_copy_only=False), dtype=np.int64)
        if col.null_count:
            bad = {int(i): "empty timestamp" for i in np.flatnonzero(~_valid(col))}
        return out, bad
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        try:
            # Fast path: every cell an int64 (nulls aside); anything else is read cell by cell.
            col = pc.cast(col, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _timestamps_slow(col.to_pylist(), unit)
        typ = col.type
    if pa.types.is_integer(typ) and typ != pa.uint64():
        raw = np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        mult = UNIT_NS[unit]
        limit = INT64_MAX // mult
        out_of_range = (raw > limit) | (raw < -limit) | (raw == INT64_MIN)
        if col.null_count or out_of_range.any():
            valid = _valid(col)
            for i in np.flatnonzero(~valid | out_of_range).tolist():
                bad[i] = "empty timestamp" if not valid[i] else _range_reason(int(raw[i]), unit)
            raw = np.where(out_of_range, 0, raw)
        return raw * mult, bad
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        return _timestamps_slow(col.to_pylist(), unit)
    return np.zeros(n, np.int64), {i: f"timestamp column of type {typ} is not a number, text or time" for i in range(n)}


_TS_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def _check_reason(ns: int) -> str:
    try:
        _check_ns(ns)
    except ValueError as exc:
        return str(exc)
    return "timestamp out of range"  # pragma: no cover - only called for values out of range


def _range_reason(raw: int, unit: str) -> str:
    try:
        _check_ns(raw * UNIT_NS[unit])
    except ValueError as exc:
        return str(exc)
    return "timestamp out of range"  # pragma: no cover - only called for values out of range


def _valid(col: Any) -> np.ndarray:
    return np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _timestamps_slow(values: list[Any], unit: str) -> tuple[np.ndarray, dict[int, str]]:
    out = np.zeros(len(values), np.int64)
    bad: dict[int, str] = {}
    for i, v in enumerate(values):
        try:
            out[i] = timestamp_cell(v, unit)
        except ValueError as exc:
            bad[i] = str(exc)
    return out, bad


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------

_GROUP_OF = {"int": "number", "float": "number", "str": "text", "darr": "double array", "sarr": "string array"}
_GROUP_ORDER = ("number", "text", "double array", "string array", "object")


def _kind(v: Any, text: bool) -> tuple[str, Any]:
    """The kind of one non-null cell and its parsed value."""
    if text:
        s = v.strip()
        if _INT_TEXT.match(s):
            return "int", int(s)
        try:
            return "float", float(s)
        except ValueError:
            return "str", v
    if isinstance(v, bool):
        return "int", int(v)
    if isinstance(v, int):
        return "int", v
    if isinstance(v, float):
        return "float", v
    if isinstance(v, str):
        return "str", v
    if isinstance(v, Mapping):
        return "object", dict(v)
    if isinstance(v, (list, tuple, np.ndarray)):
        items = list(v)
        if items and all(isinstance(x, str) for x in items):
            return "sarr", items
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            return "darr", [float(x) for x in items]
        return "bad", f"array {v!r:.60} mixes types or holds ones that are neither numbers nor text"
    return "bad", f"value {v!r:.60} is a {type(v).__name__}, which has no Nominal type"


def _forced(kind: str, v: Any, raw: Any, forced: str) -> Any:
    """A cell converted to ``forced``; raises ValueError naming why it cannot be."""
    if forced == "string":
        if kind == "str":
            return v
        if isinstance(raw, str):
            return raw
        raise ValueError(f"value {raw!r:.60} is not text (column type string)")
    if kind == "int":
        if forced == "double":
            if abs(v) > _EXACT_DOUBLE:
                raise ValueError(f"integer {v} is not exact as a double (column type double)")
            return float(v)
        lo, hi = (INT64_MIN, INT64_MAX) if forced == "int64" else (0, UINT64_MAX)
        if not lo <= v <= hi:
            raise ValueError(f"integer {v} is outside {forced}")
        return v
    if kind == "float" and forced == "double":
        return v
    wanted = "a number" if forced == "double" else "an integer"
    raise ValueError(f"value {raw!r:.60} is not {wanted} (column type {forced})")


def type_values(
    col: Any, idx: np.ndarray, text: bool, forced: str | None, name: str
) -> tuple[Any, np.ndarray, dict[int, str]]:
    """The values of rows ``idx`` of ``col`` as one typed column.

    Returns:
        ``(values, kept, bad)``: values for the positions ``kept`` (indexes into ``idx``), and a
        reason for each position that has no value. Null cells are in neither (the caller decides
        whether a null is a gap or a bad row).
    """
    import pyarrow as pa

    if not isinstance(col, list):
        sub = col.take(pa.array(idx, pa.int64()))
        fast = _fast_arrow(sub, text, forced)
        if fast is not None:
            valid = _valid(sub)
            kept = np.flatnonzero(valid)
            return fast[kept] if isinstance(fast, np.ndarray) else [fast[i] for i in kept.tolist()], kept, {}
        cells = sub.to_pylist()
    else:
        cells = [col[i] for i in idx.tolist()]
    return _type_python(cells, text, forced, name)


def _fast_arrow(sub: Any, text: bool, forced: str | None) -> Any:
    """Vectorised typing of an Arrow column whose cells all agree, or None for the cell-by-cell path."""
    import pyarrow as pa
    import pyarrow.compute as pc

    typ = sub.type
    if text:
        if forced == "string":
            return sub.to_pylist()
        order = {"int64": [pa.int64()], "uint64": [pa.uint64()], "double": [pa.float64()]}.get(forced or "")
        if order is None:
            order = [pa.int64()]
            # Integers of 16+ digits may be past 2**53: they must not be read as doubles.
            if not pc.any(pc.match_substring_regex(sub, _LONG_DIGITS)).as_py():
                order.append(pa.float64())
        for target in order:
            try:
                return np.asarray(pc.cast(sub, target).fill_null(0).to_numpy(zero_copy_only=False))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        return None
    if forced is not None:
        return None
    if pa.types.is_integer(typ):
        dtype = np.uint64 if typ == pa.uint64() else np.int64
        return np.asarray(sub.fill_null(0).to_numpy(zero_copy_only=False)).astype(dtype)
    if pa.types.is_floating(typ):
        return np.asarray(sub.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
    if pa.types.is_boolean(typ):
        return np.asarray(sub.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return sub.to_pylist()
    return None


def _type_python(cells: list[Any], text: bool, forced: str | None, name: str) -> tuple[Any, np.ndarray, dict[int, str]]:
    kinds: list[tuple[int, str, Any]] = []
    bad: dict[int, str] = {}
    for i, v in enumerate(cells):
        if v is None:
            continue
        kind, parsed = _kind(v, text)
        if kind == "bad":
            bad[i] = parsed
        else:
            kinds.append((i, kind, parsed))
    if forced is not None:
        kept_i: list[int] = []
        out: list[Any] = []
        for i, kind, parsed in kinds:
            try:
                out.append(_forced(kind, parsed, cells[i], forced))
                kept_i.append(i)
            except ValueError as exc:
                bad[i] = str(exc)
        dtype = {"double": np.float64, "int64": np.int64, "uint64": np.uint64}.get(forced)
        values: Any = np.array(out, dtype=dtype) if dtype is not None else out
        return values, np.asarray(kept_i, np.int64), bad
    counts: dict[str, int] = {}
    for _, kind, _ in kinds:
        group = _GROUP_OF.get(kind, kind)
        counts[group] = counts.get(group, 0) + 1
    if not counts:
        return [], np.zeros(0, np.int64), bad
    winner = max(_GROUP_ORDER, key=lambda g: (counts.get(g, 0), -_GROUP_ORDER.index(g)))
    total = sum(counts.values())
    chosen: list[tuple[int, str, Any]] = []
    for i, kind, parsed in kinds:
        group = _GROUP_OF.get(kind, kind)
        # In a text channel of a text file, a cell that looks like a number is text too ("1").
        if group != winner and not (text and winner == "text"):
            bad[i] = (
                f"type clash: {name} holds {winner} values ({counts[winner]} of {total} in this batch), "
                f"this one is {group}: {cells[i]!r:.60} (--column-type {name}=TYPE decides)"
            )
        else:
            chosen.append((i, kind, parsed))
    kept = np.asarray([c[0] for c in chosen], np.int64)
    if winner == "text":
        # Text channels keep every cell's text as written, numbers-looking ones included.
        return [cells[i] for i, _, _ in chosen], kept, bad
    if winner != "number":
        return [p for _, _, p in chosen], kept, bad
    if any(kind == "float" for _, kind, _ in chosen):
        return _numbers(chosen, "double", bad)
    ints = [p for _, _, p in chosen]
    if min(ints) >= 0 and max(ints) > INT64_MAX:
        return _numbers(chosen, "uint64", bad)
    return _numbers(chosen, "int64", bad)


def _numbers(
    chosen: list[tuple[int, str, Any]], vt: str, bad: dict[int, str]
) -> tuple[Any, np.ndarray, dict[int, str]]:
    kept: list[int] = []
    out: list[Any] = []
    for i, kind, v in chosen:
        if vt == "double":
            if kind == "int" and abs(v) > _EXACT_DOUBLE:
                bad[i] = f"integer {v} is not exact as a double, and this channel holds decimal numbers"
                continue
            out.append(float(v))
        else:
            lo, hi = (INT64_MIN, INT64_MAX) if vt == "int64" else (0, UINT64_MAX)
            if not lo <= v <= hi:
                other = " (negative integers share the channel)" if vt == "int64" and v > 0 else ""
                bad[i] = f"integer {v} is outside {vt}{other}"
                continue
            out.append(v)
        kept.append(i)
    dtype = {"double": np.float64, "int64": np.int64, "uint64": np.uint64}[vt]
    return np.array(out, dtype=dtype), np.asarray(kept, np.int64), bad


# ---------------------------------------------------------------------------------------------
# Rows -> elements
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
    layout: str  # "long" | "wide"
    timestamp_column: str
    timestamp_unit: str
    channel_column: str
    value_column: str
    tags_column: str | None
    column_types: Mapping[str, str]
    #: Writing Avro files, whose ``long`` is int64: integers above 2**63 - 1 are bad rows there.
    int64_only: bool = False


def elements(rows: Rows, cfg: Layout) -> Iterator[Any]:
    """Series elements ``(channel, timestamps, values, tags)`` and :class:`BadRow` s of a batch.

    Raises:
        ValueError: a column the layout needs is missing (the whole file is unusable).
    """
    names = list(rows.columns)
    if cfg.timestamp_column not in rows.columns:
        raise ValueError(f"{rows.path}: no timestamp column {cfg.timestamp_column!r}; columns {names}")
    ts, bad_ts = timestamps(rows.columns[cfg.timestamp_column], cfg.timestamp_unit)
    for i, reason in bad_ts.items():
        yield rows.bad(i, reason, cfg.timestamp_column)
    if cfg.layout == "wide":
        yield from _wide(rows, cfg, ts, bad_ts)
    else:
        yield from _long(rows, cfg, ts, bad_ts)


def _wide(rows: Rows, cfg: Layout, ts: np.ndarray, bad_ts: Mapping[int, str]) -> Iterator[Any]:
    keep = np.ones(len(rows), dtype=bool)
    keep[list(bad_ts)] = False
    good = np.flatnonzero(keep)
    for name, col in rows.columns.items():
        if name == cfg.timestamp_column or not good.size:
            continue
        values, kept, bad = _typed(cfg, col, good, rows.text, name, name)
        for pos, reason in sorted(bad.items()):
            yield rows.bad(int(good[pos]), reason, name)
        if kept.size:
            yield name, ts[good[kept]], values, None


def _long(rows: Rows, cfg: Layout, ts: np.ndarray, bad_ts: Mapping[int, str]) -> Iterator[Any]:
    for col in (cfg.channel_column, cfg.value_column):
        if col not in rows.columns:
            raise ValueError(f"{rows.path}: long layout needs column {col!r}; columns {list(rows.columns)}")
    n = len(rows)
    # Channels and tags are checked once per distinct cell, rows grouped by codes with numpy:
    # no Python work per row except for the bad ones.
    chan_codes, chan_values = _codes(rows.columns[cfg.channel_column])
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
    if cfg.tags_column in rows.columns:
        tag_codes, tag_values = _codes(rows.columns[cfg.tags_column])
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
            yield rows.bad(i, "empty channel" if c < 0 else str(chan_reasons[c]), cfg.channel_column)
        else:
            yield rows.bad(i, str(tag_parsed[int(tag_codes[i])]), cfg.tags_column)
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
    group = np.asarray(series_of_pair, np.int64)[inverse]
    # A stable sort: each series' rows stay in file order, so its points keep their order.
    order = np.argsort(group, kind="stable")
    sorted_group = group[order]
    bounds = np.flatnonzero(np.diff(sorted_group)) + 1
    values_col = rows.columns[cfg.value_column]
    keys = list(series)
    for start, idx in zip(np.r_[0, bounds].tolist(), np.split(good[order], bounds), strict=True):
        s_id = int(sorted_group[start])
        channel = keys[s_id][0]
        values, kept, bad = _typed(cfg, values_col, idx, rows.text, channel, channel)
        if len(kept) + len(bad) < len(idx):
            has_value = np.zeros(len(idx), dtype=bool)
            has_value[kept] = True
            has_value[list(bad)] = True
            for pos in np.flatnonzero(~has_value).tolist():
                yield rows.bad(int(idx[pos]), "empty value", cfg.value_column)
        for pos, reason in bad.items():
            yield rows.bad(int(idx[pos]), reason, cfg.value_column)
        if kept.size:
            yield channel, ts[idx[kept]], values, series_tags[s_id]


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


def _typed(
    cfg: Layout, col: Any, idx: np.ndarray, text: bool, type_key: str, name: str
) -> tuple[Any, np.ndarray, dict[int, str]]:
    values, kept, bad = type_values(col, idx, text, cfg.column_types.get(type_key), name)
    if cfg.int64_only and isinstance(values, np.ndarray) and values.dtype == np.uint64:
        over = values > np.uint64(INT64_MAX)
        for j in np.flatnonzero(over).tolist():
            bad[int(kept[j])] = f"integer {int(values[j])} is above 2**63 - 1, which an Avro long cannot hold"
        values, kept = values[~over].astype(np.int64), kept[~over]
    return values, kept, bad


def _pylist(col: Any) -> list[Any]:
    return col if isinstance(col, list) else col.to_pylist()


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
        if not isinstance(k, str) or not isinstance(v, str) or not k:
            raise ValueError(f"tag {k!r:.40}: {v!r:.40} is not a non-empty text key with a text value")
    tags = dict(cell)
    return (tags or None), json.dumps(sorted(tags.items()))


def reader_for(fmt: str) -> Callable[[Any, str], Iterator[Rows | BadRow]]:
    if fmt == "csv":
        return csv_rows
    if fmt == "jsonl":
        return jsonl_rows
    if fmt == "parquet":
        return parquet_rows
    raise ValueError(f"no row reader for {fmt}")
