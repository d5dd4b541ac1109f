"""``beam-nominal serve`` / ``inspect`` as real processes: readiness line, signals, crash durability."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from beam_nominal._wire import metadata as md
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalStore, RemoteStore

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.proc"
T = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456789Z
READY = re.compile(r"listening on (grpcs?)://(127\.0\.0\.1|localhost):(\d+)\n")
SCRIPT = Path(sys.executable).parent / "beam-nominal"


class Serve:
    """A ``beam-nominal serve`` subprocess, ready once it printed its one line."""

    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        cmd = ([str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "beam_nominal.cli"]) + [
            "serve",
            "--data-dir",
            str(data_dir),
            "--port",
            "0",
            *extra,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()
        line = self.lines.get(timeout=60)
        assert line is not None, f"serve exited before it was ready: {''.join(self.stderr)}"
        m = READY.fullmatch(line)
        assert m is not None, line
        self.target = f"{m.group(1)}://{m.group(2)}:{m.group(3)}"
        self.first_line = line

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def rest_of_stdout(self) -> list[str]:
        """Lines printed after the readiness line (call once the process ended)."""
        out = []
        while (line := self.lines.get(timeout=30)) is not None:
            out.append(line)
        return out

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def procs() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.kill()


def request(channel: str, n: int, start: float, rid: str = RID) -> bytes:
    batch = SeriesBatch(
        SeriesKey.of(channel, {"unit": "V"}),
        ValueType.DOUBLE,
        np.arange(T, T + n, dtype=np.int64),
        np.arange(start, start + n, dtype=np.float64),
    )
    return encode_request(rid, [batch])


def channel_for(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target.split("://", 1)[1])


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "beam_nominal.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_sigkill_right_after_acks_loses_nothing_acknowledged(data_dir: Path, procs: list[Serve]) -> None:
    server = Serve(data_dir)
    procs.append(server)
    points = 2000
    enough = threading.Event()
    lock = threading.Lock()
    acked: list[str] = []
    sent: list[str] = []

    def sender(w: int) -> None:
        ch = channel_for(server.target)
        call = ch.unary_unary(md.WRITE_COLUMN_BATCHES)
        for i in range(10_000):
            name = f"w{w}-{i}"
            with lock:
                sent.append(name)
            try:
                call(request(name, points, float(i)), metadata=[(md.IDEMPOTENCY_KEY, name)], timeout=30)
            except grpc.RpcError:
                break
            with lock:
                acked.append(name)
                if len(acked) >= 40:
                    enough.set()
        ch.close()

    threads = [threading.Thread(target=sender, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    assert enough.wait(60), "the server did not acknowledge 40 requests"
    server.kill()
    for th in threads:
        th.join(60)
    with lock:
        acked_now, sent_now = list(acked), list(sent)
    assert len(acked_now) >= 40

    restarted = Serve(data_dir)
    procs.append(restarted)
    store = LocalStore(data_dir)
    stored = {s.channel: s for s in store.list_series(RID)}
    for name in acked_now:
        assert name in stored, f"acknowledged request {name} is missing after SIGKILL"
    for name in sent_now:
        if name not in stored:
            continue
        # All or nothing: a request is either absent or complete, acknowledged or not.
        i = int(name.split("-")[1])
        assert stored[name].count == points, name
        table = store.read(RID, name, {"unit": "V"})
        assert table.column("timestamp").to_pylist() == list(range(T, T + points))
        assert table.column("value").to_pylist() == [float(i + k) for k in range(points)]
    # The restarted server still knows the keys: re-sending an acknowledged request stores nothing.
    ch = channel_for(restarted.target)
    name = acked_now[0]
    i = int(name.split("-")[1])
    ch.unary_unary(md.WRITE_COLUMN_BATCHES)(
        request(name, points, float(i)), metadata=[(md.IDEMPOTENCY_KEY, name)], timeout=30
    )
    ch.close()
    assert LocalStore(data_dir).series_info(RID, name, {"unit": "V"}).count == points


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(data_dir: Path, procs: list[Serve], sig: signal.Signals) -> None:
    server = Serve(data_dir)
    procs.append(server)
    ch = channel_for(server.target)
    ch.unary_unary(md.WRITE_COLUMN_BATCHES)(request("sig", 10, 0.0), timeout=30)
    ch.close()
    server.proc.send_signal(sig)
    assert server.proc.wait(30) == 0, "".join(server.stderr)
    assert server.rest_of_stdout() == []
    assert LocalStore(data_dir).series_info(RID, "sig", {"unit": "V"}).count == 10


def test_token_from_environment_is_enforced_and_never_printed(data_dir: Path, procs: list[Serve]) -> None:
    token = "tok-7f3a9c"
    server = Serve(data_dir, env={"NOMINAL_TOKEN": token})
    procs.append(server)
    ch = channel_for(server.target)
    call = ch.unary_unary(md.WRITE_COLUMN_BATCHES)
    with pytest.raises(grpc.RpcError) as err:
        call(request("tok", 3, 0.0), timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    call(request("tok", 3, 0.0), metadata=[(md.AUTHORIZATION, f"Bearer {token}")], timeout=30)
    ch.close()
    server.proc.terminate()
    assert server.proc.wait(30) == 0
    printed = server.first_line + "".join(server.rest_of_stdout()) + "".join(server.stderr)
    assert token not in printed
    assert LocalStore(data_dir).series_info(RID, "tok", {"unit": "V"}).count == 3


def test_token_from_a_file_is_enforced_and_stays_out_of_the_command_line(
    tmp_path: Path, data_dir: Path, procs: list[Serve]
) -> None:
    token = "tok-file-51c2"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    server = Serve(data_dir, "--token-file", str(token_file))
    procs.append(server)
    assert all(token not in arg for arg in server.proc.args)  # what ps shows
    ch = channel_for(server.target)
    call = ch.unary_unary(md.WRITE_COLUMN_BATCHES)
    with pytest.raises(grpc.RpcError) as err:
        call(request("tok", 3, 0.0), metadata=[(md.AUTHORIZATION, "Bearer wrong")], timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    call(request("tok", 3, 0.0), metadata=[(md.AUTHORIZATION, f"Bearer {token}")], timeout=30)
    ch.close()
    server.proc.terminate()
    assert server.proc.wait(30) == 0
    assert LocalStore(data_dir).series_info(RID, "tok", {"unit": "V"}).count == 3


def test_busy_port_fails_with_a_message(data_dir: Path, procs: list[Serve]) -> None:
    server = Serve(data_dir)
    procs.append(server)
    port = server.target.rsplit(":", 1)[1]
    done = run_cli("serve", "--data-dir", str(data_dir.parent / "other"), "--port", port)
    assert done.returncode == 1
    assert done.stdout == ""
    assert port in done.stderr


def _expect_table(out: str, lines: Sequence[Sequence[str]]) -> None:
    rows = [line.split() for line in out.splitlines()]
    for want in lines:
        assert list(want) in rows, (want, out)


def test_inspect_prints_series_from_dir_and_from_server(data_dir: Path, procs: list[Serve]) -> None:
    server = Serve(data_dir, "--token", "abc")
    procs.append(server)
    ch = channel_for(server.target)
    call = ch.unary_unary(md.WRITE_COLUMN_BATCHES)
    auth = [(md.AUTHORIZATION, "Bearer abc")]
    call(request("volts", 12, 100.0), metadata=auth, timeout=30)
    call(request("amps", 1, 7.0, rid="ri.other"), metadata=auth, timeout=30)
    ch.close()
    expected = [
        [
            RID,
            "volts",
            "unit=V",
            "double",
            "12",
            "2023-11-14T22:13:20.123456789Z",
            "2023-11-14T22:13:20.123456800Z",
        ],
        [
            "ri.other",
            "amps",
            "unit=V",
            "double",
            "1",
            "2023-11-14T22:13:20.123456789Z",
            "2023-11-14T22:13:20.123456789Z",
        ],
    ]

    local = run_cli("inspect", "--data-dir", str(data_dir))
    assert local.returncode == 0, local.stderr
    _expect_table(local.stdout, expected)

    remote = run_cli("inspect", "--target", server.target, "--token", "abc")
    assert remote.returncode == 0, remote.stderr
    _expect_table(remote.stdout, expected)

    denied = run_cli("inspect", "--target", server.target)
    assert denied.returncode == 1
    assert "UNAUTHENTICATED" in denied.stderr

    one = run_cli(
        "inspect",
        "--target",
        server.target,
        "--dataset",
        RID,
        "--channel",
        "volts",
        env={"NOMINAL_TOKEN": "abc"},
    )
    assert one.returncode == 0, one.stderr
    assert "amps" not in one.stdout
    _expect_table(
        one.stdout,
        [
            ["2023-11-14T22:13:20.123456789Z", "100.0"],
            ["2023-11-14T22:13:20.123456793Z", "104.0"],
            ["..."],
            ["2023-11-14T22:13:20.123456796Z", "107.0"],
            ["2023-11-14T22:13:20.123456800Z", "111.0"],
        ],
    )
    assert "2023-11-14T22:13:20.123456794Z" not in one.stdout


def test_inspect_without_data(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = run_cli("inspect", "--data-dir", str(tmp_path / "empty"))
    # Nothing to show is not a success a script could take for data.
    assert (done.returncode, done.stdout) == (1, "")
    assert "no series in" in done.stderr and "empty" in done.stderr
    missing = run_cli("inspect", "--data-dir", str(tmp_path / "missing"))
    assert missing.returncode == 1
    assert "missing" in missing.stderr


def test_remote_store_reads_what_a_process_serves(data_dir: Path, procs: list[Serve]) -> None:
    server = Serve(data_dir)
    procs.append(server)
    ch = channel_for(server.target)
    ch.unary_unary(md.WRITE_COLUMN_BATCHES)(request("r", 5, 1.5), timeout=30)
    ch.close()
    with RemoteStore(server.target) as remote:
        [info] = remote.list_series(RID)
        assert (info.channel, info.tags, info.count, info.min_timestamp_ns) == ("r", {"unit": "V"}, 5, T)
        assert remote.read(RID, "r", {"unit": "V"}).column("value").to_pylist() == [1.5, 2.5, 3.5, 4.5, 5.5]


def test_serve_with_tls(tmp_path: Path, procs: list[Serve], tls_files: Any) -> None:
    cert_pem = tls_files.cert_pem
    server = Serve(
        tmp_path / "data",
        "--host",
        "localhost",
        "--tls-cert",
        str(tls_files.cert),
        "--tls-key",
        str(tls_files.key),
    )
    procs.append(server)
    assert server.target.startswith("grpcs://localhost:")
    ch = grpc.secure_channel(server.target.split("://", 1)[1], grpc.ssl_channel_credentials(cert_pem))
    ch.unary_unary(md.WRITE_COLUMN_BATCHES)(request("tls", 4, 0.5), timeout=30)
    ch.close()
    with RemoteStore(server.target, root_certificates=cert_pem) as remote:
        assert remote.read(RID, "tls", {"unit": "V"}).column("value").to_pylist() == [0.5, 1.5, 2.5, 3.5]
    shown = run_cli("inspect", "--target", server.target, "--ca-cert", str(tls_files.cert))
    assert shown.returncode == 0, shown.stderr
    assert "tls" in shown.stdout.split()
    lonely = run_cli("serve", "--data-dir", str(tmp_path / "x"), "--port", "0", "--tls-cert", "c.pem")
    assert lonely.returncode == 2
    assert "--tls-key" in lonely.stderr
