"""The fault-injection harness, every scenario on gRPC and on HTTP, checked by reading back.

- a ``beam-nominal serve`` process SIGKILLed mid-stream and restarted on the same data dir and
  ports, three times in one stream;
- a loopback TCP proxy (``_proxy.FaultProxy``, real sockets) that resets connections at connect and
  mid-request, stalls both ways past the attempt deadline, and cuts responses after the server
  committed (so the client retries an applied request);
- storage faults at the store's seam (the commit file write raising ENOSPC or EIO, the directory
  fsync failing; and a real OS refusal: a server process under RLIMIT_FSIZE) fail the request and
  never acknowledge it.

Each ends with: points in == points stored, 0 duplicates (timestamps are unique per stream and
read back in full), or the failure raised with exact counts and nothing of it stored.
"""

from __future__ import annotations

import errno
import os
import queue
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _proxy import FaultProxy

from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream
from beam_nominal.targets.grpc import GrpcTarget
from beam_nominal.targets.http import HttpTarget

pytestmark = pytest.mark.timeout(180)

RID = "ri.test.harness"
T = 1_700_000_000_000_000_000
ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"listening on grpc://127\.0\.0\.1:(\d+) and http://127\.0\.0\.1:(\d+)/api\n")
WIRES = ["grpc", "http"]
# Explicit retry settings: ride out a few seconds of faults whatever the defaults are.
RIDE = {"linger": None, "initial_backoff": 0.02, "max_backoff": 0.2, "max_attempts": 10_000, "total_timeout": 60}


def url(wire: str, grpc_port: int, http_port: int) -> str:
    return f"grpc://127.0.0.1:{grpc_port}" if wire == "grpc" else f"http://127.0.0.1:{http_port}/api"


class ServeProc:
    """``beam-nominal serve`` of this checkout (not whatever is installed) on both wires."""

    def __init__(
        self, data: Path, grpc_port: int = 0, http_port: int = 0, preexec: Callable[[], None] | None = None
    ) -> None:
        cmd = [sys.executable, "-m", "beam_nominal.cli", "serve", "--data-dir", str(data)]
        cmd += ["--port", str(grpc_port), "--http-port", str(http_port)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec
        )
        lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out, err = self.proc.stdout, self.proc.stderr
        threading.Thread(target=lambda: [lines.put(x) for x in out], daemon=True).start()
        threading.Thread(target=lambda: [self.stderr.append(x) for x in err], daemon=True).start()
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            # Say why: a server that died or hung at start-up, with what it printed.
            self.proc.kill()
            code = self.proc.wait(10)
            said = "".join(self.stderr)[-2000:]
            raise AssertionError(f"serve printed no address in 60 s (exit code {code}): {said}") from None
        m = READY.fullmatch(line)
        assert m is not None, (line, self.stderr)
        self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


class Watched:
    """The real target of a wire, counting the sends that failed (so a test knows a fault was met)."""

    def __init__(self, wire: str, grpc_port: int, http_port: int) -> None:
        self.inner: Any = (
            GrpcTarget(url(wire, grpc_port, http_port))
            if wire == "grpc"
            else HttpTarget(url(wire, grpc_port, http_port), dataset_rid=RID)
        )
        self.failures = 0

    def send(self, request: Any, timeout: float | None = None) -> None:
        try:
            self.inner.send(request, timeout)
        except TargetError:
            self.failures += 1
            raise

    def close(self) -> None:
        self.inner.close()


def stream_batches(s: NominalStream, n: int, size: int, on_batch: Callable[[int], None] = lambda b: None) -> int:
    for b in range(n):
        s.enqueue_batch("a", np.arange(T + b * size, T + (b + 1) * size), np.full(size, float(b)))
        on_batch(b)
    return n * size


