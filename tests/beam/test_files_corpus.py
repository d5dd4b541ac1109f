"""files_to_nominal over a corpus of file variants users bring: each lands exactly or fails loudly.

Every variant is generated here, written to disk and run through the real job (FnApiRunner, a
real local server on loopback); what landed is read back from the server's store and compared
value for value and type for type, and every failed row is checked by row, column and category.
No variant may land an altered value: a case expects either the exact points or failed rows.
"""

from __future__ import annotations

import bz2
import contextlib
import datetime
import glob
import gzip
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from beam_nominal.server import LocalServer
from pipelines import files_to_nominal

pytestmark = pytest.mark.timeout(120)

T = 1_767_225_600  # 2026-01-01T00:00:00Z
NS = T * 10**9
S = 10**9


@dataclass
class Case:
    name: str
    #: file name -> bytes (or a function writing the file at the path).
    files: dict[str, bytes | Callable[[Path], None]]
    args: list[str] = field(default_factory=list)
    #: channel -> (value type, [(timestamp ns, value)])
    points: dict[str, tuple[str, list[tuple[int, Any]]]] = field(default_factory=dict)
    #: (row, column, category) of each failed row; ("file", name) for a failed file
    failed: set[tuple[Any, ...]] = field(default_factory=set)
    code: int = 0
    #: text the summary must hold
    says: tuple[str, ...] = ()


def _wide(header: str, rows: list[str], nl: str = "\n") -> bytes:
    return (nl.join([header, *rows]) + nl).encode()


def _parquet(table: pa.Table) -> Callable[[Path], None]:
    return lambda path: pq.write_table(table, path)


def _gz(b: bytes) -> bytes:
    return gzip.compress(b, mtime=0)


BASIC = _wide("timestamp,a", [f"{T}.5,1.25", f"{T + 1},2.5"])
D = "double"
I64 = "int64"
U64 = "uint64"
STR = "string"

