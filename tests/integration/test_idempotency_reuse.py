"""An idempotency key reused with a different body is refused, on both wires.

Our clients derive the key from the body, so their retries always match; a client with its own
key scheme (a counter that restarts at 0, a per-batch UUID reused by a bug) would otherwise lose
its second body silently, answered OK with nothing stored. The server keeps a digest of each
keyed request's points in its commit's manifest and refuses a key whose stored digest differs
(gRPC ALREADY_EXISTS, HTTP 422 ``idempotency_key_reused``), storing nothing of it. A true retry
(the same points, even in another wire form or content encoding) is a duplicate.
"""

from __future__ import annotations

import gzip
import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from beam_nominal._wire import metadata as md
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import direct_nominal_channel_writer_pb2 as dcw
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore

pytestmark = pytest.mark.timeout(60)

RID = "ri.test.idem-reuse"
T = 1_700_000_000_000_000_000


def grpc_body(values: list[float], channel: str = "temp") -> bytes:
    ts = np.arange(T, T + len(values), dtype=np.int64)
    return encode_request(RID, [SeriesBatch(SeriesKey(channel), ValueType.DOUBLE, ts, np.array(values))])


def http_body(values: list[float], channel: str = "temp") -> bytes:
    """The same points as :func:`grpc_body` as the HTTP columnar form (``WriteBatchesRequest`` v2)."""
    req = dcw.WriteBatchesRequest(data_source_rid=RID)
    b = req.batches.add(channel=channel)
    for i in range(len(values)):
        t = b.points.timestamps.add()
        t.seconds, t.nanos = divmod(T + i, 10**9)
    b.points.double_points.points.extend(values)
    return req.SerializeToString()


def grpc_write(srv: LocalServer, body: bytes, key: str) -> None:
    with grpc.insecure_channel(srv.target.split("://", 1)[1]) as ch:
        ch.unary_unary(md.WRITE_COLUMN_BATCHES)(body, metadata=((md.IDEMPOTENCY_KEY, key),), timeout=30)


def http_write(srv: LocalServer, body: bytes, key: str, encoding: str = "identity") -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": md.PROTOBUF_CONTENT_TYPE, md.HTTP_IDEMPOTENCY_KEY: key}
    if encoding == "gzip":
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=30)
    try:
        conn.request("POST", "/api" + md.HTTP_WRITE_COLUMNAR_PATH, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else {})
    finally:
        conn.close()


def stored(data: Path, channel: str = "temp") -> list[float]:
    values: list[float] = LocalStore(data).read(RID, channel).column("value").to_pylist()
    return values


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[LocalServer]:
    with LocalServer(tmp_path / "data", http_port=0) as s:
        yield s


def test_grpc_key_reused_with_another_body_is_refused(srv: LocalServer) -> None:
    grpc_write(srv, grpc_body([1.0, 2.0]), "k1")
    with pytest.raises(grpc.RpcError) as info:
        grpc_write(srv, grpc_body([3.0, 4.0, 5.0]), "k1")
    assert info.value.code() is grpc.StatusCode.ALREADY_EXISTS
    assert "idempotency key 'k1'" in (info.value.details() or "")
    assert "different" in (info.value.details() or "")
    assert stored(srv.store.data_dir) == [1.0, 2.0]
    # The retry it would have been is still a duplicate, stored once.
    grpc_write(srv, grpc_body([1.0, 2.0]), "k1")
    assert stored(srv.store.data_dir) == [1.0, 2.0]


def test_http_key_reused_with_another_body_is_refused(srv: LocalServer) -> None:
    assert http_write(srv, http_body([1.0, 2.0]), "k1")[0] == 200
    status, body = http_write(srv, http_body([1.0, 2.5]), "k1")
    assert status == 422, body
    assert body["error"] == "idempotency_key_reused"
    assert "idempotency key 'k1'" in body["detail"]
    assert stored(srv.store.data_dir) == [1.0, 2.0]


def test_a_retry_in_another_form_or_encoding_is_still_a_duplicate(srv: LocalServer) -> None:
    """The digest is of the points, not of the bytes: gzip, or the gRPC form, of the same points match."""
    assert http_write(srv, http_body([1.0, float("nan")]), "k1")[0] == 200
    assert http_write(srv, http_body([1.0, float("nan")]), "k1", encoding="gzip")[0] == 200
    grpc_write(srv, grpc_body([1.0, float("nan")]), "k1")
    values = stored(srv.store.data_dir)
    assert len(values) == 2 and values[0] == 1.0