def assert_exact(data: Path, n: int, size: int) -> None:
    """Every point once: the timestamps are unique, so a duplicate would show as a repeat."""
    table = LocalStore(data).read(RID, "a")
    ts = table.column("timestamp").to_numpy()
    assert len(ts) == n * size, f"{len(ts) - n * size:+d} points"
    assert (ts == np.arange(T, T + n * size)).all()
    assert (table.column("value").to_numpy() == np.repeat(np.arange(n, dtype=np.float64), size)).all()


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# -- SIGKILL and restart, repeatedly ----------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_server_sigkilled_and_restarted_three_times_mid_stream(tmp_path: Path, wire: str) -> None:
    data = tmp_path / "data"
    procs = [ServeProc(data)]
    grpc_port, http_port = procs[0].grpc_port, procs[0].http_port
    n, size, kills = 60, 500, {10, 25, 40}
    target = Watched(wire, grpc_port, http_port)
    s = NominalStream(target, dataset_rid=RID, max_request_points=1_000, **RIDE)

    def on_batch(b: int) -> None:
        if b in kills:
            before = target.failures
            procs[-1].kill()
            # A full request's worth, so one is cut and sent now; restart once a send met the
            # dead server.
            s.enqueue_batch("probe", np.arange(T + b * 10_000, T + b * 10_000 + 1_000), np.zeros(1_000))
            wait_for(lambda: target.failures > before, 30, "a send to meet the dead server")
            procs.append(ServeProc(data, grpc_port, http_port))

    try:
        total = stream_batches(s, n, size, on_batch)
        report = s.close(timeout=60)
    finally:
        for p in procs:
            p.kill()
        target.close()
    assert report.failed_points == 0
    assert report.points == total + 1_000 * len(kills)
    assert report.retries >= len(kills)
    assert_exact(data, n, size)
    probes = LocalStore(data).read(RID, "probe").column("timestamp").to_numpy()
    assert (probes == np.concatenate([np.arange(T + b * 10_000, T + b * 10_000 + 1_000) for b in sorted(kills)])).all()


# -- a loopback proxy: resets, stalls, responses cut after the commit ------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        yield srv


def _through_proxy(server: LocalServer, wire: str, arm: Callable[[FaultProxy], None], **settings: Any) -> FaultProxy:
    port = server.port if wire == "grpc" else server.http_port
    proxy = FaultProxy(port, "grpc" if wire == "grpc" else "http")
    try:
        arm(proxy)
        s = NominalStream(
            url(wire, proxy.port, proxy.port), dataset_rid=RID, max_request_points=2_000, **{**RIDE, **settings}
        )
        total = stream_batches(s, 20, 1_000)
        report = s.close(timeout=60)
    finally:
        proxy.close()
    assert report.failed_points == 0 and report.points == total
    assert_exact(server.store.data_dir, 20, 1_000)
    return proxy


@pytest.mark.parametrize("wire", WIRES)
def test_connections_reset_at_connect(server: LocalServer, wire: str) -> None:
    proxy = _through_proxy(server, wire, lambda p: p.drop_connections(3))
    assert proxy.dropped == 3


@pytest.mark.parametrize("wire", WIRES)
def test_connections_reset_mid_request(server: LocalServer, wire: str) -> None:
    # 400 bytes: inside the first request's headers or body (HTTP bodies are compressed, these
    # to a few kB), so the server never gets a whole request on that connection.
    proxy = _through_proxy(server, wire, lambda p: p.drop_connections(3, after_bytes=400))
    assert proxy.dropped == 3


@pytest.mark.parametrize("wire", WIRES)
def test_responses_cut_after_the_commit_are_stored_once(server: LocalServer, wire: str) -> None:
    proxy = _through_proxy(server, wire, lambda p: p.cut_responses(4))
    assert proxy.cut == 4


@pytest.mark.parametrize("wire", WIRES)
def test_a_stall_past_the_attempt_deadline_then_healing(server: LocalServer, wire: str) -> None:
    """Requests sent into the stall reach the server late, after the client gave up on them and
    retried: the late original and the retry carry the same key, so each is stored once."""
    proxy = _through_proxy(server, wire, lambda p: p.stall(1.5), attempt_timeout=0.3)
    assert proxy.connections >= 1


# -- storage faults at the store's seam ---------------------------------------------------------------


