"""The Dataflow Flex Template of files_to_nominal (pipelines/templates/files_to_nominal/) agrees
with the pipeline: every metadata parameter is an option of its command line under the same name,
the required ones are required, each parameter's regexes accept the examples its help text
documents (which the command line takes as given) and refuse what it cannot take; the Dockerfile's
Beam is within pyproject.toml's range and its entry is the launcher's file. Nothing here builds
or runs the template (no cloud): docs/runners.md, "Flex Template"."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from pipelines import files_to_nominal

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "pipelines" / "templates" / "files_to_nominal"
METADATA = json.loads((TEMPLATE / "metadata.json").read_text())
PARAMETERS = {p["name"]: p for p in METADATA["parameters"]}
#: What every run of the template must name (the workers are remote: no embedded server).
REQUIRED = {"input", "target", "dataset_rid"}
BASE = ["--input=gs://b/x.csv", "--target=https://api.example/api", "--dataset_rid=ri.x"]


def _options() -> dict[str, Any]:
    """The command line's actions by option string."""
    return {s: a for a in files_to_nominal.make_parser()._actions for s in a.option_strings}


def _examples(parameter: dict[str, Any]) -> list[str]:
    text = parameter["helpText"]
    assert re.search(r"Examples?: `", text), f"{parameter['name']}: its helpText documents no example"
    return re.findall(r"`([^`]+)`", text[re.search(r"Examples?: ", text).end() :])  # type: ignore[union-attr]


def _matches(parameter: dict[str, Any], value: str) -> bool:
    return all(re.fullmatch(r, value) for r in parameter.get("regexes", []))


def test_metadata_has_what_dataflow_reads() -> None:
    assert METADATA["name"] and METADATA["description"]
    for p in METADATA["parameters"]:
        assert set(p) <= {"name", "label", "helpText", "isOptional", "regexes"}, p
        assert p["name"] and p["label"] and p["helpText"] and isinstance(p["isOptional"], bool), p
        assert p["regexes"] and all(re.compile(r) for r in p["regexes"]), p
    assert len(PARAMETERS) == len(METADATA["parameters"]), "a parameter is named twice"


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_every_parameter_is_an_option_of_the_same_name(name: str) -> None:
    action = _options().get(f"--{name}")
    assert action is not None, f"metadata parameter {name} is no option of files_to_nominal"
    assert action.dest == name


def test_required_parameters_are_required() -> None:
    required = {n for n, p in PARAMETERS.items() if not p["isOptional"]}
    assert required == REQUIRED
    for action in files_to_nominal.make_parser()._actions:
        if action.required:
            assert action.dest in required, f"{action.dest} is required by the command line, optional in the template"
    # What the command line alone does not require, the template's entry does.
    with pytest.raises(SystemExit):
        files_to_nominal.launch(["--input=gs://b/x.csv"])
    with pytest.raises(SystemExit):
        files_to_nominal.launch(["--input=gs://b/x.csv", "--target=https://api.example/api"])


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_documented_examples_pass_the_regexes_and_the_command_line(name: str) -> None:
    parameter = PARAMETERS[name]
    for example in _examples(parameter):
        assert _matches(parameter, example), f"{name}: regexes {parameter['regexes']} refuse its example {example!r}"
        argv = [a for a in BASE if not a.startswith(f"--{name}=")] + [f"--{name}={example}"]
        args, rest = files_to_nominal.parse_args(argv)
        assert rest == []
        value = getattr(args, name)
        assert value in (example, [example]), (name, value)


@pytest.mark.parametrize("name", sorted(n for n in PARAMETERS if getattr(_options().get(f"--{n}"), "choices", None)))
def test_choice_regexes_accept_exactly_the_choices(name: str) -> None:
    parameter, choices = PARAMETERS[name], _options()[f"--{name}"].choices
    assert all(_matches(parameter, c) for c in choices)
    assert set(_examples(parameter)) <= set(choices)
    for other in ("", "other", "CSV", choices[0] + " "):
        assert not _matches(parameter, other), (name, other)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("input", "/local/path/*.csv"),  # the workers are remote: no local paths
        ("target", "api.example/api"),
        ("target", "gs://bucket/file.avro"),
        ("dataset_rid", "catalog.main.dataset.1"),
        ("token_secret", "nominal_live_abc123"),  # a token itself, not where to read one
        ("token_secret", "env:"),
        ("column_type", "rpm=float"),
        ("tag", "vehicle"),
        ("timestamp_unit", "minutes"),
        ("failed_output", "/tmp/failed"),
    ],
)
def test_regexes_refuse_what_the_job_cannot_take(name: str, value: str) -> None:
    assert not _matches(PARAMETERS[name], value)


def test_the_dockerfile_builds_the_launcher_on_pyprojects_beam() -> None:
    dockerfile = (TEMPLATE / "Dockerfile").read_text()
    (version,) = re.findall(r"^ARG BEAM_VERSION=(\S+)$", dockerfile, flags=re.M)
    # pyproject.toml's dependency line (tomllib is not in Python 3.10, which the project supports).
    (line,) = re.findall(r'^\s*"(apache-beam[<>=!,.\d]+)",$', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    beam = Requirement(line)
    assert beam.specifier.contains(version), f"the image's Beam {version} is outside pyproject's {beam.specifier}"
    assert "FROM apache/beam_python3.11_sdk:${BEAM_VERSION}" in dockerfile
    assert "python311-template-launcher-base" in dockerfile  # the launcher of the image's Python
    assert '"apache-beam[gcp]==${BEAM_VERSION}"' in dockerfile  # pip keeps the image's Beam
    (entry,) = re.findall(r"^ENV FLEX_TEMPLATE_PYTHON_PY_FILE=(\S+)$", dockerfile, flags=re.M)
    copied = re.findall(r"^COPY (\S+) (\S+)$", dockerfile, flags=re.M)
    (source,) = [src for src, dst in copied if dst == entry]
    launch = (ROOT / source).read_text()
    assert "from pipelines.files_to_nominal import launch" in launch
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in dockerfile  # the same image runs the workers