def test_another_channel_under_the_same_key_is_refused_across_wires(srv: LocalServer) -> None:
    grpc_write(srv, grpc_body([1.0]), "shared")
    status, body = http_write(srv, http_body([1.0], channel="other"), "shared")
    assert (status, body["error"]) == (422, "idempotency_key_reused")
    assert [s.channel for s in LocalStore(srv.store.data_dir).list_series(RID)] == ["temp"]


def test_refusal_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LocalServer(data, http_port=0) as s:
        grpc_write(s, grpc_body([1.0, 2.0]), "k1")
    with LocalServer(data, http_port=0) as s:
        assert http_write(s, http_body([9.0]), "k1")[0] == 422
        grpc_write(s, grpc_body([1.0, 2.0]), "k1")
    assert stored(data) == [1.0, 2.0]


def test_concurrent_writes_of_one_key_with_different_bodies(srv: LocalServer) -> None:
    """Exactly one body is stored; every other writer is either its duplicate or refused."""
    bodies = [grpc_body([float(i)] * 3) for i in range(3)] * 2
    barrier = threading.Barrier(len(bodies))
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(body: bytes) -> None:
        barrier.wait(10)
        try:
            grpc_write(srv, body, "race")
            out = "ok"
        except grpc.RpcError as exc:
            out = exc.code().name
        with lock:
            outcomes.append(out)

    threads = [threading.Thread(target=write, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    values = stored(srv.store.data_dir)
    assert len(values) == 3 and len(set(values)) == 1
    winner = int(values[0])
    # Both copies of the winning body answer OK (one stored, one duplicate); the other four are refused.
    assert sorted(outcomes) == ["ALREADY_EXISTS"] * 4 + ["ok"] * 2, (winner, outcomes)


ALL_TYPES: list[tuple[str, dict[str, str], ValueType, list[Any]]] = [
    ("d", {"unit": "m"}, ValueType.DOUBLE, [-0.0, float("nan"), float("inf")]),
    ("i", {}, ValueType.INT64, [-(2**63), 2**63 - 1, 0]),
    ("u", {"k": ""}, ValueType.UINT64, [2**64 - 1, 0, 7]),
    ("s", {}, ValueType.STRING, ["", "héllo ✓", '"a","b"']),
    ("st", {}, ValueType.STRUCT, ['{"a":1}', "{}", '{"n":null}']),
    ("da", {}, ValueType.DOUBLE_ARRAY, [[1.0, 2.0], [], [float("nan")]]),
    ("da2", {}, ValueType.DOUBLE_ARRAY, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
    ("sa", {"x": "1"}, ValueType.STRING_ARRAY, [["a", ""], [], ["ü"]]),
]


def all_types_grpc() -> bytes:
    ts = np.arange(T, T + 3, dtype=np.int64)
    batches = []
    for channel, tags, vt, values in ALL_TYPES:
        col: Any
        if vt is ValueType.DOUBLE_ARRAY:
            # Equal widths as one matrix, as the packer sends them; ragged rows as a list.
            widths = {len(r) for r in values}
            col = np.array(values) if len(widths) == 1 else [np.array(r, dtype=np.float64) for r in values]
        elif vt.numpy_dtype is not None:
            col = np.array(values, dtype=vt.numpy_dtype)
        else:
            col = values
        batches.append(SeriesBatch(SeriesKey.of(channel, tags), vt, ts, col))
    return encode_request(RID, batches)


def all_types_http() -> bytes:
    req = dcw.WriteBatchesRequest(data_source_rid=RID)
    for channel, tags, vt, values in ALL_TYPES:
        b = req.batches.add(channel=channel, tags=tags)
        for i in range(3):
            t = b.points.timestamps.add()
            t.seconds, t.nanos = divmod(T + i, 10**9)
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


def test_every_value_type_retried_on_the_other_wire_is_a_duplicate(srv: LocalServer) -> None:
    """The stored commit, read back, digests as the request did: for every value type, the
    matrix form of double arrays, NaN and -0.0; and one changed value is told apart."""
    grpc_write(srv, all_types_grpc(), "all")
    store = LocalStore(srv.store.data_dir)
    before = {s.channel: s.count for s in store.list_series(RID)}
    assert http_write(srv, all_types_http(), "all")[0] == 200
    grpc_write(srv, all_types_grpc(), "all")
    assert {s.channel: s.count for s in store.list_series(RID)} == before == {c: 3 for c, *_ in ALL_TYPES}
    changed = dcw.WriteBatchesRequest.FromString(all_types_http())
    changed.batches[0].points.double_points.points[0] = 0.0  # -0.0 -> 0.0: other bytes, other points
    status, body = http_write(srv, changed.SerializeToString(), "all")
    assert (status, body["error"]) == (422, "idempotency_key_reused")
    assert {s.channel: s.count for s in store.list_series(RID)} == before
