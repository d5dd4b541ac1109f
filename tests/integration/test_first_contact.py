"""A target that cannot work fails when the stream opens, in seconds, naming the target and what to
check: nothing listening, an unknown host, a refused token, TLS that cannot succeed, no write API
at the URL. A server that answers once and then goes away is an outage the retry budget rides out
(test_outage.py, test_fault_harness.py); here, a stream that had its first contact keeps it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _ports import free_port

from beam_nominal import LocalServer, NominalStream
from beam_nominal.errors import TargetError
from beam_nominal.targets.grpc import GrpcTarget
from beam_nominal.targets.http import HttpTarget

pytestmark = pytest.mark.timeout(120)

RID = "ri.first.contact"
#: Each case must fail well inside this (they take milliseconds here).
FAST = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("data"), port=0, http_port=0, token="right-token") as s:
        yield s


def _fails_fast(target: str, *, match: str, token: str | None = "right-token", **kw: object) -> TargetError:
    start = time.monotonic()
    with pytest.raises(TargetError, match=match) as failed:
        NominalStream(target, dataset_rid=RID, token=token, **kw)  # type: ignore[arg-type]
    elapsed = time.monotonic() - start
    assert elapsed < FAST, f"{target}: took {elapsed:.1f}s"
    err = failed.value
    assert not err.retryable
    assert "first contact failed" in str(err) and "Nothing was written" in str(err)
    assert "right-token" not in str(err) and "wrong-token" not in str(err)
    return err


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_port_nobody_listens_on(scheme: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/api" if scheme == "http" else f"grpc://127.0.0.1:{port}"
    err = _fails_fast(url, match="check the host and port, and that the server is running")
    assert str(err).startswith(url)


@pytest.mark.parametrize("url", ["http://nominal.invalid/api", "grpc://nominal.invalid:443"])
def test_an_unknown_host(url: str) -> None:
    err = _fails_fast(url, match="unknown host.*check the host name")
    assert str(err).startswith(url)


def test_a_wrong_token(server: LocalServer) -> None:
    err = _fails_fast(server.http_url, token="wrong-token", match="HTTP 401.*check token=")
    assert str(err).startswith(server.http_url)
    err = _fails_fast(server.target, token="wrong-token", match="UNAUTHENTICATED.*check token=")
    assert str(err).startswith(server.target)
    _fails_fast(server.http_url, token=None, match="HTTP 401")


def test_a_url_that_is_not_the_write_api(server: LocalServer) -> None:
    _fails_fast(server.http_url + "/nothing/here", match="HTTP 404.*check dataset_rid and the base URL")


def test_tls_to_a_plaintext_listener(server: LocalServer) -> None:
    _fails_fast(server.http_url.replace("http://", "https://"), match="check http:// versus https://")
    _fails_fast(server.target.replace("grpc://", "grpcs://"), match="check grpc:// versus grpcs://")


def test_a_fallback_does_not_hide_a_wrong_primary(tmp_path: Path) -> None:
    _fails_fast(f"http://127.0.0.1:{free_port()}/api", match="connections", fallback=tmp_path / "undelivered.avro")


def test_the_right_target_stores_nothing_at_first_contact_and_writes(server: LocalServer) -> None:
    for url, rid in ((server.http_url, RID + ".http"), (server.target, RID + ".grpc")):
        with NominalStream(url, dataset_rid=rid, token="right-token") as stream:
            assert server.store.list_series(rid) == []  # the first contact stored nothing
            stream.enqueue("x", 1, 1.5)
        assert server.store.read(rid, "x").column("value").to_pylist() == [1.5]


def test_a_target_contacted_once_is_not_contacted_again(tmp_path: Path) -> None:
    # WriteToNominal opens a stream per bundle over one shared target: only the first contacts.
    with LocalServer(tmp_path, port=0, http_port=0) as gone:
        targets = [HttpTarget(gone.http_url, dataset_rid=RID), GrpcTarget(gone.target)]
        for target in targets:
            NominalStream(target, dataset_rid=RID).close()
    try:
        for target in targets:
            # Nothing listens now; a stream on a contacted target opens (an outage is ridden out
            # by the retries of its requests, not refused at open).
            NominalStream(target, dataset_rid=RID).close()
        with pytest.raises(TargetError, match="first contact failed"):
            NominalStream(GrpcTarget(gone.target), dataset_rid=RID)
    finally:
        for target in targets:
            target.close()
