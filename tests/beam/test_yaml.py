"""WriteToNominal in Beam YAML pipelines, run as a user runs them
(``python -m apache_beam.yaml.main --yaml_pipeline_file=...``, FnApiRunner) into a real local
server that requires a token, read back exactly: a CSV's wide rows with tags and a prefix, the
row it cannot write on the ``error_handling`` output (written to a JSON file); both provider
forms (the package's ``providers.yaml`` included, the function named); a failing row without
``error_handling`` fails the pipeline saying how to route it; a token written in the YAML is
refused; README.md's YAML example as printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _yaml_run import CSV_WANT, README_WANT, T0, TOKEN_VAR, csv_pipeline, read_back, readme_yaml, run_yaml

import beam_nominal.yaml as nominal_yaml
from beam_nominal.server import LocalServer, LocalStore

RID = "ri.yaml.beam"
TOKEN = "yaml-test-token"
FN_API = "--runner=FnApiRunner"

INLINE = """
providers:
  - type: python
    config: {}
    transforms:
      WriteToNominal: beam_nominal.yaml.write_to_nominal
"""


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with LocalServer(tmp_path / "data", port=0, token=TOKEN) as srv:
        yield srv


def _errors(work: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(work.glob("errors.json*")) for line in f.read_text().splitlines()]


@pytest.mark.parametrize("form", ["include", "inline"])
def test_csv_rows_land_exactly_and_the_naive_row_goes_to_errors(server: Any, tmp_path: Path, form: str) -> None:
    providers = f"providers:\n  - include: {nominal_yaml.PROVIDERS}\n" if form == "include" else INLINE
    pipeline = csv_pipeline(tmp_path, server.target, RID, providers)
    done = run_yaml(pipeline, tmp_path, FN_API, env={TOKEN_VAR: TOKEN})
    assert done.returncode == 0, done.stderr[-4000:]
    assert read_back(server.store, RID) == CSV_WANT
    (error,) = _errors(tmp_path)
    assert error["element"] == ["2026-01-01T00:00:02", 2402.5, 9007199254740997, "B"]
    assert error["msg"].startswith("ElementError: ") and "has no timezone" in error["msg"], error
    assert "timezone='UTC'" in error["msg"]


def test_without_error_handling_a_bad_row_fails_the_pipeline_naming_the_fix(server: Any, tmp_path: Path) -> None:
    pipeline = f"""
pipeline:
  type: chain
  transforms:
    - type: Create
      config:
        elements:
          - {{t: {T0}, rpm: 1.5}}
          - {{t: "2026-01-01T00:00:01", rpm: 2.5}}
    - type: WriteToNominal
      config: {{target: {server.target}, dataset_rid: {RID}, token_env: {TOKEN_VAR}}}
{INLINE}"""
    done = run_yaml(pipeline, tmp_path, FN_API, env={TOKEN_VAR: TOKEN})
    assert done.returncode != 0
    assert "has no timezone" in done.stderr and "add error_handling: {output: <name>}" in done.stderr, done.stderr[
        -4000:
    ]


def _one_row(sink_config: str) -> str:
    """A pipeline of one row into WriteToNominal configured by ``sink_config`` (YAML flow
    mapping items), with the provider inline."""
    return f"""
pipeline:
  type: chain
  transforms:
    - type: Create
      config: {{elements: [{{t: {T0}, rpm: 1.5}}]}}
    - type: WriteToNominal
      config: {{{sink_config}}}
{INLINE}"""


def test_a_token_in_the_yaml_is_refused(tmp_path: Path) -> None:
    pipeline = _one_row(f'target: "grpc://127.0.0.1:1", dataset_rid: {RID}, token: "abc123-literal"')
    done = run_yaml(pipeline, tmp_path, FN_API)
    assert done.returncode != 0
    assert "takes no token" in done.stderr and "token_env" in done.stderr, done.stderr[-4000:]


def test_an_unset_token_variable_fails_naming_it(server: Any, tmp_path: Path) -> None:
    pipeline = _one_row(f"target: {server.target}, dataset_rid: {RID}, token_env: BEAM_NOMINAL_TEST_UNSET_VAR")
    done = run_yaml(pipeline, tmp_path, FN_API, env={"BEAM_NOMINAL_TEST_UNSET_VAR": ""})
    assert done.returncode != 0
    assert "environment variable BEAM_NOMINAL_TEST_UNSET_VAR is not set" in done.stderr, done.stderr[-4000:]


def test_config_checks_at_construction() -> None:
    with pytest.raises(ValueError, match="token_env or token_secret, not both"):
        nominal_yaml.write_to_nominal(target="grpc://h:1", dataset_rid=RID, token_env="A", token_secret="type:x")
    with pytest.raises(ValueError, match="is not a Beam secret string"):
        nominal_yaml.write_to_nominal(target="grpc://h:1", dataset_rid=RID, token_secret="projects/p/secrets/s")
    with pytest.raises(ValueError, match=r"error_handling must be \{output: <name>\}"):
        nominal_yaml.write_to_nominal(target="grpc://h:1", dataset_rid=RID, error_handling={"out": "x"})
    with pytest.raises(ValueError, match="channel_fields is empty"):
        nominal_yaml.write_to_nominal(target="grpc://h:1", dataset_rid=RID, channel_fields=[])
    secret = nominal_yaml.write_to_nominal(
        target="grpc://h:1", dataset_rid=RID, token_secret="type:GcpSecret;version_name:projects/p/secrets/s/versions/1"
    )
    assert "GcpSecret" not in repr(secret)


def test_the_readme_yaml_example_runs_as_printed(tmp_path: Path) -> None:
    """README.md's example as printed (Create, embedded local server), then its data read back."""
    done = run_yaml(readme_yaml(), tmp_path, FN_API)
    assert done.returncode == 0, done.stderr[-4000:]
    got = read_back(LocalStore(tmp_path / "nominal-data"), "ri.beam-nominal.local.dataset")
    assert got == README_WANT
