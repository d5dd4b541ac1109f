"""The local server's HTTP listener: Nominal's two HTTP write forms, encodings, limits, auth, idempotency.

Every test talks to a real ``LocalServer`` (or a ``beam-nominal serve`` process) over real HTTP on
loopback with the standard library's ``http.client``, and reads back from the store. Request bodies
are built with the generated protobuf classes, as a client would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import http.client
import json
import logging
import re
import resource
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cramjam
import grpc
import numpy as np
import pytest
import zstandard
from _exact import exact
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._wire import metadata as md
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import direct_nominal_channel_writer_pb2 as dcw
from beam_nominal._wire._proto.nominal.write import nominal_write_pb2 as nw
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.server.http import MAX_FRAMES, BodyTooLargeError, decompress_body, snappy_framed_size

pytestmark = pytest.mark.timeout(120)

TOKEN = "http-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROTO = {"Content-Type": "application/x-protobuf"}
T = 1_700_000_000_123_456_789
NAN, INF = float("nan"), float("inf")
ENCODINGS = ["identity", "zstd", "gzip", "x-snappy-framed"]

# (channel, tags, value type, values); timestamps are TS, in order.
TS = [T + 1, T + 2, T + 3, T + 4]
CASES: list[tuple[str, dict[str, str], ValueType, list[Any]]] = [
    ("d", {"unit": "m", "car": "é"}, ValueType.DOUBLE, [-0.0, NAN, INF, 1.5]),
    ("i", {}, ValueType.INT64, [2**53 + 1, -(2**63), 2**63 - 1, 0]),
    ("u", {"k": ""}, ValueType.UINT64, [2**64 - 1, 0, 2**63 + 1, 7]),
    ("s", {}, ValueType.STRING, ["", "héllo ✓", "日本", "x"]),
    ("st", {}, ValueType.STRUCT, ['{"a":1}', "{}", '{"b":[1,2]}', '{"n":null}']),
    ("da", {}, ValueType.DOUBLE_ARRAY, [[1.0, 2.0], [], [NAN], [3.5, -INF]]),
    ("sa", {"x": "1"}, ValueType.STRING_ARRAY, [["a", ""], [], ["ü"], ["b", "c"]]),
]


# ---------------------------------------------------------------------------------------------
# Request bodies, as a client builds them
# ---------------------------------------------------------------------------------------------


def row_body(cases: list[tuple[str, dict[str, str], ValueType, list[Any]]], ts: list[int] = TS) -> bytes:
    """``WriteRequestNominal``: one ``Series`` per case, one point message per value."""
    req = nw.WriteRequestNominal()
    for channel, tags, vt, values in cases:
        s = req.series.add(channel=nw.Channel(name=channel), tags=tags)
        points: Any = {
            ValueType.DOUBLE: s.points.double_points,
            ValueType.INT64: s.points.integer_points,
            ValueType.UINT64: s.points.uint64_points,
            ValueType.STRING: s.points.string_points,
            ValueType.STRUCT: s.points.struct_points,
            ValueType.DOUBLE_ARRAY: s.points.array_points.double_array_points,
            ValueType.STRING_ARRAY: s.points.array_points.string_array_points,
        }[vt]
        for ns, v in zip(ts, values, strict=True):
            p = points.points.add()
            p.timestamp.seconds, p.timestamp.nanos = divmod(ns, 10**9)
            if vt.is_array:
                p.value.extend(v)
            elif vt is ValueType.STRUCT:
                p.json_string = v
            else:
                p.value = v
    return req.SerializeToString()


def columnar_body(rid: str, cases: list[tuple[str, dict[str, str], ValueType, list[Any]]], ts: list[int] = TS) -> bytes:
    """``direct_channel_writer.v2.WriteBatchesRequest``: one ``RecordsBatch`` per case."""
    req = dcw.WriteBatchesRequest(data_source_rid=rid)
    for channel, tags, vt, values in cases:
        b = req.batches.add(channel=channel, tags=tags)
        for ns in ts:
            t = b.points.timestamps.add()
            t.seconds, t.nanos = divmod(ns, 10**9)
        p = b.points
        if vt is ValueType.DOUBLE:
            p.double_points.points.extend(values)
        elif vt is ValueType.INT64:
            p.int_points.points.extend(values)
        elif vt is ValueType.UINT64:
            p.uint64_points.points.extend(values)
        elif vt is ValueType.STRING:
            p.string_points.points.extend(values)
        elif vt is ValueType.STRUCT:
            p.struct_points.points.extend(values)
        elif vt is ValueType.DOUBLE_ARRAY:
            for row in values:
                p.array_points.double_array_points.points.add().value.extend(row)
        else:
            for row in values:
                p.array_points.string_array_points.points.add().value.extend(row)
    return req.SerializeToString()


def compress(data: bytes, encoding: str) -> bytes:
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=1).compress(data)
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=1)
    if encoding == "x-snappy-framed":
        return bytes(cramjam.snappy.compress(data))
    return data


def row_path(rid: str, prefix: str = "/api") -> str:
    return prefix + md.HTTP_WRITE_NOMINAL_PATH.format(dataset_rid=rid)


def columnar_path(prefix: str = "/api") -> str:
    return prefix + md.HTTP_WRITE_COLUMNAR_PATH


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


class Reply:
    def __init__(self, resp: http.client.HTTPResponse) -> None:
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.body = resp.read()

    def json(self) -> Any:
        assert self.headers.get("content-type", "").startswith("application/json"), self.headers
        return json.loads(self.body)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | Iterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 60,
) -> Reply:
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection("localhost", port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=not isinstance(body, bytes | None))
        return Reply(conn.getresponse())
    finally:
        conn.close()


def post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> Reply:
    return request(port, "POST", path, body, {**AUTH, **PROTO, **(headers or {})})


def assert_stored(store: LocalStore, rid: str, cases: list[tuple[str, dict[str, str], ValueType, list[Any]]]) -> None:
    infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in store.list_series(rid)}
    assert len(infos) == len(cases)
    for channel, tags, vt, values in cases:
        info = infos[(channel, tuple(sorted(tags.items())))]
        assert info.value_type is vt
        table = store.read(rid, channel, tags)
        assert table.column("timestamp").to_pylist() == TS
        assert exact(table.column("value").to_pylist()) == exact(values)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("http"), token=TOKEN, http_port=0) as s:
        yield s


def good_request(server: LocalServer, rid: str) -> None:
    """A write right after a refusal: the server still serves."""
    reply = post(server.http_port, columnar_path(), columnar_body(rid, CASES[:1]))
    assert reply.status == 200, reply.body


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("prefix", ["/api", ""])
@pytest.mark.parametrize("form", ["row", "columnar"])
def test_round_trip_exact(server: LocalServer, form: str, prefix: str, encoding: str) -> None:
    rid = f"ri.test.http.{form}.{prefix.strip('/') or 'bare'}.{encoding}"
    if form == "row":
        path, body = row_path(rid, prefix), row_body(CASES)
    else:
        path, body = columnar_path(prefix), columnar_body(rid, CASES)
    headers = {} if encoding == "identity" else {"Content-Encoding": encoding}
    reply = post(server.http_port, path, compress(body, encoding), headers)
    assert (reply.status, reply.body) == (200, b"")
    assert_stored(server.store, rid, CASES)


@pytest.mark.parametrize("content_type", [None, "application/octet-stream", "application/x-protobuf; charset=binary"])
def test_content_types_taken(server: LocalServer, content_type: str | None) -> None:
    rid = f"ri.test.http.ctype.{len(content_type or '')}"
    headers = dict(AUTH) if content_type is None else {**AUTH, "Content-Type": content_type}
    reply = request(server.http_port, "POST", columnar_path(), columnar_body(rid, CASES), headers)
    assert reply.status == 200, reply.body
    assert_stored(server.store, rid, CASES)


def test_urls_and_capabilities(server: LocalServer) -> None:
    assert server.http_url == f"http://127.0.0.1:{server.http_port}/api"
    for prefix in ("/api", ""):
        # No token needed: a client learns here whether it needs one.
        reply = request(server.http_port, "GET", prefix + md.HTTP_CAPABILITIES_PATH)
        assert reply.status == 200
        caps = reply.json()
        assert caps["server"] == "beam_nominal.local"
        assert caps["write_formats"] == ["row", "columnar"]
        assert caps["content_encodings"] == ENCODINGS
        assert caps["idempotency_header"] == "Idempotency-Key"
        assert caps["max_body_bytes"] == 64 * 1024 * 1024
        assert caps["max_decompressed_bytes"] == md.MAX_MESSAGE_BYTES
        assert caps["token_required"] is True


# ---------------------------------------------------------------------------------------------
# Refusals: status, JSON error, nothing stored, still serving
# ---------------------------------------------------------------------------------------------

REFUSE_RID = "ri.test.http.refused"


def _bad_batches() -> bytes:
    req = dcw.WriteBatchesRequest.FromString(columnar_body(REFUSE_RID, CASES[:1]))
    req.batches[0].points.double_points.points.append(1.0)  # 5 values for 4 timestamps
    return req.SerializeToString()


def _type_conflict() -> bytes:
    # The same series twice in one request, once as doubles and once as strings.
    return columnar_body(REFUSE_RID, [("d", {}, ValueType.DOUBLE, [1.0] * 4), ("d", {}, ValueType.STRING, ["a"] * 4)])


Refusal = tuple[str, str, bytes | None, dict[str, str]]


def _body() -> bytes:
    return columnar_body(REFUSE_RID, CASES)


def _columnar(body: Callable[[], bytes] = _body, **headers: str | None) -> Callable[[], Refusal]:
    """A POST of ``body`` to the columnar path, with the token and content type unless overridden
    (a header given as None is left out)."""
    merged = {**AUTH, **PROTO, **headers}
    return lambda: ("POST", columnar_path(), body(), {k: v for k, v in merged.items() if v is not None})


def _cut(encoding: str, n: int) -> Callable[[], Refusal]:
    """A compressed body missing its last ``n`` bytes."""
    return _columnar(lambda: compress(_body(), encoding)[:-n], **{"Content-Encoding": encoding})


def _to(method: str, path: str, body: bytes | None = None) -> Callable[[], Refusal]:
    return lambda: (method, path, body, {**AUTH, **PROTO})


# case -> (request, status, JSON error; "" where any 4xx will do)
REFUSALS: dict[str, tuple[Callable[[], Refusal], int, str]] = {
    "malformed protobuf": (_columnar(lambda: b"\xff\xff\xff\xff"), 400, "malformed_request"),
    "malformed row protobuf": (_to("POST", row_path(REFUSE_RID), b"\x0a\x05\x0a"), 400, "malformed_request"),
    "counts differ": (_columnar(_bad_batches), 400, "invalid_request"),
    "type conflict": (_columnar(_type_conflict), 400, "invalid_request"),
    "corrupt zstd": (_cut("zstd", 7), 400, "malformed_request"),
    "corrupt gzip": (_cut("gzip", 9), 400, "malformed_request"),
    "corrupt snappy": (_cut("x-snappy-framed", 3), 400, "malformed_request"),
    "unknown encoding": (_columnar(**{"Content-Encoding": "br"}), 415, "unsupported_content_encoding"),
    "wrong content type": (_columnar(**{"Content-Type": "application/json"}), 415, "unsupported_media_type"),
    "missing token": (_columnar(Authorization=None), 401, "unauthorized"),
    "empty token": (_columnar(Authorization="Bearer "), 401, "unauthorized"),
    "wrong token": (_columnar(Authorization=f"Bearer {TOKEN}x"), 401, "unauthorized"),
    "token without Bearer": (_columnar(Authorization=TOKEN), 401, "unauthorized"),
    "bad rid in body": (_columnar(lambda: columnar_body("../x", CASES)), 400, "invalid_request"),
    "rid ..%2Fx": (_to("POST", "/api/storage/writer/v1/nominal/..%2Fx", row_body(CASES)), 400, "invalid_request"),
    "raw path ../x": (_to("POST", "/storage/writer/v1/nominal/../x", row_body(CASES)), 400, ""),
    "rid ..": (_to("POST", "/storage/writer/v1/nominal/..", row_body(CASES)), 400, "invalid_request"),
    "GET on a write path": (_to("GET", columnar_path()), 405, "method_not_allowed"),
    "GET on the row path": (_to("GET", row_path(REFUSE_RID)), 405, "method_not_allowed"),
    "unknown path": (_to("POST", "/api/storage/writer/v2/nominal", b""), 404, "not_found"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals(server: LocalServer, case: str) -> None:
    make, status, error = REFUSALS[case]
    method, path, body, headers = make()
    before = (server.store.list_datasets(), server.store.list_series(REFUSE_RID))
    reply = request(server.http_port, method, path, body, headers)
    if error:
        assert reply.status == status, reply.body
        assert reply.json()["error"] == error
        assert reply.json()["detail"]
    else:
        # A path that tries to leave the data directory: whatever aiohttp makes of it (normalised
        # to another path, or a bad rid), a refusal and nothing stored.
        assert 400 <= reply.status < 500, reply.body
        assert reply.json()["error"] in ("invalid_request", "not_found")
    if status == 401:
        assert reply.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in reply.body.decode()
    assert (server.store.list_datasets(), server.store.list_series(REFUSE_RID)) == before
    assert not (Path(server.store.data_dir).parent / "x").exists()
    good_request(server, "ri.test.http.after-refusal")


def test_body_over_limit(server: LocalServer) -> None:
    before = server.store.list_datasets()
    big = columnar_body(REFUSE_RID, CASES) + b"\x00" * (64 * 1024 * 1024)
    reply = post(server.http_port, columnar_path(), big)
    assert reply.status == 413
    assert reply.json()["error"] == "too_large"
    # Without a Content-Length (chunked), aiohttp's own limit stops the read.
    chunks = iter([big[i : i + (1 << 20)] for i in range(0, len(big), 1 << 20)])
    reply = request(server.http_port, "POST", columnar_path(), chunks, {**AUTH, **PROTO})
    assert reply.status == 413
    assert reply.json()["error"] == "too_large"
    assert server.store.list_datasets() == before
    good_request(server, "ri.test.http.after-big")


def test_decompressed_over_limit(server: LocalServer) -> None:
    # Each encoding's bound, just past MAX_MESSAGE_BYTES (zeros compress to little).
    before = server.store.list_datasets()
    body = columnar_body(REFUSE_RID, CASES) + bytes(md.MAX_MESSAGE_BYTES)
    for encoding in ("zstd", "gzip", "x-snappy-framed"):
        reply = post(server.http_port, columnar_path(), compress(body, encoding), {"Content-Encoding": encoding})
        assert reply.status == 413, (encoding, reply.body)
        assert reply.json()["error"] == "too_large"
    assert server.store.list_datasets() == before
    good_request(server, "ri.test.http.after-decompressed")


# The smallest frame of each encoding: no data, a few bytes, all the work the server's per frame.
EMPTY_FRAMES = {
    "zstd": zstandard.ZstdCompressor().compress(b""),
    "gzip": gzip.compress(b"", mtime=0),
    "x-snappy-framed": b"\xfe\x00\x00\x00",  # a padding chunk
}


def frame_cap(encoding: str, limit: int) -> int:
    """The most frames a body may have: snappy's data chunks hold 64 KiB, so it may have one per 64 KiB more."""
    return MAX_FRAMES + (limit // 65_536 if encoding == "x-snappy-framed" else 0)


@pytest.mark.parametrize("encoding", list(EMPTY_FRAMES))
def test_body_of_empty_frames_refused_at_once(server: LocalServer, encoding: str) -> None:
    # 64 MiB of them, millions of frames: refused on the frame count, in about the time the body takes to send.
    empty = EMPTY_FRAMES[encoding]
    body = empty * ((64 << 20) // len(empty))
    started = time.monotonic()
    reply = post(server.http_port, columnar_path(), body, {"Content-Encoding": encoding})
    took = time.monotonic() - started
    assert reply.status == 413, reply.body
    assert reply.json()["error"] == "too_large"
    assert f"over {frame_cap(encoding, md.MAX_MESSAGE_BYTES)} " in reply.json()["detail"]
    assert took < 10, took
    good_request(server, "ri.test.http.after-empty-frames")


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("close", ["close", "reset"])
def test_client_gone_mid_body_is_not_a_server_fault(
    server: LocalServer, caplog: pytest.LogCaptureFixture, framing: str, close: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="beam_nominal.server.http")
    listener_log = logging.getLogger("beam_nominal.server.http")
    records: list[logging.LogRecord] = []
    logged = threading.Event()

    class _Seen(logging.Handler):  # caplog's handler, on the root, may see a record after this test looked
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            logged.set()

    seen = _Seen()
    listener_log.addHandler(seen)
    try:
        head = f"POST {columnar_path()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        framed = (
            "Content-Length: 1000\r\n\r\nabc"
            if framing == "content-length"
            else "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
        )
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
            sock.sendall((head + framed).encode())
            if close == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert logged.wait(10), "the listener never noticed the connection go"
    finally:
        listener_log.removeHandler(seen)
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.DEBUG, None)], [
        (r.levelname, r.getMessage()) for r in records
    ]
    assert "connection lost" in records[0].getMessage()
    good_request(server, "ri.test.http.after-client-gone")


