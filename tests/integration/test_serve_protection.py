"""``beam-nominal serve`` is protected by default: on an interface other than loopback it refuses
to start without a token, and with a token but without TLS, naming the flag or file to add, unless
``--insecure`` says the user means it. With ``--tls-cert``/``--tls-key`` both listeners speak
TLS, so a token never crosses the network in clear. Real ``serve`` processes."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import urllib3

from beam_nominal import NominalStream
from beam_nominal.errors import TargetError
from beam_nominal.server import LocalStore

pytestmark = pytest.mark.timeout(120)

RID = "ri.serve.protected"
T = 1_767_225_600_000_000_000
READY = re.compile(r"listening on (grpcs?)://0\.0\.0\.0:(\d+) and (https?)://0\.0\.0\.0:(\d+)/api\n")
TOKEN = "tok-protected-7"


def _cmd(data: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "beam_nominal.cli", "serve", "--data-dir", str(data), "--port", "0", *extra]


def _env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NOMINAL_TOKEN"}
    return {**env, "NOMINAL_TOKEN": token} if token else env


def _refused(data: Path, *extra: str, token: str | None = None) -> str:
    done = subprocess.run(
        _cmd(data, *extra), capture_output=True, text=True, timeout=60, env=_env(token), check=False
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""  # never listening
    return done.stderr


def test_beyond_loopback_without_a_token_it_refuses_naming_what_to_add(tmp_path: Path) -> None:
    err = _refused(tmp_path / "d", "--host", "0.0.0.0", "--http-port", "0")
    assert "--host 0.0.0.0" in err and "no token" in err
    assert "--token-file FILE" in err and "--tls-cert FILE --tls-key FILE" in err and "--insecure" in err
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


def test_beyond_loopback_a_token_without_tls_is_refused(tmp_path: Path) -> None:
    for how in (["--token-file", str(tmp_path / "token")], []):
        (tmp_path / "token").write_text(TOKEN + "\n")
        err = _refused(tmp_path / "d", "--host", "0.0.0.0", "--http-port", "0", *how, token=None if how else TOKEN)
        assert "in clear" in err and "--tls-cert FILE --tls-key FILE" in err and "--insecure" in err
        assert TOKEN not in err


class _Serve:
    def __init__(self, cmd: list[str], token: str | None) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(token))
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr or ()), daemon=True).start()
        line = self.lines.get(timeout=60)
        assert line is not None, f"serve exited: {self.proc.wait(30)} {''.join(self.err)}"
        m = READY.fullmatch(line)
        assert m is not None, line
        self.schemes = (m.group(1), m.group(3))
        self.grpc_port, self.http_port = int(m.group(2)), int(m.group(4))

    def _pump(self) -> None:
        for line in self.proc.stdout or ():
            self.lines.put(line)
        self.lines.put(None)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0


@pytest.fixture
def served() -> Iterator[list[_Serve]]:
    procs: list[_Serve] = []
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(30)


def test_insecure_says_the_user_means_it(tmp_path: Path, served: list[_Serve]) -> None:
    s = _Serve(_cmd(tmp_path / "d", "--host", "0.0.0.0", "--http-port", "0", "--insecure"), token=None)
    served.append(s)
    assert s.schemes == ("grpc", "http")
    with NominalStream(f"http://127.0.0.1:{s.http_port}/api", dataset_rid=RID, token=None) as stream:
        stream.enqueue("a", T, 1.5)
    s.stop()
    assert "warning (--insecure)" in "".join(s.err)
    assert LocalStore(tmp_path / "d").read(RID, "a").column("value").to_pylist() == [1.5]


def test_a_token_with_tls_serves_https_and_grpcs_end_to_end(
    tmp_path: Path, served: list[_Serve], tls_files: Any
) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    s = _Serve(
        _cmd(
            tmp_path / "d",
            "--host",
            "0.0.0.0",
            "--http-port",
            "0",
            "--token-file",
            str(tmp_path / "token"),
            "--tls-cert",
            str(tls_files.cert),
            "--tls-key",
            str(tls_files.key),
        ),
        token=None,
    )
    served.append(s)
    assert s.schemes == ("grpcs", "https")
    https = f"https://localhost:{s.http_port}/api"
    grpcs = f"grpcs://localhost:{s.grpc_port}"
    ts = T + np.arange(1000, dtype=np.int64)
    for url in (https, grpcs):
        with NominalStream(url, dataset_rid=RID, token=TOKEN, ca_file=tls_files.cert) as stream:
            stream.enqueue_batch(url.split(":")[0], ts, np.arange(1000.0))
        # The token is checked on both.
        with pytest.raises(TargetError, match=r"HTTP 401|UNAUTHENTICATED"):
            NominalStream(url, dataset_rid=RID, token="wrong", ca_file=tls_files.cert)
    # The HTTP listener speaks no plaintext: a plain request gets no answer.
    with pytest.raises(urllib3.exceptions.ProtocolError):
        urllib3.PoolManager(retries=False).request("GET", f"http://127.0.0.1:{s.http_port}/api/beam-nominal/v1/capabilities")
    s.stop()
    store = LocalStore(tmp_path / "d")
    for name in ("https", "grpcs"):
        assert store.read(RID, name).column("value").to_pylist() == list(np.arange(1000.0))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_needs_neither(tmp_path: Path, served: list[_Serve], host: str) -> None:
    cmd = _cmd(tmp_path / "d", "--host", host, "--http-port", "0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(None))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"listening on grpc://{host}:"), line
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
