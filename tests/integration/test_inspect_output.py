"""``beam-nominal inspect --plot`` and ``--format csv|json`` on data a real local server stored."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from beam_nominal import cli
from beam_nominal.server import LocalServer
from beam_nominal.stream import NominalStream

T0 = 1_767_225_600_000_000_000
RID = "ri.test.inspect"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("inspect")
    with LocalServer(path) as server, NominalStream(server.target, dataset_rid=RID) as stream:
        ts = T0 + np.arange(200, dtype=np.int64) * 10**8
        for v in ("a", "b"):
            stream.enqueue_batch("speed", ts, np.sin(np.arange(200) / 20) + (v == "b"), tags={"vehicle": v})
            phases = ["taxi"] * 50 + ["climb"] * 80 + ["cruise"] * 70
            stream.enqueue_batch("phase", ts, phases, tags={"vehicle": v})
        stream.enqueue_batch("count", ts[:4], np.array([2**63 - 1, -(2**63), 0, 5], dtype=np.int64))
        stream.enqueue_batch("big", ts[:2], np.array([2**63, 2**64 - 1], dtype=np.uint64))
        stream.enqueue_batch("nan", ts[:2], np.array([np.nan, 1.5]))
        stream.enqueue_float_array("spectrum", T0, [1.0, 2.0, 3.0])
        stream.enqueue_float_array("spectrum", T0 + 10**9, [2.0, 4.0])
    yield path


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def test_plot_writes_a_png_with_one_panel_per_channel_asked_for(data_dir: Path, tmp_path: Path) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")  # the plot extra; .venv (make test) installs it
    channels = ["speed", "phase", "count", "spectrum"]
    png = tmp_path / "plot.png"
    args = ["inspect", "--data-dir", str(data_dir), "--dataset", RID, "--plot", str(png)]
    code, out = _run(*args, *(a for c in channels for a in ("--channel", c)))
    assert code == 0
    assert out.strip() == f"wrote {png}: 4 panels (speed, phase, count, spectrum)"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000
    image = plt.imread(png)
    height, width = image.shape[:2]
    assert width == 11 * 90 and height == round((1.2 + 1.9 * 4) * 90)  # figure size: 4 panels
    # Every panel holds data: coloured pixels (lines, state bands) in each quarter of the height.
    # Frames, grid lines and text are grey, so an empty panel has none.
    rgb = image[:, :, :3]
    coloured = (rgb.max(axis=2) - rgb.min(axis=2)) > 0.3
    top, bottom = int(height * 0.05), int(height * 0.93)
    for k in range(4):
        band = coloured[top + (bottom - top) * k // 4 : top + (bottom - top) * (k + 1) // 4]
        assert band.sum() > 100, f"panel {k} ({channels[k]}) shows no data"

    one = tmp_path / "one.png"
    code, out = _run("inspect", "--data-dir", str(data_dir), "--channel", "phase", "--plot", str(one))
    assert code == 0 and "1 panels (phase)" in out
    assert plt.imread(one).shape[0] == round((1.2 + 1.9) * 90)


def test_plot_needs_channels_and_names_a_missing_one(data_dir: Path, tmp_path: Path) -> None:
    assert _run("inspect", "--data-dir", str(data_dir), "--plot", str(tmp_path / "x.png"))[0] == 2
    code, _ = _run("inspect", "--data-dir", str(data_dir), "--channel", "nope", "--plot", str(tmp_path / "x.png"))
    assert code == 1 and not (tmp_path / "x.png").exists()


def test_json_output_holds_every_point_exactly(data_dir: Path) -> None:
    code, out = _run(
        "inspect", "--data-dir", str(data_dir), "--dataset", RID, "--format", "json",
        "--channel", "count", "--channel", "big", "--channel", "nan", "--channel", "spectrum",
    )  # fmt: skip
    assert code == 0
    docs = {d["channel"]: d for d in json.loads(out)}
    assert docs["count"]["type"] == "int64"
    assert docs["count"]["points"] == [
        [T0, 2**63 - 1],
        [T0 + 10**8, -(2**63)],
        [T0 + 2 * 10**8, 0],
        [T0 + 3 * 10**8, 5],
    ]
    assert docs["big"]["type"] == "uint64" and [v for _, v in docs["big"]["points"]] == [2**63, 2**64 - 1]
    assert [v for _, v in docs["nan"]["points"]] == ["nan", 1.5]
    assert docs["spectrum"]["points"] == [[T0, [1.0, 2.0, 3.0]], [T0 + 10**9, [2.0, 4.0]]]


def test_csv_output_lists_series_or_points(data_dir: Path) -> None:
    code, out = _run("inspect", "--data-dir", str(data_dir), "--dataset", RID, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["channel"], r["tags"]) for r in rows} >= {("speed", '{"vehicle": "a"}'), ("big", "{}")}
    speed_a = next(r for r in rows if r["channel"] == "speed" and r["tags"] == '{"vehicle": "a"}')
    assert (speed_a["type"], speed_a["count"], speed_a["first_ns"]) == ("double", "200", str(T0))
    code, out = _run("inspect", "--data-dir", str(data_dir), "--format", "csv", "--channel", "big")
    points = list(csv.DictReader(io.StringIO(out)))
    assert [(int(p["timestamp_ns"]), int(p["value"])) for p in points] == [(T0, 2**63), (T0 + 10**8, 2**64 - 1)]
