"""The checked-in generated stubs must match what ``make proto`` produces from proto/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_are_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"stale stubs; run `make proto`\n{proc.stdout}\n{proc.stderr}"
