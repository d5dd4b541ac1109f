"""The README's quick start, as printed, runs on Prism through the plain ``DirectRunner``.

Its process gets a home whose Beam cache holds the Prism binary where the DirectRunner keeps the
one it downloads (``~/.apache_beam/cache/prism/bin``), as on a user's machine after the first run:
here the download cannot be made, and the DirectRunner would fall back to its Python runners.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _readme import readme_block

from beam_nominal.server import LocalStore

ROOT = Path(__file__).resolve().parents[2]


def quick_start_block() -> str:
    return readme_block("## Quick start: a Beam pipeline", "python")


@pytest.mark.timeout(300)
def test_readme_quick_start_runs_on_prism(tmp_path: Path, prism_home: Path) -> None:
    block = quick_start_block()
    assert "beam.Pipeline()" in block  # no runner named: what a Beam user types first
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "HOME": str(prism_home), "PYTHONPATH": str(ROOT)}
    # INFO logging only to see which runner ran it; the block itself runs unchanged.
    runner = "import logging, sys; logging.basicConfig(level=logging.INFO); exec(sys.stdin.read())"
    done = subprocess.run(
        [sys.executable, "-c", runner], input=block, cwd=work, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Running pipeline with PrismRunner" in done.stderr, done.stderr[-4000:]
    assert "Falling back" not in done.stderr and "pipeline done!" in done.stderr, done.stderr[-4000:]
    assert done.stdout == ""  # no failed element printed
    store = LocalStore(work / "nominal-data")
    rpm = store.read("ri.beam-nominal.local.dataset", "engine.rpm")
    assert rpm.column("timestamp").to_pylist() == [1_767_225_600_000_000_000]
    assert rpm.column("value").to_pylist() == [2400] and rpm.schema.field("value").type == "int64"
    temp = store.read("ri.beam-nominal.local.dataset", "engine.temp", {"unit": "C"})
    assert temp.column("timestamp").to_pylist() == [1_767_225_600_000_000_000]
    assert temp.column("value").to_pylist() == [81.5]
