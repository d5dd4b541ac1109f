"""WriteToNominal in Beam YAML pipelines on Prism: ``apache_beam.yaml.main`` with
``--runner=PrismRunner`` (its workers LOOPBACK, in the launching process) into a real local
server that requires a token, read back exactly with the failed row on the ``error_handling``
output; and README.md's YAML example as printed, with no runner named, which Beam's
DirectRunner runs on Prism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _yaml_run import CSV_WANT, README_WANT, TOKEN_VAR, csv_pipeline, read_back, readme_yaml, run_yaml

import beam_nominal.yaml as nominal_yaml
from beam_nominal.server import LocalServer, LocalStore

RID = "ri.yaml.prism"
TOKEN = "yaml-prism-token"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with LocalServer(tmp_path / "data", port=0, token=TOKEN) as srv:
        yield srv


def test_csv_rows_land_exactly_on_prism(server: Any, tmp_path: Path, prism_binary: str) -> None:
    providers = f"providers:\n  - include: {nominal_yaml.PROVIDERS}\n"
    pipeline = csv_pipeline(tmp_path, server.target, RID, providers)
    done = run_yaml(
        pipeline, tmp_path, "--runner=PrismRunner", f"--prism_location={prism_binary}", env={TOKEN_VAR: TOKEN}
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Job state changed to DONE" in done.stderr, done.stderr[-4000:]
    assert read_back(server.store, RID) == CSV_WANT
    lines = [json.loads(x) for f in sorted(tmp_path.glob("errors.json*")) for x in f.read_text().splitlines()]
    assert [e["element"] for e in lines] == [["2026-01-01T00:00:02", 2402.5, 9007199254740997, "B"]]
    assert "has no timezone" in lines[0]["msg"]


def test_the_readme_yaml_example_runs_on_prism_with_no_runner_named(tmp_path: Path, prism_home: Path) -> None:
    """The DirectRunner takes Prism from Beam's cache in the home directory."""
    work = tmp_path / "work"
    work.mkdir()
    done = run_yaml(readme_yaml(), work, env={"HOME": str(prism_home)})
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Running pipeline with PrismRunner" in done.stderr and "Falling back" not in done.stderr, done.stderr[-4000:]
    got = read_back(LocalStore(work / "nominal-data"), "ri.beam-nominal.local.dataset")
    assert got == README_WANT
