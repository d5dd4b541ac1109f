"""The README's quick start, as printed, runs on Prism through the plain ``DirectRunner``.

Its process gets a home whose Beam cache holds the Prism binary where the DirectRunner keeps the
one it downloads (``~/.apache_beam/cache/prism/bin``), as on a user's machine after the first run:
here the download cannot be made, and the DirectRunner would fall back to its Python runners.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from apache_beam.runners.portability.prism_runner import PrismJobServer
from apache_beam.version import __version__ as beam_version

from beam_nominal.server import LocalStore

ROOT = Path(__file__).resolve().parents[2]


def quick_start_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quick start: a Beam pipeline") :]
    block = re.search(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert block is not None
    return block.group(1)


@pytest.mark.timeout(300)
def test_readme_quick_start_runs_on_prism(tmp_path: Path, prism_binary: str) -> None:
    block = quick_start_block()
    assert "beam.Pipeline()" in block  # no runner named: what a Beam user types first
    version = f"v{beam_version}"
    url = PrismJobServer._construct_download_url(version, version, platform.system(), platform.machine())
    cache = tmp_path / "home" / ".apache_beam" / "cache" / "prism" / "bin"
    cache.mkdir(parents=True)
    # The release's archive holds the binary under the archive's name without ``.zip``.
    with zipfile.ZipFile(cache / os.path.basename(url), "w", zipfile.ZIP_STORED) as z:
        z.write(prism_binary, os.path.basename(url).removesuffix(".zip"))
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
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
