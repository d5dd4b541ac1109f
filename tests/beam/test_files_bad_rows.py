"""files_to_nominal as a production job: bad rows are isolated, integers stay exact, a summary tells all.

Each input holds good rows and several kinds of bad row; the job (FnApiRunner, a real local
server) must land every good point exactly and put every bad row, with its file and row number,
in the failed output, and its summary must count both.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_nominal.server import LocalServer
from pipelines import files_to_nominal

T0 = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z
S = 10**9
BIG = {"i.max": 2**63 - 1, "i.min": -(2**63), "u.low": 2**63, "u.max": 2**64 - 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("files-bad-rows")) as srv:
        yield srv


def _run(server: LocalServer, tmp_path: Path, rid: str, inputs: list[Path], *extra: str) -> tuple[int, str, list]:
    failed = tmp_path / "failed" / "out"
    argv = [a for p in inputs for a in ("--input", str(p))]
    argv += ["--target", server.target, "--dataset-rid", rid, "--failed-output", str(failed), "--quiet"]
    argv += ["--max-bad-rows", "100", *extra]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = files_to_nominal.main(argv)
    records = [
        json.loads(line) for f in sorted(glob.glob(f"{failed}*.jsonl")) for line in Path(f).read_text().splitlines()
    ]
    return code, out.getvalue(), records


def _summary_counts(text: str) -> dict[str, int]:
    def num(pattern: str) -> int:
        m = re.search(pattern, text)
        assert m, f"{pattern!r} not in summary:\n{text}"
        return int(m.group(1).replace(",", ""))

    return {
        "rows": num(r"rows ([\d,]+)\n"),
        "points": num(r"points written ([\d,]+)"),
        "series": num(r"in ([\d,]+) series"),
        "bad_rows": num(r"failed\s+([\d,]+) rows"),
        "failed_elements": num(r"files, ([\d,]+) elements"),
    }


def _points(server: LocalServer, rid: str, channel: str, tags: dict[str, str] | None = None) -> list[tuple]:
    table = server.store.read(rid, channel, tags)
    return list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))


def _type(server: LocalServer, rid: str, channel: str) -> str:
    return str(server.store.series_info(rid, channel).value_type.value)


def _bad_by_row(records: list[dict], name: str) -> dict[int, dict]:
    rows = {r["row"]: r for r in records if r["kind"] == "row" and r["file"].endswith(name)}
    return rows


def test_csv_bad_rows_are_isolated_and_integers_exact(server: LocalServer, tmp_path: Path) -> None:
    lines = [
        "channel,timestamp,value",
        f"temp,{T0},20.5",  # row 1
        f"temp,{T0 + S},21",  # 2
        f",{T0},1.0",  # 3: empty channel
        "temp,not-a-time,22.0",  # 4: bad timestamp among integer ones
        f"temp,{T0 + 2 * S},abc",  # 5: text among numbers: type clash
        f"temp,{T0 + 3 * S}",  # 6: too few fields
        f"temp,{T0 + 4 * S},",  # 7: empty value
        f"count,{T0},{2**64}",  # 8: integer beyond uint64
        f"count,{T0 + S},7",  # 9
        f"count,{T0 + 2 * S},-3",  # 10
        f"state,{T0},on",  # 11
        f"state,{T0 + S},off",  # 12
        "state,2024-01-01T00:00:02Z,1",  # 13: text channel keeps "1" as text; ISO timestamp
        f"temp,{2**63},1.0",  # 14: timestamp beyond 2262
        *(f"{ch},{T0 + i * S},{v}" for i, (ch, v) in enumerate(BIG.items())),  # 15-18
        f'"quoted,\nchannel",{T0},5',  # 19: a quoted newline: row 19 ends on line 21
        f"temp,{T0 + 5 * S},23.25",  # 20, line 22
    ]
    path = tmp_path / "in.csv"
    path.write_text("\n".join(lines) + "\n")
    code, out, records = _run(server, tmp_path, "ri.test.csv.bad", [path])
    assert code == 0, out
    rid = "ri.test.csv.bad"
    assert _points(server, rid, "temp") == [(T0, 20.5), (T0 + S, 21.0), (T0 + 5 * S, 23.25)]
    assert _type(server, rid, "temp") == "double"
    assert _points(server, rid, "count") == [(T0 + S, 7), (T0 + 2 * S, -3)]
    assert _type(server, rid, "count") == "int64"
    assert _points(server, rid, "state") == [(T0, "on"), (T0 + S, "off"), (T0 + 2 * S, "1")]
    assert _points(server, rid, "quoted,\nchannel") == [(T0, 5)]
    for i, (ch, v) in enumerate(BIG.items()):
        assert _points(server, rid, ch) == [(T0 + i * S, v)], ch
        assert _type(server, rid, ch) == ("uint64" if v >= 2**63 else "int64"), ch
    bad = _bad_by_row(records, "in.csv")
    assert set(bad) == {3, 4, 5, 6, 7, 8, 14}, bad
    assert "empty channel" in bad[3]["reason"]
    assert "not-a-time" in bad[4]["reason"] and bad[4]["column"] == "timestamp"
    assert "type clash" in bad[5]["reason"]
    assert "2 fields" in bad[6]["reason"]
    assert bad[7]["reason"] == "empty value"
    assert "outside" in bad[8]["reason"] and str(2**64) in bad[8]["reason"]
    assert "range" in bad[14]["reason"]
    assert all(r["line"] == r["row"] + 1 for r in bad.values())  # the header is line 1
    assert all(r["file"] == str(path) for r in bad.values())
    counts = _summary_counts(out)
    assert counts == {"rows": 20, "points": 13, "series": 8, "bad_rows": 7, "failed_elements": 0}, out


def test_jsonl_bad_rows_are_isolated_and_integers_exact(server: LocalServer, tmp_path: Path) -> None:
    good = [
        {"channel": "v", "timestamp": T0, "value": 1.5, "tags": {"unit": "V"}},
        {"channel": "v", "timestamp": T0 + 1, "value": 2, "tags": {"unit": "V"}},
        {"channel": "arr", "timestamp": T0, "value": [1.0, 2.5]},
        {"channel": "s", "timestamp": "2024-01-01T00:00:00.000000007Z", "value": "x"},
        *({"channel": ch, "timestamp": T0 + i, "value": v} for i, (ch, v) in enumerate(BIG.items())),
    ]
    text = [json.dumps(r) for r in good]
    bad_lines = [
        "{not json",  # not JSON
        "[1, 2, 3]",  # not an object
        json.dumps({"channel": None, "timestamp": T0, "value": 1.0}),  # null channel
        json.dumps({"channel": "v", "timestamp": "yesterday", "value": 1.0, "tags": {"unit": "V"}}),
        json.dumps({"channel": "v", "timestamp": T0 + 9, "value": "high", "tags": {"unit": "V"}}),  # clash
        json.dumps({"channel": "v", "timestamp": T0 + 10, "tags": {"unit": "V"}}),  # no value
        json.dumps({"channel": "v", "timestamp": T0 + 11, "value": 1.0, "tags": {"unit": 5}}),  # bad tag
        json.dumps({"channel": "arr", "timestamp": T0 + 1, "value": [1.0, "x"]}),  # mixed array
    ]
    lines = [*text[:2], "", *bad_lines, *text[2:]]  # a blank line too: skipped, but counted in lines
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rid = "ri.test.jsonl.bad"
    code, out, records = _run(server, tmp_path, rid, [path], "--tags-column", "tags")
    assert code == 0, out
    assert _points(server, rid, "v", {"unit": "V"}) == [(T0, 1.5), (T0 + 1, 2.0)]
    assert _points(server, rid, "arr") == [(T0, [1.0, 2.5])]
    assert _points(server, rid, "s") == [(T0 + 7, "x")]
    for i, (ch, v) in enumerate(BIG.items()):
        assert _points(server, rid, ch) == [(T0 + i, v)], ch
        assert _type(server, rid, ch) == ("uint64" if v >= 2**63 else "int64"), ch
    bad = _bad_by_row(records, "in.jsonl")
    assert set(bad) == set(range(3, 11)), bad
    assert {r["line"] for r in bad.values()} == set(range(4, 12))
    assert "not JSON" in bad[3]["reason"] and "not an object" in bad[4]["reason"]
    assert "empty channel" in bad[5]["reason"] and "yesterday" in bad[6]["reason"]
    assert "type clash" in bad[7]["reason"] and bad[8]["reason"] == "empty value"
    assert "tag" in bad[9]["reason"] and "array" in bad[10]["reason"]
    counts = _summary_counts(out)
    assert counts == {"rows": 16, "points": 8, "series": 7, "bad_rows": 8, "failed_elements": 0}, out


def test_parquet_bad_rows_are_isolated_and_integers_exact(server: LocalServer, tmp_path: Path) -> None:
    long = pa.table(
        {
            "channel": ["a", "a", None, "", "a", "a", "a", "a", "b"],
            "timestamp": [str(T0), str(T0 + 1), str(T0), str(T0), None, "soon", str(2**63), str(T0 + 3), str(T0)],
            "value": [1.5, 2.5, 3.0, 3.0, 3.0, 3.0, 3.0, None, 4.0],
            "tags": ['{"k": "1"}', '{"k": "1"}', None, None, None, None, None, None, "not json"],
        }
    )
    pq.write_table(long, tmp_path / "long.parquet")
    wide = pa.table(
        {
            "t": pa.array([T0, T0 + 1, -(2**63)], pa.int64()),
            "signed": pa.array([2**63 - 1, -(2**63), 0], pa.int64()),
            "unsigned": pa.array([2**63, 2**64 - 1, 1], pa.uint64()),
        }
    )
    pq.write_table(wide, tmp_path / "wide.parquet")
    rid = "ri.test.parquet.bad"
    code, out, records = _run(server, tmp_path, rid, [tmp_path / "long.parquet"], "--tags-column", "tags")
    assert code == 0, out
    assert _points(server, rid, "a", {"k": "1"}) == [(T0, 1.5), (T0 + 1, 2.5)]
    bad = _bad_by_row(records, "long.parquet")
    assert set(bad) == {3, 4, 5, 6, 7, 8, 9}, bad
    assert "empty channel" in bad[3]["reason"] and "empty channel" in bad[4]["reason"]
    assert bad[5]["reason"] == "empty timestamp" and "soon" in bad[6]["reason"]
    assert "range" in bad[7]["reason"] and bad[8]["reason"] == "empty value"
    assert "not JSON" in bad[9]["reason"]
    assert all(r["line"] is None for r in bad.values())
    assert _summary_counts(out) == {"rows": 9, "points": 2, "series": 1, "bad_rows": 7, "failed_elements": 0}

    rid = "ri.test.parquet.wide"
    code, out, records = _run(
        server, tmp_path / "w", rid, [tmp_path / "wide.parquet"], "--layout", "wide", "--timestamp-column", "t"
    )
    assert code == 0, out
    assert _points(server, rid, "signed") == [(T0, 2**63 - 1), (T0 + 1, -(2**63))]
    assert _points(server, rid, "unsigned") == [(T0, 2**63), (T0 + 1, 2**64 - 1)]
    assert (_type(server, rid, "signed"), _type(server, rid, "unsigned")) == ("int64", "uint64")
    assert [(r["row"], r["column"]) for r in records] == [(3, "t")]


def test_column_type_decides_where_inference_would_not(server: LocalServer, tmp_path: Path) -> None:
    # A wide CSV whose "code" column looks numeric but is text (leading zeros matter), and whose
    # "n" column must be uint64 although its values fit int64.
    (tmp_path / "w.csv").write_text(f"timestamp,code,n\n{T0},007,1\n{T0 + 1},010,2\n{T0 + 2},x1,-1\n")
    rid = "ri.test.coltype"
    code, out, records = _run(
        server,
        tmp_path,
        rid,
        [tmp_path / "w.csv"],
        "--layout",
        "wide",
        "--column-type",
        "code=string",
        "--column-type",
        "n=uint64",
    )
    assert code == 0, out
    assert _points(server, rid, "code") == [(T0, "007"), (T0 + 1, "010"), (T0 + 2, "x1")]
    assert _points(server, rid, "n") == [(T0, 1), (T0 + 1, 2)]
    assert _type(server, rid, "n") == "uint64"
    assert [(r["row"], r["column"]) for r in records] == [(3, "n")]
    assert "outside uint64" in records[0]["reason"]


def test_without_failed_output_bad_rows_make_the_job_exit_2(server: LocalServer, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text(f"channel,timestamp,value\nx,{T0},1\n,{T0},2\n")
    argv = ["--input", str(tmp_path / "a.csv"), "--target", server.target, "--dataset-rid", "ri.test.exit2"]
    assert files_to_nominal.main([*argv, "--quiet"]) == 2
    assert _points(server, "ri.test.exit2", "x") == [(T0, 1)]


def test_files_to_an_avro_prefix_and_back_into_a_server(server: LocalServer, tmp_path: Path) -> None:
    """files -> Avro prefix -> local server, one command each way, exactly."""
    rows = [f"temp,{T0 + i},{20 + i / 4}" for i in range(5)]
    rows += [f"state,{T0 + i},{s}" for i, s in enumerate(["on", "off"])]
    rows += [f"{ch},{T0 + i},{v}" for i, (ch, v) in enumerate(BIG.items())]
    (tmp_path / "in.csv").write_text("channel,timestamp,value\n" + "\n".join(rows) + "\n")
    prefix = tmp_path / "avro"
    rid = "ri.test.avro.roundtrip"
    code, out, _ = _run(server, tmp_path, rid, [tmp_path / "in.csv"], "--tag", "run=1")
    assert code == 0
    argv = ["--input", str(tmp_path / "in.csv"), "--target", f"{prefix}/", "--dataset-rid", rid, "--tag", "run=1"]
    argv += ["--failed-output", str(tmp_path / "avro-failed" / "out"), "--quiet", "--max-bad-rows", "2"]
    assert files_to_nominal.main(argv) == 0
    avro_bad = [json.loads(x) for f in (tmp_path / "avro-failed").glob("*") for x in f.read_text().splitlines()]
    # Avro's long is int64: the two uint64 values are bad rows there (they landed in the server above).
    assert sorted(r["row"] for r in avro_bad) == [10, 11]
    assert all("Avro long" in r["reason"] for r in avro_bad)
    files = list(prefix.glob("*.avro"))
    assert files
    rid2 = "ri.test.avro.back"
    code, out, _ = _run(server, tmp_path / "back", rid2, [prefix / "*.avro"])
    assert code == 0, out
    for ch in ("temp", "state", "i.max", "i.min"):
        assert _points(server, rid2, ch, {"run": "1"}) == _points(server, rid, ch, {"run": "1"}), ch
        assert (
            server.store.series_info(rid2, ch, {"run": "1"}).value_type
            == server.store.series_info(rid, ch, {"run": "1"}).value_type
        )
    assert _points(server, rid2, "i.min", {"run": "1"}) == [(T0 + 1, -(2**63))]


def test_progress_lines_report_rows_while_the_job_runs() -> None:
    import io as _io

    out = _io.StringIO()
    files_to_nominal.PROGRESS.__init__()  # type: ignore[misc]
    files_to_nominal.PROGRESS.add(rows=1234, bad=5, files=2)
    printer = files_to_nominal._ProgressPrinter(0.01, out)
    with printer:
        import time as _time

        deadline = _time.monotonic() + 10
        while "1,234 rows read" not in out.getvalue() and _time.monotonic() < deadline:
            printer._stop.wait(0.01)
    assert "1,234 rows read, 5 failed, 2 files done" in out.getvalue()


def test_csv_row_numbers_stay_exact_when_the_fast_reader_hands_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow reads the first blocks; from the block with a short row on, Python's csv does."""
    from pipelines import _read

    monkeypatch.setattr(_read, "CSV_BLOCK_BYTES", 16 << 10)
    lines = ["channel,timestamp,value"] + [f"c{i % 3},{T0 + i},{i}" for i in range(3000)]
    lines[2001] = "c0,oops"  # data row 2001 (line 2002): well past the first 16 KiB block
    lines.insert(2500, "")  # a blank line: data rows after it end one line later
    lines[2700] = f"c1,{T0 + 2699},not-a-number-at-all"  # row 2699 (after the blank line), line 2701
    path = tmp_path / "long.csv"
    path.write_text("\n".join(lines) + "\n")
    cfg = _read.Options(timestamp_unit="ns")
    batches = list(_read.csv_rows(lambda: path.open("rb"), str(path), cfg))
    rows = [b for b in batches if isinstance(b, _read.Rows)]
    scan = _read.Scan()
    for r in rows:
        _read.scan_rows(r, cfg, scan)
    pl = _read.plan(scan, cfg)
    assert len(rows) >= 3 and rows[0].rows[0] == 1  # a fast batch first, then the Python reader
    bad = [b for b in batches if isinstance(b, _read.BadRow)]
    bad += [e for r in rows for e in _read.elements(r, cfg, pl) if isinstance(e, _read.BadRow)]
    assert sorted((b.row, b.line) for b in bad) == [(2001, 2002), (2699, 2701)]
    got: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        for e in _read.elements(r, cfg, pl):
            if not isinstance(e, _read.BadRow):
                got.setdefault(e[0], []).extend(zip(e[1].tolist(), e[2].tolist(), strict=True))
    expected: dict[str, list[tuple[int, int]]] = {}
    for i in range(3000):
        if i not in (2000, 2698):
            expected.setdefault(f"c{i % 3}", []).append((T0 + i, i))
    assert {k: sorted(v) for k, v in got.items()} == expected