# ---------------------------------------------------------------------------------------------
# Idempotency, concurrency, faults, stop, TLS
# ---------------------------------------------------------------------------------------------


def test_idempotency_key_stores_once(server: LocalServer) -> None:
    rid = "ri.test.http.idem"
    body = columnar_body(rid, CASES)
    for header in ("Idempotency-Key", "x-idempotency-key", "Idempotency-Key"):
        assert post(server.http_port, columnar_path(), body, {header: "key-1"}).status == 200
    assert_stored(server.store, rid, CASES)
    # The same ledger as gRPC: a gRPC write of other points under the same key is refused
    # (tests/integration/test_idempotency_reuse.py has the rest), nothing of it stored.
    grpc_body = encode_request(rid, [SeriesBatch(SeriesKey("g"), ValueType.DOUBLE, np.array(TS), np.ones(4))])
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch, pytest.raises(grpc.RpcError) as info:
        ch.unary_unary(md.WRITE_COLUMN_BATCHES)(
            grpc_body, metadata=((md.AUTHORIZATION, f"Bearer {TOKEN}"), (md.IDEMPOTENCY_KEY, "key-1")), timeout=30
        )
    assert info.value.code() is grpc.StatusCode.ALREADY_EXISTS
    assert_stored(server.store, rid, CASES)
    # Another key is another request: stored again.
    assert post(server.http_port, columnar_path(), body, {"Idempotency-Key": "key-2"}).status == 200
    assert server.store.series_info(rid, "d", CASES[0][1]).count == 8