CASES = [
    Case(
        "comma_long_iso",
        {
            "in.csv": _wide(
                "channel,timestamp,value", ["t,2026-01-01T00:00:00Z,20.5", "t,2026-01-01T00:00:01.000000001Z,21"]
            )
        },
        points={"t": (D, [(NS, 20.5), (NS + S + 1, 21.0)])},
    ),
    Case(
        "semicolon_decimal_comma",
        {"in.csv": _wide("timestamp;a;b", [f"{T};12,5;3", f"{T + 1};-0,125;4"])},
        ["--layout", "wide", "--delimiter", ";", "--decimal", ","],
        points={"a": (D, [(NS, 12.5), (NS + S, -0.125)]), "b": (I64, [(NS, 3), (NS + S, 4)])},
    ),
    Case(
        "tab_delimited",
        {"in.tsv": _wide("timestamp\ta", [f"{T}\t1", f"{T + 1}\t2"])},
        ["--layout", "wide", "--delimiter", "tab"],
        points={"a": (I64, [(NS, 1), (NS + S, 2)])},
    ),
    Case(
        "pipe_delimited",
        {"in.csv": _wide("timestamp|a", [f"{T}|x", f"{T + 1}|y"])},
        ["--layout", "wide", "--delimiter", "|"],
        points={"a": (STR, [(NS, "x"), (NS + S, "y")])},
    ),
    Case(
        "quoted_decimal_comma",
        {"in.csv": _wide("timestamp,a", [f'{T},"12,5"', f'{T + 1},"1,0"'])},
        ["--layout", "wide", "--decimal", ","],
        points={"a": (D, [(NS, 12.5), (NS + S, 1.0)])},
    ),
    Case(
        "space_before_quote_is_a_failed_row",
        {"in.csv": _wide("timestamp,a", [f'{T}, "12,5"', f"{T + 1},3"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + S, 3)])},
        failed={(1, None, "field count")},
        code=2,
    ),
    Case(
        "bom_iso_first_column",
        {"in.csv": b"\xef\xbb\xbf" + _wide("timestamp,a", ["2026-01-01T00:00:00Z,1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1)])},
    ),
    Case(
        "bom_numeric_first_column",
        {"in.csv": b"\xef\xbb\xbf" + _wide("timestamp,a", [f"{T},1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1)])},
    ),
    Case(
        "latin1_without_encoding_fails_the_file",
        {"in.csv": "timestamp,Temp (°C)\n1767225600,1\n".encode("latin-1")},
        ["--layout", "wide"],
        failed={("file", "in.csv")},
        code=2,
        says=("--encoding",),
    ),
    Case(
        "latin1_with_encoding",
        {"in.csv": "timestamp,Temp (°C)\n1767225600,1\n".encode("latin-1")},
        ["--layout", "wide", "--encoding", "latin-1"],
        points={"Temp (°C)": (I64, [(NS, 1)])},
    ),
    Case(
        "cp1252_text",
        {"in.csv": "timestamp,note\n1767225600,5 €\n".encode("cp1252")},
        ["--layout", "wide", "--encoding", "cp1252"],
        points={"note": (STR, [(NS, "5 €")])},
    ),
    Case(
        "utf16_with_bom",
        {"in.csv": "timestamp,µ\n1767225600,0.5\n".encode("utf-16")},
        ["--layout", "wide", "--encoding", "utf-16"],
        points={"µ": (D, [(NS, 0.5)])},
    ),
    Case(
        "invalid_utf8_byte_is_a_failed_row",
        {"in.csv": b"timestamp,a\n1767225600,ok\n1767225601,b\xe9d\n1767225602,\xc3\xa9\n"},
        ["--layout", "wide"],
        points={"a": (STR, [(NS, "ok"), (NS + 2 * S, "é")])},
        failed={(2, None, "encoding")},
        code=2,
        says=("byte 0xE9 at byte offset 38",),
    ),
    Case(
        "gzip_csv",
        {"in.csv.gz": _gz(BASIC)},
        ["--layout", "wide"],
        points={"a": (D, [(NS + S // 2, 1.25), (NS + S, 2.5)])},
    ),
    Case(
        "bzip2_csv",
        {"in.csv.bz2": bz2.compress(BASIC)},
        ["--layout", "wide"],
        points={"a": (D, [(NS + S // 2, 1.25), (NS + S, 2.5)])},
    ),
    Case(
        "zstd_csv",
        {"in.csv.zst": zstandard.ZstdCompressor().compress(BASIC)},
        ["--layout", "wide"],
        points={"a": (D, [(NS + S // 2, 1.25), (NS + S, 2.5)])},
    ),
    Case(
        "gzip_jsonl",
        {"in.jsonl.gz": _gz(b'{"channel": "c", "timestamp": 1767225600000, "value": 7}\n')},
        points={"c": (I64, [(NS, 7)])},
    ),
    Case(
        "trailing_delimiter_every_line",
        {"in.csv": _wide("timestamp,a,b,", [f"{T},1,x,", f"{T + 1},2,y,"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1), (NS + S, 2)]), "b": (STR, [(NS, "x"), (NS + S, "y")])},
    ),
    Case(
        "trailing_delimiter_data_rows_only",
        {"in.csv": _wide("timestamp,a", [f"{T},1,", f"{T + 1},2,"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1), (NS + S, 2)])},
    ),
    Case(
        "data_under_a_trailing_delimiter_fails_its_row",
        {"in.csv": _wide("timestamp,a,", [f"{T},1,", f"{T + 1},2,9"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1)])},
        failed={(2, None, "field count")},
        code=2,
    ),
    Case(
        "crlf",
        {"in.csv": _wide("timestamp,a", [f"{T},1", f"{T + 1},x y"], nl="\r\n")},
        ["--layout", "wide", "--column-type", "a=string"],
        points={"a": (STR, [(NS, "1"), (NS + S, "x y")])},
    ),
    Case(
        "quoted_newline",
        {"in.csv": _wide("timestamp,note", [f'{T},"two\nlines"', f"{T + 1},one"])},
        ["--layout", "wide"],
        points={"note": (STR, [(NS, "two\nlines"), (NS + S, "one")])},
    ),
    Case(
        "units_in_headers",
        {"in.csv": _wide("timestamp,speed [m/s],Temp (°C)", [f"{T},1.5,20"])},
        ["--layout", "wide"],
        points={"speed [m/s]": (D, [(NS, 1.5)]), "Temp (°C)": (I64, [(NS, 20)])},
    ),
    Case(
        "epoch_s_int",
        {"in.csv": _wide("timestamp,a", [f"{T},1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1)])},
        says=("read as s since the epoch (inferred",),
    ),
    Case(
        "epoch_ms_int",
        {"in.csv": _wide("timestamp,a", [f"{T}123,1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 123 * 10**6, 1)])},
        says=("read as ms",),
    ),
    Case(
        "epoch_us_int",
        {"in.csv": _wide("timestamp,a", [f"{T}123456,1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 123_456_000, 1)])},
        says=("read as us",),
    ),
    Case(
        "epoch_ns_int",
        {"in.csv": _wide("timestamp,a", [f"{T}123456789,1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 123_456_789, 1)])},
        says=("read as ns",),
    ),
    Case(
        "epoch_s_decimal",
        {"in.csv": _wide("timestamp,a", [f"{T}.123457,1", f"{T}.123456789,2"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 123_457_000, 1), (NS + 123_456_789, 2)])},
    ),
    Case(
        "epoch_ms_decimal",
        {"in.csv": _wide("timestamp,a", [f"{T}123.456789,1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 123_456_789, 1)])},
    ),
    Case(
        "epoch_us_decimal",
        {"in.csv": _wide("timestamp,a", [f"{T}123456.7,1"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 123_456_700, 1)])},
    ),
    Case(
        "fraction_finer_than_ns_fails",
        {"in.csv": _wide("timestamp,a", [f"{T}.1234567891,1", f"{T}.5,2"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + S // 2, 2)])},
        failed={(1, "timestamp", "timestamp precision")},
        code=2,
    ),
    Case(
        "small_numbers_have_no_unit",
        {"in.csv": _wide("timestamp,a", ["0,1", "1,2"])},
        ["--layout", "wide"],
        failed={(1, "timestamp", "timestamp unit"), (2, "timestamp", "timestamp unit")},
        code=2,
        says=("--timestamp-unit",),
    ),
    Case(
        "small_numbers_with_a_unit",
        {"in.csv": _wide("timestamp,a", ["0,1", "1.5,2"])},
        ["--layout", "wide", "--timestamp-unit", "s"],
        points={"a": (I64, [(0, 1), (S + S // 2, 2)])},
    ),
    Case(
        "mixed_s_and_ms_refused",
        {"in.csv": _wide("timestamp,a", [f"{T},1", f"{T}000,2"])},
        ["--layout", "wide"],
        failed={(1, "timestamp", "timestamp unit"), (2, "timestamp", "timestamp unit")},
        code=2,
    ),
    Case(
        "iso_offsets",
        {"in.csv": _wide("timestamp,a", ["2026-01-01T01:00:00+01:00,1", "2025-12-31T19:00:00.5-0500,2"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1), (NS + S // 2, 2)])},
    ),
    Case(
        "iso_naive_without_timezone",
        {"in.csv": _wide("timestamp,a", ["2026-01-01T00:00:00,1", "2026-01-01T00:00:01Z,2"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS + S, 2)])},
        failed={(1, "timestamp", "timezone")},
        code=2,
        says=("--timezone",),
    ),
    Case(
        "iso_naive_with_named_zone",
        {
            "in.csv": _wide(
                "timestamp,a", ["2026-01-01 01:00:00.25,1", "2026-07-01T02:00:00,2", "2026-03-29T02:30:00,3"]
            )
        },
        ["--layout", "wide", "--timezone", "Europe/Berlin"],
        points={"a": (I64, [(NS + S // 4, 1), (1_782_864_000 * S, 2)])},
        failed={(3, "timestamp", "timezone")},
        code=2,
    ),
    Case(
        "iso_naive_with_offset_zone",
        {"in.csv": _wide("timestamp,a", ["2026-01-01T05:30:00,1"])},
        ["--layout", "wide", "--timezone", "+05:30"],
        points={"a": (I64, [(NS, 1)])},
    ),
    Case(
        "invalid_calendar_date_fails",
        {"in.csv": _wide("timestamp,a", ["2026-02-30T00:00:00Z,1", "2026-01-01T00:00:00Z,2"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 2)])},
        failed={(1, "timestamp", "timestamp")},
        code=2,
    ),
    Case(
        "parquet_naive_timestamp_without_timezone",
        {
            "in.parquet": _parquet(
                pa.table({"timestamp": pa.array([datetime.datetime(2026, 1, 1)], pa.timestamp("us")), "a": [1.5]})
            )
        },
        ["--layout", "wide"],
        failed={(1, "timestamp", "timezone")},
        code=2,
    ),
    Case(
        "parquet_naive_timestamp_with_timezone",
        {
            "in.parquet": _parquet(
                pa.table({"timestamp": pa.array([datetime.datetime(2026, 1, 1, 1)], pa.timestamp("us")), "a": [1.5]})
            )
        },
        ["--layout", "wide", "--timezone", "Europe/Paris"],
        points={"a": (D, [(NS, 1.5)])},
    ),
    Case(
        "parquet_aware_timestamp_ns",
        {
            "in.parquet": _parquet(
                pa.table(
                    {
                        "timestamp": pa.array([NS + 7], pa.timestamp("ns", tz="UTC")),
                        "a": pa.array([2**63 - 1], pa.int64()),
                    }
                )
            )
        },
        ["--layout", "wide"],
        points={"a": (I64, [(NS + 7, 2**63 - 1)])},
    ),
    Case(
        "json_decimal_timestamp_exact",
        {"in.jsonl": b'{"channel": "c", "timestamp": 1767225600.123457, "value": 1.5}\n'},
        points={"c": (D, [(NS + 123_457_000, 1.5)])},
    ),
    Case(
        "json_overflow_and_nan",
        {
            "in.jsonl": b'{"channel": "c", "timestamp": 1767225600, "value": 1e400}\n'
            b'{"channel": "c", "timestamp": 1767225601, "value": NaN}\n'
            b'{"channel": "c", "timestamp": 1767225602, "value": 0.1}\n'
        },
        points={"c": (D, [(NS + S, math.nan), (NS + 2 * S, 0.1)])},
        failed={(1, "value", "number")},
        code=2,
    ),
    Case(
        "ints_and_decimals_exact_as_double",
        {"in.csv": _wide("timestamp,x", [f"{T},1", f"{T + 1},2.5", f"{T + 2},{2**53}"])},
        ["--layout", "wide"],
        points={"x": (D, [(NS, 1.0), (NS + S, 2.5), (NS + 2 * S, float(2**53))])},
    ),
    Case(
        "ints_and_decimals_not_exact_fail_the_column",
        {"in.csv": _wide("timestamp,x,y", [f"{T},1,7", f"{T + 1},2.5,8", f"{T + 2},{2**53 + 1},9"])},
        ["--layout", "wide"],
        points={"y": (I64, [(NS, 7), (NS + S, 8), (NS + 2 * S, 9)])},
        failed={(1, "x", "column type"), (2, "x", "column type"), (3, "x", "column type")},
        code=2,
        says=("--column-type x=string",),
    ),
    Case(
        "column_type_string_keeps_them",
        {"in.csv": _wide("timestamp,x", [f"{T},1", f"{T + 1},2.50", f"{T + 2},{2**53 + 1}"])},
        ["--layout", "wide", "--column-type", "x=string"],
        points={"x": (STR, [(NS, "1"), (NS + S, "2.50"), (NS + 2 * S, str(2**53 + 1))])},
    ),
    Case(
        "integers_past_2_63",
        {
            "in.csv": _wide(
                "timestamp,u,i", [f"{T},{2**63},{-(2**63)}", f"{T + 1},{2**64 - 1},{2**63 - 1}", f"{T + 2},{2**64},0"]
            )
        },
        ["--layout", "wide"],
        points={
            "u": (U64, [(NS, 2**63), (NS + S, 2**64 - 1)]),
            "i": (I64, [(NS, -(2**63)), (NS + S, 2**63 - 1), (NS + 2 * S, 0)]),
        },
        failed={(3, "u", "number")},
        code=2,
    ),
    Case(
        "negative_and_past_2_63_fail_the_column",
        {"in.csv": _wide("timestamp,u", [f"{T},{2**63}", f"{T + 1},-1"])},
        ["--layout", "wide"],
        failed={(1, "u", "column type"), (2, "u", "column type")},
        code=2,
    ),
    Case(
        "nan_inf_spellings",
        {"in.csv": _wide("timestamp,x", [f"{T},nan", f"{T + 1},-Infinity", f"{T + 2},inf", f"{T + 3},0.5"])},
        ["--layout", "wide"],
        points={"x": (D, [(NS, math.nan), (NS + S, -math.inf), (NS + 2 * S, math.inf), (NS + 3 * S, 0.5)])},
    ),
    Case(
        "numbers_spelled_otherwise_fail",
        {
            "in.csv": _wide(
                "timestamp,x",
                [
                    f"{T},1e400",
                    f"{T + 1},1_000",
                    f"{T + 2},0x1F",
                    f'{T + 3},"1,000"',
                    f"{T + 4},1e-400",
                    f"{T + 5},2",
                    f"{T + 6},3",
                    f"{T + 7},4",
                    f"{T + 8},5",
                    f"{T + 9},6",
                    f"{T + 10},0e-5",
                ],
            )
        },
        ["--layout", "wide"],
        points={
            "x": (
                D,
                [
                    (NS + 5 * S, 2),
                    (NS + 6 * S, 3),
                    (NS + 7 * S, 4),
                    (NS + 8 * S, 5),
                    (NS + 9 * S, 6),
                    (NS + 10 * S, 0.0),
                ],
            )
        },
        failed={
            (1, "x", "number"),
            (2, "x", "type clash"),
            (3, "x", "type clash"),
            (4, "x", "type clash"),
            (5, "x", "number"),
        },
        code=2,
    ),
    Case(
        "text_column_keeps_number_like_text",
        {"in.csv": _wide("timestamp,x", [f"{T},1_000", f"{T + 1},0x1F", f"{T + 2},abc", f"{T + 3},007"])},
        ["--layout", "wide"],
        points={"x": (STR, [(NS, "1_000"), (NS + S, "0x1F"), (NS + 2 * S, "abc"), (NS + 3 * S, "007")])},
    ),
    Case(
        "empty_cells",
        {"in.csv": _wide("channel,timestamp,value", [f"a,{T},1", f"a,{T + 1},", f"b,{T},"])},
        points={"a": (I64, [(NS, 1)])},
        failed={(2, "value", "empty value"), (3, "value", "empty value")},
        code=2,
    ),
    Case(
        "empty_cells_wide_are_gaps",
        {"in.csv": _wide("timestamp,a,b", [f"{T},1,", f"{T + 1},,x"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1)]), "b": (STR, [(NS + S, "x")])},
    ),
    Case(
        "duplicated_header",
        {"in.csv": _wide("timestamp,a,a", [f"{T},1,2"])},
        ["--layout", "wide"],
        failed={("file", "in.csv")},
        code=2,
        says=("appears more than once",),
    ),
    Case(
        "ragged_rows",
        {"in.csv": _wide("timestamp,a,b", [f"{T},1,2", f"{T + 1},3", f"{T + 2},4,5,6", f"{T + 3},7,8"])},
        ["--layout", "wide"],
        points={"a": (I64, [(NS, 1), (NS + 3 * S, 7)]), "b": (I64, [(NS, 2), (NS + 3 * S, 8)])},
        failed={(2, None, "field count"), (3, None, "field count")},
        code=2,
    ),
    Case("empty_file", {"in.csv": b""}, failed={("file", "in.csv")}, code=2, says=("empty",)),
    Case("header_only", {"in.csv": b"timestamp,a\n"}, ["--layout", "wide"], says=("rows 0",)),
    Case(
        "glob_with_one_unreadable_file",
        {"a.csv.gz": _gz(BASIC), "b.csv.gz": _gz(BASIC)[:20]},
        ["--layout", "wide"],
        points={"a": (D, [(NS + S // 2, 1.25), (NS + S, 2.5)])},
        failed={("file", "b.csv.gz")},
        code=2,
    ),
    Case(
        "wide_file_without_layout_wide",
        {"in.csv": _wide("timestamp,a,b,c", [f"{T},1,2,3"])},
        failed={("file", "in.csv")},
        code=2,
        says=("--layout wide",),
    ),
    Case(
        "time_column_named_value",
        {"in.csv": _wide("value,a", [f"{T},1"])},
        ["--layout", "wide", "--timestamp-column", "value"],
        points={"a": (I64, [(NS, 1)])},
    ),
    Case(
        "time_column_named_timestamps",
        {"in.csv": _wide("timestamps,a", [f"{T},1"])},
        ["--layout", "wide", "--timestamp-column", "timestamps"],
        points={"a": (I64, [(NS, 1)])},
    ),
    Case("no_file_matches", {}, ["--layout", "wide"], failed={("file", "*.csv")}, code=2, says=("no file matches",)),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("files-corpus")) as srv:
        yield srv


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def test_the_corpus_has_forty_variants() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_file_variant_lands_exactly_or_fails_loudly(server: LocalServer, tmp_path: Path, case: Case) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name, content in case.files.items():
        if callable(content):
            content(data / name)
        else:
            (data / name).write_bytes(content)
    pattern = str(data / ("*.csv" if not case.files else "*"))
    rid = f"ri.corpus.{case.name}"
    failed = tmp_path / "failed" / "out"
    argv = ["--input", pattern, "--target", server.target, "--dataset-rid", rid, "--failed-output", str(failed)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = files_to_nominal.main([*argv, "--quiet", *case.args])
    text = out.getvalue()
    assert code == case.code, text
    for needle in case.says:
        assert needle in text, text
    landed = {s.channel: s for s in server.store.list_series(rid)}
    assert set(landed) == set(case.points), text
    for channel, (vtype, points) in case.points.items():
        assert landed[channel].value_type.value == vtype, (channel, text)
        table = server.store.read(rid, channel)
        got = list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
        points = sorted(points, key=lambda p: p[0])  # the store reads a series in time order
        assert len(got) == len(points) and all(
            g[0] == p[0] and _same(g[1], p[1] if vtype != D else float(p[1])) for g, p in zip(got, points, strict=True)
        ), (channel, got, points)
    records = [json.loads(x) for f in sorted(glob.glob(f"{failed}-rows-*")) for x in Path(f).read_text().splitlines()]
    seen: set[tuple[Any, ...]] = set()
    for r in records:
        if r["kind"] == "file":
            seen.add(("file", Path(r["file"]).name))
        else:
            seen.add((r["row"], r["column"], r["category"]))
            assert r["raw"] or r["category"] == "csv syntax", r
    assert seen == case.failed, text
