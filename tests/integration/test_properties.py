"""Property tests (hypothesis) against a real local server on both wires:

- random series of every value type and tag set, written with ``NominalStream`` (as series and as
  single points), read back equal, bit for bit;
- random bytes, mutated valid requests and randomly built protobuf messages, sent to every write
  method over gRPC and HTTP, never crash the server (each gets a defined answer, and the server
  serves a good request right after) and never change stored data unless the server accepted them.

The Beam half (one ``WriteToNominal`` pipeline over a drawn list) is tests/beam/test_properties_beam.py.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import struct
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_nominal._wire import metadata as md
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import direct_nominal_channel_writer_pb2 as dcw
from beam_nominal._wire._proto.nominal.write import nominal_write_pb2 as nw
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream

pytestmark = pytest.mark.timeout(600)

T = 1_700_000_000_000_000_000
_rids = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("properties"), http_port=0) as srv:
        yield srv


def exact(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list | tuple):
        return tuple(exact(x) for x in v)
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    return (type(v).__name__, v)


# -- random series through NominalStream ------------------------------------------------------------

_TEXT = st.text(max_size=12)  # hypothesis' text() never draws surrogates
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_TEXT, kids, max_size=3),
    max_leaves=6,
)
_VALUES: dict[ValueType, Any] = {
    ValueType.DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
    ValueType.INT64: st.integers(-(2**63), 2**63 - 1),
    ValueType.UINT64: st.integers(0, 2**64 - 1),
    ValueType.STRING: st.text(max_size=40),
    ValueType.STRUCT: st.dictionaries(_TEXT, _JSON, max_size=4),
    ValueType.DOUBLE_ARRAY: st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=5),
    ValueType.STRING_ARRAY: st.lists(_TEXT, min_size=1, max_size=4),
}
_TAGS = st.one_of(st.none(), st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3))


@st.composite
def _series(draw: Any) -> list[tuple[str, dict[str, str] | None, ValueType, bool, list[int], list[Any]]]:
    """Series of distinct channels: (channel, tags, type, as points?, timestamps, values)."""
    out = []
    for i in range(draw(st.integers(1, 6))):
        vt = draw(st.sampled_from(list(ValueType)))
        n = draw(st.integers(1, 12))
        ts = draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n, unique=True))
        values = draw(st.lists(_VALUES[vt], min_size=n, max_size=n))
        # Single points only where a value alone says its type (an int < 2**63 says int64).
        points = vt in (ValueType.DOUBLE, ValueType.STRING, ValueType.STRUCT, ValueType.STRING_ARRAY) and draw(
            st.booleans()
        )
        out.append((f"{i}:{draw(st.text(max_size=20))}", draw(_TAGS), vt, points, ts, values))
    return out


def _column(vt: ValueType, values: list[Any]) -> Any:
    if vt.numpy_dtype is not None:
        return np.array(values, dtype=vt.numpy_dtype)
    if vt is ValueType.DOUBLE_ARRAY:
        return [np.array(v, dtype=np.float64) for v in values]
    return values


def _stored_form(vt: ValueType, v: Any) -> Any:
    if vt is ValueType.STRUCT:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return v


@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_random_series_through_nominal_stream_read_back_equal(server: LocalServer, wire: str) -> None:
    url = server.target if wire == "grpc" else server.http_url

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_series())
    def check(series: list[tuple[str, dict[str, str] | None, ValueType, bool, list[int], list[Any]]]) -> None:
        rid = f"ri.prop.stream.{next(_rids)}"
        with NominalStream(url, dataset_rid=rid, linger=None, max_request_points=7) as s:
            for channel, tags, vt, points, ts, values in series:
                if points:
                    for t, v in zip(ts, values, strict=True):
                        if vt is ValueType.STRUCT:
                            s.enqueue_struct(channel, t, v, tags)
                        else:
                            s.enqueue(channel, t, v, tags)
                else:
                    s.enqueue_batch(channel, np.array(ts, dtype=np.int64), _column(vt, values), tags)
        stored = LocalStore(server.store.data_dir).read_all(rid)
        assert sorted(stored) == sorted(SeriesKey.of(c, t) for c, t, *_ in series)
        for channel, tags, vt, _points, ts, values in series:
            assert server.store.series_info(rid, channel, tags).value_type is vt
            table = stored[SeriesKey.of(channel, tags)]
            got = sorted(
                zip(table.column("timestamp").to_pylist(), map(exact, table.column("value").to_pylist()), strict=True)
            )
            if vt is ValueType.STRUCT:
                got = [(t, exact(json.loads(v[1]))) for t, v in got]
                want = sorted((t, exact(v)) for t, v in zip(ts, values, strict=True))
            else:
                want = sorted((t, exact(_stored_form(vt, v))) for t, v in zip(ts, values, strict=True))
            assert got == want, (channel, vt)

    check()


# -- random and mutated requests never crash the server, never change data they were refused for --

_GRPC_OK = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
_HTTP_DEFINED = {200, 400, 413, 415}
BASELINE_RID = "ri.prop.baseline"


def _valid_columns() -> bytes:
    b = SeriesBatch(
        SeriesKey.of("v", {"k": "1"}), ValueType.DOUBLE, np.arange(T, T + 3), np.array([1.0, math.nan, -0.0])
    )
    s = SeriesBatch(SeriesKey.of("s"), ValueType.STRING, np.arange(T, T + 2), ["a", "é"])
    return encode_request("ri.prop.fuzz", [b, s])


def _valid_v2() -> bytes:
    req = dcw.WriteBatchesRequest(data_source_rid="ri.prop.fuzz")
    b = req.batches.add(channel="v", tags={"k": "1"})
    for i in range(3):
        t = b.points.timestamps.add()
        t.seconds, t.nanos = divmod(T + i, 10**9)
    b.points.double_points.points.extend([1.0, 2.0, 3.0])
    return req.SerializeToString()


def _valid_nominal() -> bytes:
    req = nw.WriteRequestNominal()
    s = req.series.add(channel=nw.Channel(name="v"), tags={"k": "1"})
    for i in range(3):
        p = s.points.double_points.points.add()
        p.timestamp.seconds, p.timestamp.nanos = divmod(T + i, 10**9)
        p.value = float(i)
    return req.SerializeToString()


_VALID = [_valid_columns(), _valid_v2(), _valid_nominal()]


@st.composite
def _mutated(draw: Any) -> bytes:
    body = bytearray(draw(st.sampled_from(_VALID)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]))
        pos = draw(st.integers(0, max(0, len(body) - 1)))
        if op == "flip" and body:
            body[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            body[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and body:
            del body[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del body[pos:]
        else:
            other = draw(st.sampled_from(_VALID))
            body[pos:] = other[draw(st.integers(0, len(other))) :]
    return bytes(body)


@st.composite
def _built(draw: Any) -> bytes:
    """A WriteBatchesRequest (v2) with random fields: rids, names, lengths that may not match."""
    req = dcw.WriteBatchesRequest(
        data_source_rid=draw(st.sampled_from(["ri.prop.fuzz", "", "../x", "ri/../../etc", "a" * 1100, "ri.prop.fuzz2"]))
    )
    for _ in range(draw(st.integers(0, 3))):
        b = req.batches.add(channel=draw(st.text(max_size=30)), tags=draw(st.dictionaries(_TEXT, _TEXT, max_size=2)))
        for ns in draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)):
            t = b.points.timestamps.add()
            t.seconds, t.nanos = divmod(ns, 10**9)
            if draw(st.booleans()):
                t.nanos = draw(st.integers(-(2**31), 2**31 - 1))
        kind = draw(st.sampled_from(["double", "int", "string", "none", "darr"]))
        n = draw(st.integers(0, 5))
        if kind == "double":
            b.points.double_points.points.extend(draw(st.lists(st.floats(), min_size=n, max_size=n)))
        elif kind == "int":
            b.points.int_points.points.extend(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)))
        elif kind == "string":
            b.points.string_points.points.extend(draw(st.lists(_TEXT, min_size=n, max_size=n)))
        elif kind == "darr":
            for _ in range(n):
                b.points.array_points.double_array_points.points.add().value.extend([1.0])
    return req.SerializeToString()


_BODIES = st.one_of(st.binary(max_size=300), _mutated(), _built())


def _snapshot(server: LocalServer) -> dict[str, list[Any]]:
    store = LocalStore(server.store.data_dir)
    return {
        rid: [(s.channel, s.tags, s.value_type, s.count) for s in store.list_series(rid)]
        for rid in store.list_datasets()
    }


def _ensure_baseline(server: LocalServer) -> None:
    if not server.store.list_series(BASELINE_RID):
        with NominalStream(server.target, dataset_rid=BASELINE_RID, linger=None) as s:
            s.enqueue_batch("base", np.arange(T, T + 100), np.arange(100.0))


def _good_write_works(server: LocalServer) -> None:
    with grpc.insecure_channel(server.target.split("://", 1)[1]) as ch:
        ch.unary_unary(md.WRITE_COLUMN_BATCHES)(_valid_columns(), timeout=30)


def test_random_grpc_bodies_never_crash_the_server_or_change_refused_data(server: LocalServer) -> None:
    _ensure_baseline(server)
    channel = grpc.insecure_channel(server.target.split("://", 1)[1])
    methods = {m: channel.unary_unary(m) for m in (md.WRITE_COLUMN_BATCHES, md.WRITE_BATCHES)}
    seen: set[grpc.StatusCode] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=_BODIES, method=st.sampled_from(sorted(methods)))
    def check(body: bytes, method: str) -> None:
        before = _snapshot(server)
        try:
            methods[method](body, timeout=30)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
            assert code in _GRPC_OK, (code, exc.details())
            assert _snapshot(server) == before
        seen.add(code)

    try:
        check()
    finally:
        channel.close()
    assert grpc.StatusCode.INVALID_ARGUMENT in seen
    _good_write_works(server)
    base = server.store.read(BASELINE_RID, "base")
    assert base.column("value").to_pylist() == [float(i) for i in range(100)]


def test_random_http_bodies_never_crash_the_server_or_change_refused_data(server: LocalServer) -> None:
    _ensure_baseline(server)
    paths = [
        "/api" + md.HTTP_WRITE_COLUMNAR_PATH,
        "/api" + md.HTTP_WRITE_NOMINAL_PATH.format(dataset_rid="ri.prop.fuzz"),
    ]
    seen: set[int] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        body=_BODIES,
        path=st.sampled_from(paths),
        encoding=st.sampled_from(["identity", "gzip", "zstd", "x-snappy-framed", "br"]),
    )
    def check(body: bytes, path: str, encoding: str) -> None:
        before = _snapshot(server)
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        try:
            headers = {"Content-Type": md.PROTOBUF_CONTENT_TYPE}
            if encoding != "identity":
                # Random bytes labelled as compressed: the decompressors must refuse them cleanly.
                headers["Content-Encoding"] = encoding
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            text = resp.read()
        finally:
            conn.close()
        assert resp.status in _HTTP_DEFINED, (resp.status, text[:300])
        if resp.status != 200:
            assert json.loads(text)["error"], text
            assert _snapshot(server) == before
        seen.add(resp.status)

    check()
    assert 400 in seen
    _good_write_works(server)
    base = server.store.read(BASELINE_RID, "base")
    assert base.column("value").to_pylist() == [float(i) for i in range(100)]