def test_string_arrays_of_many_series_stored_exactly_and_once(server: LocalServer) -> None:
    """String arrays take the decoder's columns (no str per string) when they can and upb's lists
    when not (a string past 16 KiB), in one request; a retry under the same key compares their
    points with the stored ones and stores nothing."""
    rid = "ri.test.http.string-arrays"
    rows = [["a", "", "ü"], [], ["\0", "\x12", "y" * 200], ["é" * 70]]
    cases = [(f"sa{k}", {"k": str(k)}, ValueType.STRING_ARRAY, rows[k:] + rows[:k]) for k in range(4)]
    cases.append(("long", {}, ValueType.STRING_ARRAY, [["z" * 20_000], ["b"], [], ["c", "d"]]))
    body = compress(row_body(cases), "zstd")
    for _ in range(2):
        reply = post(server.http_port, row_path(rid), body, {"Content-Encoding": "zstd", "Idempotency-Key": "sa-1"})
        assert reply.status == 200, reply.body
    assert_stored(server.store, rid, cases)
    assert sum(s.count for s in server.store.list_series(rid)) == 4 * len(cases)


def test_concurrent_requests_all_stored(server: LocalServer) -> None:
    rid = "ri.test.http.concurrent"
    n = 16

    def write(k: int) -> int:
        cases = [(f"c{k}", {"k": str(k)}, ValueType.DOUBLE, [float(k)] * 4)]
        body = row_body(cases) if k % 2 else columnar_body(rid, cases)
        path = row_path(rid) if k % 2 else columnar_path()
        return post(
            server.http_port, path, compress(body, ENCODINGS[k % 4]), {"Content-Encoding": ENCODINGS[k % 4]}
        ).status

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(write, range(n))) == [200] * n
    assert sorted(s.channel for s in server.store.list_series(rid)) == sorted(f"c{k}" for k in range(n))
    for k in range(n):
        assert server.store.read(rid, f"c{k}", {"k": str(k)}).column("value").to_pylist() == [float(k)] * 4


