"""The shipped jobs: files_to_nominal on real CSV/Parquet/JSON-lines/Avro files, synthetic_telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_nominal.server import LocalServer
from pipelines import files_to_nominal, synthetic_telemetry

T0 = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("beam-pipelines")) as srv:
        yield srv


def _points(server: LocalServer, rid: str, channel: str, tags: dict[str, str] | None = None) -> list[tuple]:
    table = server.store.read(rid, channel, tags)
    return list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))


def test_csv_long_layout_with_iso_timestamps_and_a_tag(server: LocalServer, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text(
        "channel,timestamp,value\n"
        "temp,2024-01-01T00:00:00.000000001Z,20.5\n"
        "temp,2024-01-01T00:00:01Z,21\n"
        "rpm,2024-01-01T00:00:00Z,2400\n"
    )
    (tmp_path / "b.csv").write_text("channel,timestamp,value\nrpm,2024-01-01T01:00:00+01:00,2500\n")
    rid = "ri.test.csv"
    assert files_to_nominal.main(
        ["--input", str(tmp_path / "*.csv"), "--target", server.target, "--dataset-rid", rid, "--tag", "run=7"]
    ) == 0
    assert _points(server, rid, "temp", {"run": "7"}) == [(T0 + 1, 20.5), (T0 + 10**9, 21.0)]
    assert _points(server, rid, "rpm", {"run": "7"}) == [(T0, 2400), (T0, 2500)]
    assert server.store.series_info(rid, "rpm", {"run": "7"}).value_type.value == "int64"


def test_parquet_and_csv_wide_layout_with_gaps_and_millisecond_timestamps(server: LocalServer, tmp_path: Path) -> None:
    table = pa.table(
        {
            "t_ms": pa.array([1_704_067_200_000, 1_704_067_200_001, 1_704_067_200_002], pa.int64()),
            "alt": [100.0, None, 102.5],
            "phase": ["taxi", "takeoff", None],
        }
    )
    pq.write_table(table, tmp_path / "wide.parquet")
    (tmp_path / "wide.csv").write_text("t_ms,alt,phase\n1704067200003,103.25,cruise\n1704067200004,,\n")
    rid = "ri.test.parquet"
    args = ["--input", str(tmp_path / "*.parquet"), "--input", str(tmp_path / "*.csv")]
    args += ["--layout", "wide", "--timestamp-column", "t_ms"]
    args += ["--timestamp-unit", "ms", "--target", server.target, "--dataset-rid", rid]
    assert files_to_nominal.main(args) == 0
    assert _points(server, rid, "alt") == [(T0, 100.0), (T0 + 2 * 10**6, 102.5), (T0 + 3 * 10**6, 103.25)]
    assert _points(server, rid, "phase") == [(T0, "taxi"), (T0 + 10**6, "takeoff"), (T0 + 3 * 10**6, "cruise")]


def test_jsonl_long_layout_with_tags_column_and_avro_stream_files(server: LocalServer, tmp_path: Path) -> None:
    rows = [
        {"channel": "v", "timestamp": T0 + 5, "value": 1.25, "tags": json.dumps({"unit": "V"})},
        {"channel": "v", "timestamp": T0 + 6, "value": 1.5, "tags": json.dumps({"unit": "V"})},
    ]
    (tmp_path / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from beam_nominal.stream import NominalStream

    avro = tmp_path / "stream.avro"
    with NominalStream(str(avro), dataset_rid="ri.any") as stream:
        stream.enqueue_batch("av.f", np.array([T0, T0 + 1]), np.array([0.5, 0.25]), {"src": "avro"})
        stream.enqueue_float_array("av.arr", T0, [1.0, 2.0])
        stream.enqueue("av.s", T0, "hello")
        stream.enqueue("av.i", T0, 2**62 + 1)
    rid = "ri.test.jsonl"
    args = ["--input", str(tmp_path / "*.jsonl"), "--input", str(avro), "--tags-column", "tags"]
    args += ["--target", server.target, "--dataset-rid", rid]
    assert files_to_nominal.main(args) == 0
    assert _points(server, rid, "v", {"unit": "V"}) == [(T0 + 5, 1.25), (T0 + 6, 1.5)]
    assert _points(server, rid, "av.f", {"src": "avro"}) == [(T0, 0.5), (T0 + 1, 0.25)]
    assert _points(server, rid, "av.arr") == [(T0, [1.0, 2.0])]
    assert _points(server, rid, "av.s") == [(T0, "hello")]
    assert _points(server, rid, "av.i") == [(T0, 2**62 + 1)]


def test_files_to_nominal_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        files_to_nominal.parse_args(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--layout", "--timestamp-unit", "--timestamp-column", "--format", "--tag"):
        assert option in out


def test_synthetic_telemetry_writes_and_verifies_what_it_generated(tmp_path: Path) -> None:
    data = tmp_path / "nominal-data"
    rid = "ri.test.synthetic"
    code = synthetic_telemetry.main(
        ["--channels", "40", "--seconds", "30", "--vehicles", "2", "--data-dir", str(data), "--dataset-rid", rid]
    )
    assert code == 0
    from beam_nominal.server import LocalStore

    infos = {(s.channel, s.tags["vehicle"]): s for s in LocalStore(data).list_series(rid)}
    # Counts derived here from the plan's rules, not from the generator.
    plan = synthetic_telemetry.channel_plan(40)
    assert len(infos) == 2 * len(plan)
    gapped = [c for c in plan if c.gap]
    assert gapped, "the plan must contain gaps"
    for ch in plan:
        lost = (min(ch.gap[1], 30) - min(ch.gap[0], 30)) if ch.gap else 0  # a gap may outlast the run
        assert infos[(ch.name, "sim-1")].count == ch.rate * (30 - lost), ch
    kinds = {infos[(c.name, "sim-0")].value_type.value for c in plan}
    assert kinds == {"double", "int64", "string", "double_array"}
    phases = set(LocalStore(data).read(rid, "flight.phase", {"vehicle": "sim-0"}).column("value").to_pylist())
    assert phases == set(synthetic_telemetry.FLIGHT_PHASES)


def test_progress_lines_move_under_python_m_for_one_file(tmp_path: Path) -> None:
    """Under ``python -m`` the readers the runner unpickles count into the progress line's counter."""
    import subprocess
    import sys

    rows = 300_000
    (tmp_path / "big.csv").write_text("timestamp,a\n" + "".join(f"{T0 + i},{i}\n" for i in range(rows)))
    cmd = [sys.executable, "-m", "pipelines.files_to_nominal", "--input", str(tmp_path / "big.csv")]
    cmd += ["--layout", "wide", "--data-dir", str(tmp_path / "data"), "--progress-every", "0.1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("files_to_nominal: ")]
    moving = [x for x in lines if " 0 rows scanned" not in x or " 0 rows read" not in x]
    assert moving, done.stderr[-2000:]
    assert f"rows {rows:,}" in done.stdout


def test_a_target_without_a_dataset_rid_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        files_to_nominal.parse_args(["--input", "x.csv", "--target", "https://example.invalid/api"])
    assert info.value.code == 2
    assert "needs --dataset-rid" in capsys.readouterr().err