def test_failed_rows_fixed_in_place_replay_with_the_same_command(server: LocalServer, tmp_path: Path) -> None:
    """The failed-rows file holds each row's raw text: fixed and given as --input, its rows land."""
    (tmp_path / "in.csv").write_text(f"timestamp;a;b\n{T0};1,5;x\n{T0 + S};1e400;y\n{T0 + 2 * S};2,25;\n")
    rid = "ri.test.replay"
    args = ["--layout", "wide", "--delimiter", ";", "--decimal", ",", "--timestamp-unit", "ns"]
    code, out, records = _run(server, tmp_path, rid, [tmp_path / "in.csv"], *args)
    assert [(r["row"], r["column"], r["category"]) for r in records] == [(2, "a", "number")], out
    # A wide row's failed cell keeps the timestamp and that cell: the replay writes only it.
    assert records[0]["raw"] == f"{T0 + S};1e400" and records[0]["header"] == "timestamp;a"
    failed = next((tmp_path / "failed").glob("out-rows-*.failed.jsonl"))
    failed.write_text(failed.read_text().replace("1e400", "3,5"))
    code, out, records = _run(server, tmp_path / "again", rid, [failed], *args)
    assert code == 0 and records == [], out
    assert _points(server, rid, "a") == [(T0, 1.5), (T0 + S, 3.5), (T0 + 2 * S, 2.25)]
    assert _points(server, rid, "b") == [(T0, "x"), (T0 + S, "y")]