class _FailingWrites:
    """Raises ``error`` from the commit file write for the first ``n`` calls (``n`` None: always)."""

    def __init__(self, error: OSError, n: int | None) -> None:
        import beam_nominal.server._commit as commit

        self.commit, self.real, self.error, self.left = commit, commit._write_commit_file, error, n
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.left is None or self.left > 0:
            if self.left is not None:
                self.left -= 1
            raise self.error
        return self.real(*args, **kwargs)


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_failed_commit_writes_are_retried_never_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: str, err: int
) -> None:
    import beam_nominal.server._commit as commit

    failing = _FailingWrites(OSError(err, os.strerror(err)), 3)
    monkeypatch.setattr(commit, "_write_commit_file", failing)
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        s = NominalStream(url(wire, srv.port, srv.http_port), dataset_rid=RID, max_request_points=2_000, **RIDE)
        total = stream_batches(s, 10, 1_000)
        report = s.close(timeout=60)
        assert report.failed_points == 0 and report.points == total and report.retries >= 3
        assert failing.calls == 5 + 3
        assert_exact(srv.store.data_dir, 10, 1_000)
        assert not any((tmp_path / "data").rglob("staging/*")), "a failed write left a staging file"


@pytest.mark.parametrize("wire", WIRES)
def test_a_disk_that_stays_full_fails_the_stream_with_exact_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    import beam_nominal.server._commit as commit

    monkeypatch.setattr(commit, "_write_commit_file", _FailingWrites(OSError(errno.ENOSPC, "No space left"), None))
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        s = NominalStream(
            url(wire, srv.port, srv.http_port),
            dataset_rid=RID,
            max_request_points=2_000,
            **{**RIDE, "max_attempts": 3, "total_timeout": 10},
        )
        s.enqueue_batch("a", np.arange(T, T + 3_000), np.ones(3_000))
        s.enqueue_batch("b", np.arange(T, T + 500), np.ones(500))
        with pytest.raises(DeliveryError) as info:
            s.close(timeout=30)
        assert info.value.undelivered == {SeriesKey("a"): 3_000, SeriesKey("b"): 500}
        assert "storage" in str(info.value).lower() or "space" in str(info.value).lower(), str(info.value)[:500]
        assert LocalStore(tmp_path / "data").list_series(RID) == []


@pytest.mark.parametrize("wire", WIRES)
def test_a_failed_directory_fsync_is_not_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    """The rename happened but its fsync failed: that answer is an error; the retry (same key) finds
    the commit indexed and is a duplicate, so the points are stored once."""
    import beam_nominal.server._index as index

    real, left = index._fsync_dir, [2]

    def flaky(path: Path) -> None:
        if path.name == "commits" and left[0] > 0:
            left[0] -= 1
            raise OSError(errno.EIO, "injected fsync failure")
        real(path)

    monkeypatch.setattr(index, "_fsync_dir", flaky)
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        s = NominalStream(url(wire, srv.port, srv.http_port), dataset_rid=RID, max_request_points=2_000, **RIDE)
        total = stream_batches(s, 10, 1_000)
        report = s.close(timeout=60)
        assert left == [0] and report.failed_points == 0 and report.points == total and report.retries >= 2
        assert_exact(srv.store.data_dir, 10, 1_000)


def _limit_file_size() -> None:
    # In the server process only: files over 1 MiB cannot be written (EFBIG), as on a full disk;
    # SIGXFSZ ignored so the write fails instead of the process dying.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


@pytest.mark.parametrize("wire", WIRES)
def test_a_real_os_write_refusal_fails_only_the_request_that_met_it(tmp_path: Path, wire: str) -> None:
    data = tmp_path / "data"
    proc = ServeProc(data, preexec=_limit_file_size)
    try:
        big = NominalStream(
            url(wire, proc.grpc_port, proc.http_port),
            dataset_rid=RID,
            max_request_points=500_000,
            max_request_bytes=16 << 20,
            **{**RIDE, "max_attempts": 2, "total_timeout": 10},
        )
        big.enqueue_batch("big", np.arange(T, T + 300_000), np.ones(300_000))  # a ~2.4 MB commit file
        with pytest.raises(DeliveryError) as info:
            big.close(timeout=30)
        assert info.value.undelivered == {SeriesKey("big"): 300_000}
        small = NominalStream(
            url(wire, proc.grpc_port, proc.http_port), dataset_rid=RID, max_request_points=2_000, **RIDE
        )
        total = stream_batches(small, 10, 1_000)
        assert small.close(timeout=30).points == total
    finally:
        proc.kill()
    assert [s.channel for s in LocalStore(data).list_series(RID)] == ["a"]
    assert_exact(data, 10, 1_000)
    assert not any(data.rglob("staging/*"))