def test_middlewares_after_auth(tmp_path: Path) -> None:
    """The fault seam: a middleware answers for the server, runs after the token check, and a
    request it stalls does not hold up others."""
    release, held = threading.Event(), threading.Event()
    seen: list[str] = []

    @web.middleware
    async def faults(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.path)
        mode = request.headers.get("x-fault")
        if mode == "503":
            return web.json_response({"error": "injected"}, status=503, headers={"Retry-After": "2"})
        if mode == "429":
            raise web.HTTPTooManyRequests(headers={"Retry-After": "3"})
        if mode == "hold":
            held.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        return await handler(request)

    rid = "ri.test.http.faults"
    with LocalServer(tmp_path, token=TOKEN, http_port=0, http_middlewares=[faults]) as srv:
        body = columnar_body(rid, CASES)
        reply = post(srv.http_port, columnar_path(), body, {"x-fault": "503"})
        assert (reply.status, reply.headers["retry-after"]) == (503, "2")
        reply = post(srv.http_port, columnar_path(), body, {"x-fault": "429"})
        assert (reply.status, reply.headers["retry-after"], reply.json()["error"]) == (429, "3", "too_many_requests")
        assert srv.store.list_series(rid) == []
        # Refused by the token check: the middleware never saw it.
        seen.clear()
        assert request(srv.http_port, "POST", columnar_path(), body, {**PROTO, "x-fault": "503"}).status == 401
        assert seen == []
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            slow = pool.submit(
                post, srv.http_port, columnar_path(), columnar_body("ri.test.http.slow", CASES), {"x-fault": "hold"}
            )
            assert held.wait(30)
            assert post(srv.http_port, columnar_path(), body).status == 200
            assert not slow.done()
            release.set()
            assert slow.result(30).status == 200
        assert_stored(srv.store, rid, CASES)
        assert_stored(srv.store, "ri.test.http.slow", CASES)


