"""Running a Beam YAML pipeline as a user does: ``python -m apache_beam.yaml.main`` in its own
process, importing this checkout; and reading back what it wrote to the local server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _readme import readme_block

ROOT = Path(__file__).resolve().parents[1]
TOKEN_VAR = "BEAM_NOMINAL_TEST_TOKEN"


def run_yaml(
    pipeline: str, work: Path, *options: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run ``pipeline`` (YAML text) from ``work``; returns the finished process."""
    path = work / "pipeline.yaml"
    path.write_text(pipeline)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    environ = {**os.environ, "PYTHONPATH": pythonpath, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "apache_beam.yaml.main", f"--yaml_pipeline_file={path}", *options],
        cwd=work,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_back(store: Any, rid: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[Any]]]:
    """Every series of ``rid``: ``{(channel, tags): (value type, [(timestamp, value)])}``."""
    out = {}
    for info in store.list_series(rid):
        table = store.read(rid, info.channel, info.tags).to_pydict()
        key = (info.channel, tuple(sorted(dict(info.tags).items())))
        out[key] = (info.value_type.value, sorted(zip(table["timestamp"], table["value"], strict=True)))
    return out


CSV = """time,rpm,count,mode
2026-01-01T00:00:00Z,2400.5,9007199254740993,A
2026-01-01T00:00:01Z,2401.5,9007199254740995,B
2026-01-01T00:00:02,2402.5,9007199254740997,B
2026-01-01T00:00:03+01:00,2403.5,-9223372036854775808,A
"""
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
S = 1_000_000_000

#: What CSV lands as (its naive third row goes to the errors), with tag_fields [mode] and the
#: prefix "engine.": int64 beyond 2**53 and int64's minimum exact.
CSV_WANT = {
    ("engine.rpm", (("mode", "A"),)): ("double", [(T0 - 3597 * S, 2403.5), (T0, 2400.5)]),
    ("engine.rpm", (("mode", "B"),)): ("double", [(T0 + S, 2401.5)]),
    ("engine.count", (("mode", "A"),)): ("int64", [(T0 - 3597 * S, -(2**63)), (T0, 9007199254740993)]),
    ("engine.count", (("mode", "B"),)): ("int64", [(T0 + S, 9007199254740995)]),
}


def csv_pipeline(work: Path, target: str, rid: str, providers: str) -> str:
    """CSV → WriteToNominal (token from TOKEN_VAR, errors to a JSON file) with ``providers``."""
    (work / "in.csv").write_text(CSV)
    return f"""
pipeline:
  transforms:
    - type: ReadFromCsv
      config: {{path: {work / "in.csv"}}}
    - type: WriteToNominal
      input: ReadFromCsv
      config:
        target: {target}
        dataset_rid: {rid}
        token_env: {TOKEN_VAR}
        tag_fields: [mode]
        channel_prefix: engine.
        error_handling: {{output: errors}}
    - type: WriteToJson
      input: WriteToNominal.errors
      config: {{path: {work / "errors.json"}}}
{providers}
"""


def readme_yaml() -> str:
    """README.md's Beam YAML example, as printed."""
    return readme_block("## Beam YAML", "yaml")


#: What README.md's example lands as, in the embedded server's default dataset.
README_WANT = {
    ("engine.rpm", (("mode", "taxi"),)): ("double", [(T0, 2400.5)]),
    ("engine.rpm", (("mode", "climb"),)): ("double", [(T0 + S, 2650.0)]),
    ("engine.oil", (("mode", "taxi"),)): ("int64", [(T0, 9007199254740993)]),
}
