"""Points the server had already stored are reported apart from new ones.

The local server stores a request once per idempotency key and says so when it is sent again
(``metadata.ALREADY_STORED``). A re-run of the same input therefore reports its points as already
stored, while a retry of this stream's own request (its first attempt's answer lost) counts as
written: the first attempt may be what stored it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_nominal import NominalStream
from beam_nominal.errors import TargetError
from beam_nominal.server import LocalServer
from beam_nominal.targets import target_from_url

pytestmark = pytest.mark.timeout(60)

T0 = 1_767_225_600_000_000_000
RID = "ri.test.already-stored"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("already-stored"), port=0, http_port=0) as server:
        yield server


def _url(srv: LocalServer, wire: str) -> str:
    return srv.target if wire == "grpc" else srv.http_url


def _write(target: object, rid: str, n: int, offset: int = 0):
    with NominalStream(target, dataset_rid=rid, linger=None) as stream:
        for i in range(n):
            stream.enqueue("temp", T0 + i, float(i + offset))
            stream.enqueue("mode", T0 + i, f"m{i}")
    return stream.report()


@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_an_identical_rerun_is_reported_as_already_stored(srv: LocalServer, wire: str) -> None:
    rid = f"{RID}.{wire}"
    first = _write(_url(srv, wire), rid, 500)
    assert (first.points, first.already_stored_points) == (1000, 0)
    again = _write(_url(srv, wire), rid, 500)
    assert (again.points, again.already_stored_points) == (1000, 1000)
    other = _write(_url(srv, wire), rid, 500, offset=1)
    assert (other.points, other.already_stored_points) == (1000, 0)
    assert srv.store.read(rid, "temp").num_rows == 1000
    assert srv.store.read(rid, "mode").num_rows == 1000


class _AnswerLostOnce:
    """The transport seam: the request reaches the server, its first answer is lost."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.lost = 0

    def send(self, request, timeout=None):
        answer = self.inner.send(request, timeout)
        if not self.lost:
            self.lost += 1
            raise TargetError("answer lost after the server stored the request", retryable=True, code="LOST")
        return answer

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_a_retry_of_this_streams_own_request_counts_as_written(srv: LocalServer, wire: str) -> None:
    rid = f"{RID}.retry.{wire}"
    target = _AnswerLostOnce(target_from_url(_url(srv, wire), dataset_rid=rid, token=None))
    report = _write(target, rid, 100)
    assert target.lost == 1
    assert (report.points, report.retries, report.already_stored_points) == (200, 1, 0)
    assert srv.store.read(rid, "temp").num_rows == 100


def test_the_files_job_summary_says_what_was_already_stored(srv: LocalServer, tmp_path: Path) -> None:
    import contextlib
    import io

    from pipelines import files_to_nominal

    csv = tmp_path / "run.csv"
    csv.write_text("timestamp,temp,rpm\n" + "".join(f"2026-01-01T00:00:0{i}Z,{i}.5,{i}\n" for i in range(5)))
    argv = ["--input", str(csv), "--layout", "wide", "--target", srv.target, "--dataset-rid", f"{RID}.files"]

    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert files_to_nominal.main([*argv, "--quiet"]) == 0
        return out.getvalue()

    first = run()
    assert "points written 10 " in first and "already stored" not in first, first
    second = run()
    assert "points written 10 " in second and "already stored 10 of them" in second, second
    assert srv.store.read(f"{RID}.files", "temp").num_rows == 5
