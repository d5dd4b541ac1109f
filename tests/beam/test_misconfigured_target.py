"""WriteToNominal to a target that cannot work fails the job in seconds at the DoFn's ``setup``,
with an error naming the target and what to check, instead of each bundle waiting out its retry
budget (120 s). FnApiRunner, as a user's first run would."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import apache_beam as beam
import pytest
from _ports import free_port
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer

pytestmark = pytest.mark.timeout(300)

RID = "ri.misconfigured"
#: The acceptance bound; each case takes well under a second here.
FAST = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("data"), port=0, http_port=0, token="right-token") as s:
        yield s


def _run(target: str, token: str | None) -> tuple[float, str]:
    start = time.monotonic()
    with pytest.raises(Exception) as failed, beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create([("engine.rpm", 1_767_225_600_000_000_000 + i, float(i)) for i in range(100)])
            | WriteToNominal(target, dataset_rid=RID, token=token)
        )
    return time.monotonic() - start, str(failed.value)


@pytest.mark.parametrize("wire", ["http", "grpc"])
def test_closed_port_unknown_host_and_wrong_token_fail_within_seconds(
    server: LocalServer, wire: str, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    cases = {
        "http": [
            (f"http://127.0.0.1:{port}/api", "right-token", "check the host and port, and that the server is running"),
            ("http://nominal.invalid/api", "right-token", "unknown host.*check the host name"),
            (server.http_url, "wrong-token", "HTTP 401.*check token="),
        ],
        "grpc": [
            (f"grpc://127.0.0.1:{port}", "right-token", "check the host and port, and that the server is running"),
            ("grpc://nominal.invalid:443", "right-token", "unknown host.*check the host name"),
            (server.target, "wrong-token", "UNAUTHENTICATED.*check token="),
        ],
    }[wire]
    timings = []
    for target, token, why in cases:
        elapsed, message = _run(target, token)
        timings.append(f"{target}: {elapsed:.2f}s")
        assert elapsed < FAST, f"{target}: {elapsed:.1f}s"
        assert f"{target}: first contact failed" in message, message
        assert re.search(why, message), message
        assert "right-token" not in message and "wrong-token" not in message
    with capsys.disabled():
        print("\n" + "\n".join(timings))
    assert server.store.list_series(RID) == []


def test_the_right_target_still_writes(server: LocalServer) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create([("engine.rpm", 1_767_225_600_000_000_000 + i, float(i)) for i in range(100)])
            | WriteToNominal(server.http_url, dataset_rid=RID + ".ok", token="right-token")
        )
    assert server.store.read(RID + ".ok", "engine.rpm").column("value").to_pylist() == [float(i) for i in range(100)]