def test_a_commit_in_progress_does_not_hold_up_other_requests(tmp_path: Path) -> None:
    """Decoding and committing run in worker threads: while one commit is stalled (its commit
    waits on an event, wrapped at the committer), the loop still answers and other writes land."""
    release, entered = threading.Event(), threading.Event()
    with LocalServer(tmp_path, http_port=0) as srv:
        committer = srv._committer
        assert committer is not None
        real_commit = committer.commit

        def stalled_commit(rid: str, *args: Any, **kwargs: Any) -> bool:
            if rid == "ri.test.http.stalled":
                entered.set()
                assert release.wait(30)
            return real_commit(rid, *args, **kwargs)

        committer.commit = stalled_commit  # type: ignore[method-assign]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            stalled = pool.submit(
                request, srv.http_port, "POST", columnar_path(), columnar_body("ri.test.http.stalled", CASES), PROTO
            )
            assert entered.wait(30)
            assert request(srv.http_port, "GET", md.HTTP_CAPABILITIES_PATH, timeout=10).status == 200
            fast = request(
                srv.http_port, "POST", columnar_path(), columnar_body("ri.test.http.fast", CASES), PROTO, timeout=10
            )
            assert fast.status == 200
            assert not stalled.done()
            release.set()
            assert stalled.result(30).status == 200
        assert_stored(srv.store, "ri.test.http.fast", CASES)
        assert_stored(srv.store, "ri.test.http.stalled", CASES)


