"""The docs check of docs/runners.md: every ```python block that starts with ``# run here`` runs,
in a fresh process in an empty directory, with this checkout's beam_nominal, and must exit 0 (the
blocks assert what they read back)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "runners.md"
BLOCKS = [
    b for b in re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M) if b.startswith("# run here")
]


def test_the_doc_has_runnable_blocks_and_the_readme_links_it() -> None:
    assert len(BLOCKS) >= 2
    assert "docs/runners.md" in (ROOT / "README.md").read_text()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_runnable_block_of_runners_md_runs(block: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{block}\n--- stderr ---\n{done.stderr[-4000:]}"
