"""Security of the local server and the clients:

- the token on every endpoint of both wires, including unknown ones: missing, wrong, nearly right
  (a prefix, another case, no ``Bearer``), right; compared in constant time (``hmac.compare_digest``
  sees the whole header on every call);
- loopback bind by default (LocalServer and ``beam-nominal serve``): not reachable on this host's
  other addresses;
- rids never escape the data dir, on writes (both wires, the HTTP path included) and reads;
- the token never shows: not in any log record (every logger at DEBUG), not on stdout or stderr
  (fd level, so C-level output too), not in reprs, exceptions, failed-element reasons, display
  data, pipeline options; with a Beam ``Secret``, not in the pipeline graph either.

TLS with a certificate made at test time: test_stream_auth_tls.py, test_server.py::test_tls,
test_server_http.py::test_https_with_the_servers_certificate, test_server_process.py::test_serve_with_tls.
Body and decompressed size limits: test_server_http.py (test_body_over_limit, test_decompressed_over_limit,
test_body_of_empty_frames_refused_at_once, bombs in test_refusals).
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import logging
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import grpc
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.display import DisplayData
from apache_beam.transforms.util import Secret

from beam_nominal._wire import metadata as md
from beam_nominal._wire._proto.beam_nominal.local.v1 import local_pb2, local_pb2_grpc
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.beam import WriteToNominal
from beam_nominal.errors import TargetError
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream

pytestmark = pytest.mark.timeout(180)

TOKEN = "tok-7f3a9c51e2d84b6f"
OTHER = "wrong-0c1d2e3f4a5b"
T = 1_700_000_000_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def _body(rid: str = "ri.sec") -> bytes:
    return encode_request(rid, [SeriesBatch(SeriesKey("c"), ValueType.DOUBLE, np.arange(T, T + 2), np.ones(2))])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("security") / "data", token=TOKEN, http_port=0) as srv:
        yield srv


# -- the token on every endpoint ---------------------------------------------------------------------

AUTH_VALUES = {
    "missing": None,
    "wrong": f"Bearer {OTHER}",
    "no-bearer": TOKEN,
    "lowercase-scheme": f"bearer {TOKEN}",
    "prefix": f"Bearer {TOKEN[:-1]}",
    "suffix": f"Bearer {TOKEN}x",
    "space": f"Bearer  {TOKEN}",
    "right": f"Bearer {TOKEN}",
}


def _grpc_calls(ch: grpc.Channel) -> dict[str, Any]:
    read, caps = local_pb2_grpc.LocalReadServiceStub(ch), local_pb2_grpc.CapabilitiesServiceStub(ch)
    return {
        "WriteColumnBatches": lambda m: ch.unary_unary(md.WRITE_COLUMN_BATCHES)(
            _body("ri.sec.grpc"), metadata=m, timeout=30
        ),
        "WriteBatches": lambda m: ch.unary_unary(md.WRITE_BATCHES)(b"", metadata=m, timeout=30),
        "ListSeries": lambda m: read.ListSeries(local_pb2.ListSeriesRequest(), metadata=m, timeout=30),
        "ReadSeries": lambda m: read.ReadSeries(
            local_pb2.ReadSeriesRequest(dataset_rid="ri.x", channel="c"), metadata=m, timeout=30
        ),
        "GetCapabilities": lambda m: caps.GetCapabilities(local_pb2.GetCapabilitiesRequest(), metadata=m, timeout=30),
        "unknown": lambda m: ch.unary_unary("/no.such.Service/Nothing")(b"", metadata=m, timeout=30),
    }


@pytest.mark.parametrize("auth", sorted(AUTH_VALUES))
def test_every_grpc_method_needs_the_exact_token(server: LocalServer, auth: str) -> None:
    value = AUTH_VALUES[auth]
    metadata = [] if value is None else [(md.AUTHORIZATION, value)]
    with grpc.insecure_channel(server.target.split("://", 1)[1]) as ch:
        codes = {}
        for name, call in _grpc_calls(ch).items():
            try:
                call(metadata)
                codes[name] = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                codes[name] = exc.code()
                assert TOKEN not in (exc.details() or "")
    if auth == "right":
        # Past the check, each answers as itself (WriteBatches of b"": an empty rid is refused).
        assert codes == {
            "WriteColumnBatches": grpc.StatusCode.OK,
            "WriteBatches": grpc.StatusCode.INVALID_ARGUMENT,
            "ListSeries": grpc.StatusCode.OK,
            "ReadSeries": grpc.StatusCode.NOT_FOUND,
            "GetCapabilities": grpc.StatusCode.OK,
            "unknown": grpc.StatusCode.UNIMPLEMENTED,
        }
    else:
        assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, codes


def _http(port: int, method: str, path: str, body: bytes | None, auth: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": md.PROTOBUF_CONTENT_TYPE}
    if auth is not None:
        headers["Authorization"] = auth
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


HTTP_ENDPOINTS = {
    "row": ("POST", "/api" + md.HTTP_WRITE_NOMINAL_PATH.format(dataset_rid="ri.sec.http"), b""),
    "row-bare": ("POST", md.HTTP_WRITE_NOMINAL_PATH.format(dataset_rid="ri.sec.http"), b""),
    "columnar": ("POST", "/api" + md.HTTP_WRITE_COLUMNAR_PATH, b""),
    "columnar-bare": ("POST", md.HTTP_WRITE_COLUMNAR_PATH, b""),
    "unknown": ("GET", "/api/secret/files", None),
    "wrong-method": ("GET", "/api" + md.HTTP_WRITE_COLUMNAR_PATH, None),
}


@pytest.mark.parametrize("auth", sorted(AUTH_VALUES))
def test_every_http_endpoint_needs_the_exact_token(server: LocalServer, auth: str) -> None:
    before = LocalStore(server.store.data_dir).list_datasets()
    statuses = {}
    for name, (method, path, body) in HTTP_ENDPOINTS.items():
        status, text = _http(server.http_port, method, path, body, AUTH_VALUES[auth])
        assert TOKEN.encode() not in text
        statuses[name] = status
    if auth == "right":
        assert statuses == {
            "row": 200,
            "row-bare": 200,
            "columnar": 400,
            "columnar-bare": 400,
            "unknown": 404,
            "wrong-method": 405,
        }
    else:
        assert set(statuses.values()) == {401}, statuses
        assert LocalStore(server.store.data_dir).list_datasets() == before
    # Capabilities are public by design: they say whether a token is needed, and nothing else.
    status, text = _http(server.http_port, "GET", "/api" + md.HTTP_CAPABILITIES_PATH, None, AUTH_VALUES[auth])
    assert status == 200 and b'"token_required": true' in text.replace(b'":true', b'": true')


def test_tokens_are_compared_in_constant_time(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check goes through hmac.compare_digest with the whole header value, on both wires."""
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((bytes(a), bytes(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    with grpc.insecure_channel(server.target.split("://", 1)[1]) as ch, pytest.raises(grpc.RpcError):
        ch.unary_unary(md.WRITE_COLUMN_BATCHES)(_body(), metadata=[(md.AUTHORIZATION, f"Bearer {OTHER}")], timeout=30)
    _http(server.http_port, "POST", "/api" + md.HTTP_WRITE_COLUMNAR_PATH, b"", f"Bearer {TOKEN[:5]}")
    assert (f"Bearer {OTHER}".encode(), f"Bearer {TOKEN}".encode()) in seen
    assert (f"Bearer {TOKEN[:5]}".encode(), f"Bearer {TOKEN}".encode()) in seen


# -- loopback by default -----------------------------------------------------------------------------


def _other_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses (none in some sandboxes)."""
    found = set()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: only picks the outgoing interface
            found.add(s.getsockname()[0])
    except OSError:
        pass
    with contextlib.suppress(OSError):
        found.update(i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET))
    return sorted(a for a in found if not a.startswith("127."))


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def test_local_server_binds_loopback_only_by_default(tmp_path: Path) -> None:
    others = _other_addresses()
    if not others:
        pytest.skip("this host has no address besides loopback")
    with LocalServer(tmp_path / "data", port=0, http_port=0) as srv:
        assert srv.host == "127.0.0.1"
        for port in (srv.port, srv.http_port):
            assert _reachable("127.0.0.1", port)
            for addr in others:
                assert not _reachable(addr, port), f"{addr}:{port} reachable"


def test_serve_binds_loopback_only_by_default(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "beam_nominal.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--port",
            "0",
            "--http-port",
            "0",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"listening on grpc://127\.0\.0\.1:(\d+) and http://127\.0\.0\.1:(\d+)/api\n", line)
        assert m is not None, line
        for port in map(int, m.groups()):
            assert _reachable("127.0.0.1", port)
            for addr in _other_addresses():
                assert not _reachable(addr, port)
    finally:
        proc.kill()
        proc.wait(30)


# -- rids never escape the data dir -------------------------------------------------------------------

BAD_RIDS = [
    "..",
    ".",
    "../escaped",
    "a/../../escaped",
    "/tmp/escaped",
    "a\\b",
    "..\\escaped",
    "x\x00y",
    "%2e%2e",
    "ri.ok/..",
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_rids_never_escape_the_data_dir(tmp_path: Path) -> None:
    root = tmp_path / "outer"
    data = root / "inner" / "data"
    with LocalServer(data, http_port=0) as srv:
        before = _tree(root)
        with grpc.insecure_channel(srv.target.split("://", 1)[1]) as ch:
            write = ch.unary_unary(md.WRITE_COLUMN_BATCHES)
            read = local_pb2_grpc.LocalReadServiceStub(ch)
            for rid in BAD_RIDS:
                with pytest.raises(grpc.RpcError) as info:
                    write(_body(rid), timeout=30)
                assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, rid
                for call, req in (
                    (read.ListSeries, local_pb2.ListSeriesRequest(dataset_rid=rid)),
                    (read.ReadSeries, local_pb2.ReadSeriesRequest(dataset_rid=rid, channel="c")),
                ):
                    with pytest.raises(grpc.RpcError) as info:
                        call(req, timeout=30)
                    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, rid
        # The HTTP row form names the dataset in its path: percent-encoded separators and dots too.
        for raw in ["..", "%2e%2e", "..%2Fescaped", "%2E%2E%2F%2E%2E%2Fescaped", "a%2F..%2F..", "%00", "a%5Cb"]:
            status, text = _http(srv.http_port, "POST", "/api/storage/writer/v1/nominal/" + raw, b"", None)
            assert status in (400, 404), (raw, status, text)
        # Channel names are data, never paths.
        write_ok = grpc.insecure_channel(srv.target.split("://", 1)[1])
        body = encode_request(
            "ri.ok", [SeriesBatch(SeriesKey("../../escaped"), ValueType.DOUBLE, np.arange(T, T + 1), np.ones(1))]
        )
        write_ok.unary_unary(md.WRITE_COLUMN_BATCHES)(body, timeout=30)
        write_ok.close()
        for rid in BAD_RIDS:
            with pytest.raises(ValueError):
                LocalStore(data).read(rid, "c")
    after = _tree(root)
    assert {p for p in after - before if not p.startswith("inner/data/ri.ok")} == set(), after - before
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped").exists()
    assert LocalStore(data).list_datasets() == ["ri.ok"]


# -- the token never shows -----------------------------------------------------------------------------


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.records.append(f"{record.name}: {text}")


@pytest.fixture
def all_logs() -> Iterator[_Capture]:
    cap = _Capture()
    root = logging.getLogger()
    old = root.level
    root.addHandler(cap)
    root.setLevel(logging.DEBUG)
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)]
    levels = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
    try:
        yield cap
    finally:
        root.removeHandler(cap)
        root.setLevel(old)
        for lg, lvl in levels:
            lg.setLevel(lvl)


class _Token(Secret):  # type: ignore[misc]
    def __init__(self, value: str) -> None:
        self.value = value

    def get_secret_bytes(self) -> bytes:
        return self.value.encode()


def test_the_token_never_shows(tmp_path: Path, all_logs: _Capture, capfd: pytest.CaptureFixture[str]) -> None:
    shown: list[str] = []
    # The server process: token from the environment (not in ps), with a wrong-token client.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "beam_nominal.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "p"),
            "--port",
            "0",
            "--http-port",
            "0",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NOMINAL_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        shown.append(f.read().decode(errors="replace"))
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: [lines.put(x) for x in out], daemon=True).start()
    first = lines.get(timeout=60)
    m = re.search(r"grpc://127\.0\.0\.1:(\d+) and http://127\.0\.0\.1:(\d+)/api", first)
    assert m is not None, first
    proc_urls = [f"grpc://127.0.0.1:{m.group(1)}", f"http://127.0.0.1:{m.group(2)}/api"]

    with LocalServer(tmp_path / "data", token=TOKEN, http_port=0) as srv:
        for url in [srv.target, srv.http_url, *proc_urls]:
            # Right token: delivered; the stream's repr, its report.
            s = NominalStream(url, dataset_rid="ri.sec.ok", token=TOKEN, linger=None)
            s.enqueue_batch("c", np.arange(T, T + 10), np.ones(10))
            shown += [repr(s), str(s), repr(s.close())]
            # Wrong token: the error (and everything it carries) must not show the token either.
            with pytest.raises(TargetError) as refused:  # at the first contact
                NominalStream(url, dataset_rid="ri.sec.bad", token=OTHER, linger=None, max_attempts=2)
            shown += [str(refused.value), repr(refused.value)]
            assert OTHER not in str(refused.value)

        # A pipeline with the token as a string and as a Secret, one bad element, one retried request.
        for token in (TOKEN, _Token(TOKEN)):
            transform = WriteToNominal(srv.target, dataset_rid="ri.sec.beam", token=token, max_request_points=5)
            shown += [repr(transform), str(transform), repr(transform.display_data())]
            shown += [repr(item) for item in DisplayData.create_from(transform).items]
            p = beam.Pipeline(runner=FnApiRunner())
            result = p | beam.Create([("c", T + i, float(i)) for i in range(20)] + [("c", "bad", 1.0)]) | transform
            # Logged (FnApiRunner runs in this process), so the capture below sees the failures.
            _ = result.failed | beam.Map(lambda f: logging.getLogger("test.failed").warning("%r", f))
            shown.append(repr(p.options.get_all_options()))
            graph = p.to_runner_api().SerializeToString()
            if not isinstance(token, str):
                assert TOKEN.encode() not in graph, "a Secret token travels in the pipeline graph"
            p.run().wait_until_finish()
        # A pipeline with a wrong token fails; its exception must not show that token.
        p = beam.Pipeline(runner=FnApiRunner())
        _ = (
            p
            | beam.Create([("c", T, 1.0)])
            | WriteToNominal(srv.target, dataset_rid="ri.sec.beam", token=OTHER, max_attempts=1)
        )
        with pytest.raises(Exception) as info:
            p.run().wait_until_finish()
        assert OTHER not in str(info.value) and OTHER not in repr(info.value)
        shown.append(str(info.value))
        # The Secret run re-sent the string run's requests with the same keys: stored once.
        assert LocalStore(srv.store.data_dir).read("ri.sec.beam", "c").num_rows == 20

    proc.terminate()
    proc.wait(30)
    assert proc.stderr is not None
    shown.append(proc.stderr.read())
    while not lines.empty():
        shown.append(lines.get())
    captured = capfd.readouterr()
    shown += [captured.out, captured.err, *all_logs.records]
    assert any("UNAUTHENTICATED" in x or "401" in x for x in shown), "the wrong-token paths did not run"
    assert any("FailedElement" in x and "'bad'" in x for x in all_logs.records), "the failed output was not seen"
    leaks = [x[:300] for x in shown if TOKEN in x]
    assert leaks == []