@pytest.mark.parametrize(
    ("fault", "status", "error"),
    [(OSError(28, "No space left on device"), 503, "storage_error"), (RuntimeError("a bug"), 500, "internal")],
)
def test_commit_faults(tmp_path: Path, fault: Exception, status: int, error: str) -> None:
    """A storage error is retryable (503, Retry-After); anything unforeseen is a 500 that leaks no
    detail; either way the server keeps serving."""
    with LocalServer(tmp_path, http_port=0) as srv:
        committer = srv._committer
        assert committer is not None
        real_commit = committer.commit

        def failing_commit(rid: str, *args: Any, **kwargs: Any) -> bool:
            if rid == "ri.test.http.faulty":
                raise fault
            return real_commit(rid, *args, **kwargs)

        committer.commit = failing_commit  # type: ignore[method-assign]
        reply = request(srv.http_port, "POST", columnar_path(), columnar_body("ri.test.http.faulty", CASES), PROTO)
        assert (reply.status, reply.json()["error"]) == (status, error)
        assert ("retry-after" in reply.headers) is (status == 503)
        assert "a bug" not in reply.body.decode()
        reply = request(srv.http_port, "POST", columnar_path(), columnar_body("ri.test.http.fine", CASES), PROTO)
        assert reply.status == 200
        assert srv.store.list_datasets() == ["ri.test.http.fine"]


def test_stopping_committer_is_503(tmp_path: Path) -> None:
    with LocalServer(tmp_path, http_port=0) as srv:
        assert srv._committer is not None
        srv._committer.close()
        reply = request(srv.http_port, "POST", columnar_path(), columnar_body("ri.test.http.stopping", CASES), PROTO)
        assert (reply.status, reply.json()["error"], reply.headers["retry-after"]) == (503, "unavailable", "1")
        assert srv.store.list_datasets() == []


def _refused(port: int) -> bool:
    try:
        request(port, "GET", md.HTTP_CAPABILITIES_PATH, timeout=2)
    except ConnectionRefusedError:
        return True
    except (ConnectionResetError, TimeoutError):
        # Caught in the backlog as the socket closed: reset, or (CPython 3.11's asyncio accepts
        # it and then drops it, as its server is closed) left unanswered.
        pass
    return False


