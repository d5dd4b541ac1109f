"""The Flex Template's entry (``files_to_nominal.launch``), given the template's parameters as
Dataflow's launcher passes them (``--name=value``, underscores), submits the job and returns;
here on FnApiRunner (which runs it to the end within ``run``) into a local server that requires a
token the workers read by ``--token_secret env:NAME``, read back exactly. The token never enters
the pipeline: a launch without the variable set fails on the workers naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_nominal.server import LocalServer
from pipelines import files_to_nominal

TOKEN = "flex-launch-token"
VAR = "BEAM_NOMINAL_TEST_FLEX_TOKEN"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    with LocalServer(tmp_path / "data", port=0, token=TOKEN) as srv:
        yield srv


def _argv(tmp_path: Path, server: LocalServer) -> list[str]:
    (tmp_path / "wide.csv").write_text(
        "time,rpm,count\n2026-01-01T00:00:00Z,2400.5,9007199254740993\n2026-01-01T00:00:01Z,,-5\n"
    )
    return [
        f"--input={tmp_path / '*.csv'}",
        "--layout=wide",
        "--timestamp_column=time",
        f"--target={server.target}",
        "--dataset_rid=ri.flex",
        f"--token_secret=env:{VAR}",
        "--tag=vehicle=tail-42",
        "--runner=FnApiRunner",
    ]


def test_launch_writes_with_the_token_the_workers_read(
    server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VAR, TOKEN)
    assert files_to_nominal.launch(_argv(tmp_path, server)) == 0
    tags = {"vehicle": "tail-42"}
    rpm = server.store.read("ri.flex", "rpm", tags).to_pydict()
    count = server.store.read("ri.flex", "count", tags).to_pydict()
    assert list(zip(rpm["timestamp"], rpm["value"], strict=True)) == [(T0, 2400.5)]
    assert list(zip(count["timestamp"], count["value"], strict=True)) == [(T0, 9007199254740993), (T0 + 10**9, -5)]


def test_launch_without_the_variable_fails_naming_it(
    server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    with pytest.raises(Exception, match=f"environment variable {VAR} is not set"):
        files_to_nominal.launch(_argv(tmp_path, server))
    assert server.store.list_series("ri.flex") == []


def test_a_malformed_token_secret_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        files_to_nominal.parse_args(["--input=x.csv", "--token_secret=projects/p/secrets/s"])
    assert "--token-secret" in capsys.readouterr().err