def test_stop_lets_a_request_in_progress_finish(tmp_path: Path) -> None:
    release, held = threading.Event(), threading.Event()

    @web.middleware
    async def hold(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "POST":
            held.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        return await handler(request)

    rid = "ri.test.http.stop"
    srv = LocalServer(tmp_path, http_port=0, http_middlewares=[hold]).start()
    port = srv.http_port
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        inflight = pool.submit(request, port, "POST", columnar_path(), columnar_body(rid, CASES), PROTO)
        assert held.wait(30)
        stopping = pool.submit(srv.stop, 30)
        # The listening socket closes at once; the held request is still being served.
        assert any(_refused(port) for _ in range(100))
        assert not stopping.done()
        release.set()
        assert inflight.result(30).status == 200
        stopping.result(30)
    assert_stored(LocalStore(tmp_path), rid, CASES)


def test_https_with_the_servers_certificate(tmp_path: Path, tls_files: Any) -> None:
    rid = "ri.test.http.tls"
    with LocalServer(tmp_path, token=TOKEN, tls_cert=tls_files.cert, tls_key=tls_files.key, http_port=0) as srv:
        assert srv.http_url == f"https://127.0.0.1:{srv.http_port}/api"
        ctx = ssl.create_default_context(cadata=tls_files.cert_pem.decode())
        reply = request(srv.http_port, "POST", columnar_path(), columnar_body(rid, CASES), {**AUTH, **PROTO}, ctx)
        assert reply.status == 200
        assert_stored(srv.store, rid, CASES)


def test_busy_http_port_is_an_error(tmp_path: Path, server: LocalServer) -> None:
    with pytest.raises(RuntimeError, match="cannot bind"):
        LocalServer(tmp_path, http_port=server.http_port).start()


# ---------------------------------------------------------------------------------------------
# Bounded decompression
# ---------------------------------------------------------------------------------------------


def _vm(pid: int, field: str) -> int:
    """A /proc/PID/status memory figure, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


def _zstd_zeros(total: int) -> bytes:
    """``total`` zero bytes as one zstd frame, from a streaming compressor (never all in memory)."""
    cobj = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = bytes(1 << 20)
    parts = [cobj.compress(zeros) for _ in range(total >> 20)]
    parts.append(cobj.flush())
    return b"".join(parts)


class Serve:
    """A ``beam-nominal serve --http-port 0`` subprocess, ready once it printed its one line."""

    SCRIPT = Path(sys.executable).parent / "beam-nominal"
    READY = re.compile(r"listening on (grpc://\S+) and (http://\S+)\n")

    def __init__(self, data_dir: Path, *extra: str, limit_address_space: int | None = None) -> None:
        base = [str(self.SCRIPT)] if self.SCRIPT.exists() else [sys.executable, "-m", "beam_nominal.cli"]
        cmd = [*base, "serve", "--data-dir", str(data_dir), "--port", "0", "--http-port", "0", *extra]

        def limit() -> None:
            if limit_address_space is not None:
                resource.setrlimit(resource.RLIMIT_AS, (limit_address_space, limit_address_space))

        # preexec_fn only when needed: it makes Popen fork (not spawn) and run Python in the child
        # while this process's gRPC threads run, which now and then kills the child before exec.
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=limit if limit_address_space is not None else None,
        )
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline()
        m = self.READY.fullmatch(self.line)
        if m is None:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"serve printed {self.line!r}; stderr: {err}")
        self.grpc_url, self.http_url = m.group(1), m.group(2)
        self.http_port = int(self.http_url.rsplit(":", 1)[1].split("/")[0])

    def stop(self) -> tuple[int, str, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


def test_serve_prints_both_urls_and_stops_on_sigterm(tmp_path: Path) -> None:
    serve = Serve(tmp_path, "--token", TOKEN)
    try:
        assert re.fullmatch(r"listening on grpc://127\.0\.0\.1:\d+ and http://127\.0\.0\.1:\d+/api\n", serve.line)
        rid = "ri.test.http.serve"
        reply = post(
            serve.http_port, columnar_path(), compress(columnar_body(rid, CASES), "zstd"), {"Content-Encoding": "zstd"}
        )
        assert reply.status == 200
    finally:
        code, out, err = serve.stop()
    assert code == 0, err
    assert out == ""  # the one line was all
    assert TOKEN not in err
    assert_stored(LocalStore(tmp_path), rid, CASES)


def test_zstd_bomb_refused_with_bounded_memory(tmp_path: Path) -> None:
    """10 GB of zeros in ~330 KB of zstd: refused with 413 before it is expanded past the limit.

    In its own process, so the server's peak memory is measured alone; the address space limit
    keeps an unbounded expansion from taking the machine down (it fails as a MemoryError instead).
    """
    bomb = _zstd_zeros(10 * 1024**3)
    assert len(bomb) < 1024 * 1024
    serve = Serve(tmp_path, limit_address_space=3 * 1024**3)
    try:
        rss_before = _vm(serve.proc.pid, "VmRSS")
        reply = request(serve.http_port, "POST", columnar_path(), bomb, {**PROTO, "Content-Encoding": "zstd"})
        assert reply.status == 413, reply.body
        assert reply.json()["error"] == "too_large"
        peak = _vm(serve.proc.pid, "VmHWM")
        # What is held is at most the limit (256 MiB) of decompressed chunks plus one block.
        assert peak - rss_before < md.MAX_MESSAGE_BYTES + 128 * 1024 * 1024, (peak, rss_before)
        assert LocalStore(tmp_path).list_datasets() == []
        rid = "ri.test.http.after-bomb"
        reply = request(serve.http_port, "POST", columnar_path(), columnar_body(rid, CASES), PROTO)
        assert reply.status == 200
        assert_stored(LocalStore(tmp_path), rid, CASES)
    finally:
        code, _, err = serve.stop()
    assert code == 0, err


_ENCODERS = {
    "zstd": lambda d: zstandard.ZstdCompressor(level=1).compress(d),
    "zstd-stream": lambda d: b"".join(
        [
            (c := zstandard.ZstdCompressor(level=3).compressobj()).compress(d[: len(d) // 2]),
            c.compress(d[len(d) // 2 :]),
            c.flush(),
        ]
    ),
    "zstd-2-frames": lambda d: zstandard.ZstdCompressor().compress(d[:3]) + zstandard.ZstdCompressor().compress(d[3:]),
    "gzip": gzip.compress,
    "gzip-2-members": lambda d: gzip.compress(d[:5]) + gzip.compress(d[5:]),
    "x-snappy-framed": lambda d: bytes(cramjam.snappy.compress(d)),
}
_DATA = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 40_000)),
)


@settings(max_examples=150, deadline=None)
@given(data=_DATA, which=st.sampled_from(sorted(_ENCODERS)), slack=st.integers(-3, 3))
def test_decompress_body_round_trip_and_bound(data: bytes, which: str, slack: int) -> None:
    encoding = which.split("-2-")[0].removesuffix("-stream")
    body = _ENCODERS[which](data)
    limit = max(0, len(data) + slack)
    if len(data) <= limit:
        assert decompress_body(body, encoding, limit) == data
    else:
        with pytest.raises(BodyTooLargeError):
            decompress_body(body, encoding, limit)
    if encoding == "x-snappy-framed":
        assert snappy_framed_size(body) == len(data)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(min_size=1, max_size=3000), which=st.sampled_from(["zstd", "gzip"]), cut=st.integers(1, 40))
def test_decompress_body_refuses_truncated(data: bytes, which: str, cut: int) -> None:
    body = _ENCODERS[which](data)
    with pytest.raises(ValueError, match=r"not valid|ends inside"):
        decompress_body(body[: max(0, len(body) - cut)], which, 1 << 20)


def test_decompress_body_bounds_every_encoding_before_expanding() -> None:
    # 64 MiB of zeros, limit 1 MiB: each decompressor stops within a block of the limit, so
    # what Python allocates on the way stays near the limit.
    zeros = bytes(64 << 20)
    for encoding in ("zstd", "gzip", "x-snappy-framed"):
        body = compress(zeros, encoding)
        tracemalloc.start()
        try:
            with pytest.raises(BodyTooLargeError):
                decompress_body(body, encoding, 1 << 20)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 << 20, (encoding, peak)
    with pytest.raises(ValueError, match="unknown content encoding"):
        decompress_body(b"", "br", 10)
    with pytest.raises(ValueError, match="unskippable"):
        snappy_framed_size(b"\x02\x00\x00\x00")
    assert decompress_body(zlib.compress(b"x"), "identity", 100) == zlib.compress(b"x")


@pytest.mark.parametrize("encoding", list(EMPTY_FRAMES))
def test_decompress_body_caps_frames(encoding: str) -> None:
    # A frame with data, then empty ones up to the cap: taken; one more: refused.
    limit = 1 << 20
    cap = frame_cap(encoding, limit)
    first = compress(b"data", encoding)
    frames_in_first = 2 if encoding == "x-snappy-framed" else 1  # snappy: the stream identifier and the data
    at_cap = first + EMPTY_FRAMES[encoding] * (cap - frames_in_first)
    assert decompress_body(at_cap, encoding, limit) == b"data"
    with pytest.raises(BodyTooLargeError, match=f"over {cap} "):
        decompress_body(at_cap + EMPTY_FRAMES[encoding], encoding, limit)


def test_decompress_body_does_not_copy_the_rest_per_gzip_member() -> None:
    # Empty members up to the cap, then one of 48 MiB: the rest of the body is not copied per member
    # (that was 4095 copies of 48 MiB).
    data = bytes(48 << 20)
    stored = zlib.compressobj(0, wbits=16 + zlib.MAX_WBITS)  # as big as the data, and fast
    body = EMPTY_FRAMES["gzip"] * (MAX_FRAMES - 1) + stored.compress(data) + stored.flush()
    started = time.monotonic()
    out = decompress_body(body, "gzip", md.MAX_MESSAGE_BYTES)
    took = time.monotonic() - started
    assert out == data
    assert took < 10, took
