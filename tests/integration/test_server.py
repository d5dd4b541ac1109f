"""The local ingest server in-process: round trips, idempotency, validation, auth, fault seam, TLS.

Every test talks to a real ``LocalServer`` over a real gRPC channel on loopback and reads back
through a fresh ``LocalStore`` on the same directory and through ``RemoteStore``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
from _exact import exact

from beam_nominal._wire import metadata as md
from beam_nominal._wire._proto.beam_nominal.local.v1 import local_pb2, local_pb2_grpc
from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore, RemoteStore

pytestmark = pytest.mark.timeout(60)

RID = "ri.nominal.main.dataset.test-1"
T = 1_700_000_000_123_456_789
# Out of order, with two equal timestamps: reads come back sorted, the equal pair in arrival order.
TS = [T + 5, T + 1, T + 3, T + 3]
TS_SORTED = [T + 1, T + 3, T + 3, T + 5]
NAN, INF = float("nan"), float("inf")

# (channel, tags, value type, values in TS order, values expected in TS_SORTED order)
CASES: list[tuple[str, dict[str, str] | None, ValueType, list[Any], list[Any]]] = [
    ("d", {"unit": "m", "car": "é"}, ValueType.DOUBLE, [-0.0, NAN, INF, -INF], [NAN, INF, -INF, -0.0]),
    (
        "i",
        None,
        ValueType.INT64,
        [2**53 + 1, -(2**63), 2**63 - 1, 0],
        [-(2**63), 2**63 - 1, 0, 2**53 + 1],
    ),
    ("u", {}, ValueType.UINT64, [2**64 - 1, 0, 2**63 + 1, 7], [0, 2**63 + 1, 7, 2**64 - 1]),
    ("s", {"k": ""}, ValueType.STRING, ["", "héllo ✓", "日本", "xxx"], ["héllo ✓", "日本", "xxx", ""]),
    (
        "st",
        None,
        ValueType.STRUCT,
        ['{"a":1}', "{}", '{"b":[1,2],"c":"é"}', '{"n":null}'],
        ["{}", '{"b":[1,2],"c":"é"}', '{"n":null}', '{"a":1}'],
    ),
    (
        "da",
        None,
        ValueType.DOUBLE_ARRAY,
        [[1.0, 2.0], [], [NAN], [3.5, -INF]],
        [[], [NAN], [3.5, -INF], [1.0, 2.0]],
    ),
    (
        "sa",
        {"x": "1"},
        ValueType.STRING_ARRAY,
        [["a", ""], [], ["ü"], ["b", "c", "d"]],
        [[], ["ü"], ["b", "c", "d"], ["a", ""]],
    ),
]


def series_batch(channel: str, tags: dict[str, str] | None, vt: ValueType, values: list[Any]) -> SeriesBatch:
    ts = np.array(TS[: len(values)], dtype=np.int64)
    col: Any
    if vt is ValueType.DOUBLE_ARRAY:
        col = [np.array(r, dtype=np.float64) for r in values]
    elif vt.numpy_dtype is not None:
        col = np.array(values, dtype=vt.numpy_dtype)
    else:
        col = list(values)
    return SeriesBatch(SeriesKey.of(channel, tags), vt, ts, col)


def all_types_request(rid: str = RID) -> bytes:
    return encode_request(rid, [series_batch(c, t, vt, vals) for c, t, vt, vals, _ in CASES])


def _pb_ts(ns: int) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    return Timestamp(seconds=ns // 10**9, nanos=ns % 10**9)


def all_types_row_request(rid: str = RID) -> bytes:
    """The same points as ``all_types_request``, in row form (``WriteBatchesRequest``)."""
    req = cw.WriteBatchesRequest(data_source_rid=rid)
    for channel, tags, vt, values, _ in CASES:
        rb = req.batches.add(channel=channel, tags=tags or {})
        for ns, v in zip(TS, values, strict=True):
            if vt is ValueType.DOUBLE:
                rb.points.double_points.points.add(timestamp=_pb_ts(ns), value=v)
            elif vt is ValueType.INT64:
                rb.points.int64_points.points.add(timestamp=_pb_ts(ns), value=v)
            elif vt is ValueType.UINT64:
                rb.points.uint64_points.points.add(timestamp=_pb_ts(ns), value=v)
            elif vt is ValueType.STRING:
                rb.points.string_points.points.add(timestamp=_pb_ts(ns), value=v)
            elif vt is ValueType.STRUCT:
                rb.points.struct_points.points.add(timestamp=_pb_ts(ns), json=v)
            elif vt is ValueType.DOUBLE_ARRAY:
                rb.points.array_points.double_array_points.points.add(timestamp=_pb_ts(ns), values=v)
            else:
                rb.points.array_points.string_array_points.points.add(timestamp=_pb_ts(ns), values=v)
    return req.SerializeToString()


def address(target: str) -> str:
    return target.split("://", 1)[1]


class Client:
    """Raw unary calls on a real channel; bytes in, so requests reach the server as built."""

    def __init__(self, target: str, token: str | None = None) -> None:
        self.channel = grpc.insecure_channel(
            address(target), options=[("grpc.max_send_message_length", md.MAX_MESSAGE_BYTES)]
        )
        self.token = token
        self.columns = self.channel.unary_unary(md.WRITE_COLUMN_BATCHES)
        self.rows = self.channel.unary_unary(md.WRITE_BATCHES)

    def meta(self, key: str | None) -> list[tuple[str, str]]:
        m = []
        if key is not None:
            m.append((md.IDEMPOTENCY_KEY, key))
        if self.token is not None:
            m.append((md.AUTHORIZATION, f"Bearer {self.token}"))
        return m

    def write(self, body: bytes, key: str | None = None) -> bytes:
        out: bytes = self.columns(body, metadata=self.meta(key), timeout=30)
        return out

    def write_rows(self, body: bytes, key: str | None = None) -> bytes:
        out: bytes = self.rows(body, metadata=self.meta(key), timeout=30)
        return out

    def rejected(self, body: bytes, key: str | None = None, rows: bool = False) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as info:
            (self.write_rows if rows else self.write)(body, key)
        return info.value


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    with LocalServer(tmp_path / "data", port=0) as srv:
        yield srv


@pytest.fixture
def client(server: LocalServer) -> Iterator[Client]:
    c = Client(server.target)
    yield c
    c.channel.close()


def snapshot(data_dir: Path) -> tuple[list[Any], list[str]]:
    """Series summaries and every file under the data dir: equal snapshots mean nothing changed."""
    store = LocalStore(data_dir)
    series = [s for rid in store.list_datasets() for s in store.list_series(rid)]
    files = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if p.is_file())
    return series, files


def assert_all_types_stored(stores: Sequence[Any], copies: int = 1) -> None:
    for store in stores:
        infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in store.list_series(RID)}
        assert len(infos) == len(CASES)
        for channel, tags, vt, _values, expected in CASES:
            info = infos[(channel, tuple(sorted((tags or {}).items())))]
            assert (info.value_type, info.count) == (vt, 4 * copies)
            assert (info.min_timestamp_ns, info.max_timestamp_ns) == (T + 1, T + 5)
            table = store.read(RID, channel, tags)
            assert table.column_names == ["timestamp", "value"]
            assert str(table.schema.field("timestamp").type) == "int64"
            want_ts = [t for t in TS_SORTED for _ in range(copies)]
            want_vals = [v for v in expected for _ in range(copies)] if copies == 1 else None
            assert table.column("timestamp").to_pylist() == want_ts, channel
            if want_vals is not None:
                assert exact(table.column("value").to_pylist()) == exact(want_vals), channel


ARROW_TYPES = {
    "d": "double",
    "i": "int64",
    "u": "uint64",
    "s": "string",
    "st": "string",
    "da": "list<item: double>",
    "sa": "list<item: string>",
}


def test_every_type_round_trips_through_write_column_batches(server: LocalServer, client: Client) -> None:
    assert client.write(all_types_request()) == b""
    remote = RemoteStore(server.target)
    try:
        assert_all_types_stored([LocalStore(server.store.data_dir), server.store, remote])
        for channel, tags, *_ in CASES:
            assert (
                str(LocalStore(server.store.data_dir).read(RID, channel, tags).schema.field("value").type)
                == (ARROW_TYPES[channel])
            )
    finally:
        remote.close()


def test_every_type_round_trips_through_write_batches(server: LocalServer, client: Client) -> None:
    assert client.write_rows(all_types_row_request()) == b""
    remote = RemoteStore(server.target)
    try:
        assert_all_types_stored([LocalStore(server.store.data_dir), remote])
    finally:
        remote.close()


def test_data_is_plain_parquet_queryable_per_dataset(server: LocalServer, client: Client) -> None:
    client.write(all_types_request())
    client.write(all_types_request())
    commits = server.store.data_dir / RID / "commits"
    files = sorted(str(p) for p in commits.glob("*.parquet"))
    assert len(files) == 2  # one file per commit
    table = pads.dataset(files, format="parquet").to_table()
    value_columns = {f"value_{vt.value}" for _c, _t, vt, _v, _s in CASES}
    assert set(table.column_names) == {"channel", "tags", "timestamp"} | value_columns
    assert table.num_rows == 2 * sum(len(values) for *_, values, _sorted in CASES)
    doubles = table.filter(pc.is_valid(table.column("value_double")))
    assert doubles.num_rows == 8
    assert set(doubles.column("channel").to_pylist()) == {"d"}
    assert set(doubles.column("tags").to_pylist()) == {'{"car":"é","unit":"m"}'}
    assert [exact(v) for v in doubles.column("value_double").to_pylist()[:4]] == exact(CASES[0][3])


def test_tags_none_and_empty_are_one_series(server: LocalServer, client: Client) -> None:
    client.write(encode_request(RID, [series_batch("c", None, ValueType.DOUBLE, [1.0])]))
    client.write(encode_request(RID, [series_batch("c", {}, ValueType.DOUBLE, [2.0])]))
    [info] = server.store.list_series(RID)
    assert (info.channel, info.tags, info.count) == ("c", {}, 2)
    assert server.store.read(RID, "c", None).column("value").to_pylist() == [1.0, 2.0]
    assert server.store.read(RID, "c", {}).column("value").to_pylist() == [1.0, 2.0]


def test_equal_timestamps_are_all_kept_in_arrival_order(server: LocalServer, client: Client) -> None:
    for first in (10.0, 20.0, 30.0):
        batch = SeriesBatch(
            SeriesKey.of("eq"),
            ValueType.DOUBLE,
            np.array([T, T], dtype=np.int64),
            np.array([first, first + 1]),
        )
        client.write(encode_request(RID, [batch]))
    table = LocalStore(server.store.data_dir).read(RID, "eq")
    assert table.column("timestamp").to_pylist() == [T] * 6
    assert table.column("value").to_pylist() == [10.0, 11.0, 20.0, 21.0, 30.0, 31.0]


def test_same_batch_twice_in_one_request_is_stored_twice(server: LocalServer, client: Client) -> None:
    b = series_batch("twice", None, ValueType.INT64, [1, 2])
    client.write(encode_request(RID, [b, b]))
    table = server.store.read(RID, "twice")
    assert table.column("value").to_pylist() == [2, 2, 1, 1]


def test_idempotency_key_stores_once_also_after_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    body = all_types_request()
    with LocalServer(data) as srv:
        c = Client(srv.target)
        c.write(body, key="key-1")
        c.write(body, key="key-1")
        c.channel.close()
    assert_all_types_stored([LocalStore(data)], copies=1)
    before = snapshot(data)
    with LocalServer(data) as srv:
        c = Client(srv.target)
        assert c.write(body, key="key-1") == b""
        c.channel.close()
    assert snapshot(data) == before
    with LocalServer(data) as srv:
        c = Client(srv.target)
        c.write(body, key="key-2")
        c.channel.close()
    assert_all_types_stored([LocalStore(data)], copies=2)


def test_requests_without_key_are_stored_every_time(server: LocalServer, client: Client) -> None:
    body = encode_request(RID, [series_batch("nokey", None, ValueType.DOUBLE, [1.0, 2.0])])
    client.write(body)
    client.write(body)
    [info] = server.store.list_series(RID)
    assert info.count == 4


def test_concurrent_writes_of_one_key_store_once(server: LocalServer, client: Client) -> None:
    body = encode_request(RID, [series_batch("k", None, ValueType.DOUBLE, [1.0, 2.0, 3.0])])
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def send() -> None:
        start.wait(10)
        try:
            client.write(body, key="same")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert errors == []
    [info] = server.store.list_series(RID)
    assert info.count == 3


def test_concurrent_new_series_gets_exactly_one_type(server: LocalServer, client: Client) -> None:
    start = threading.Barrier(8)
    outcomes: list[tuple[ValueType, grpc.StatusCode | None]] = []
    lock = threading.Lock()

    # Big enough that writing one takes a while, so the writers overlap.
    n = 50_000

    def send(vt: ValueType) -> None:
        ts = np.arange(T, T + n, dtype=np.int64)
        values = np.arange(n, dtype=vt.numpy_dtype)
        body = encode_request(RID, [SeriesBatch(SeriesKey.of("race"), vt, ts, values)])
        start.wait(10)
        try:
            client.write(body)
            code = None
        except grpc.RpcError as exc:
            code = exc.code()
        with lock:
            outcomes.append((vt, code))

    threads = [threading.Thread(target=send, args=(ValueType.DOUBLE if i % 2 else ValueType.INT64,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    accepted = {vt for vt, code in outcomes if code is None}
    rejected = [(vt, code) for vt, code in outcomes if code is not None]
    assert len(outcomes) == 8 and len(accepted) == 1
    [winner] = accepted
    assert all(code == grpc.StatusCode.INVALID_ARGUMENT and vt is not winner for vt, code in rejected)
    [info] = server.store.list_series(RID)
    assert info.value_type is winner
    assert info.count == n * (8 - len(rejected))


# ---------------------------------------------------------------------------------------------
# Validation: rejected before anything is written
# ---------------------------------------------------------------------------------------------


def _column_request(rid: str, batches: list[dict[str, Any]]) -> bytes:
    return cw.WriteColumnBatchesRequest(data_source_rid=rid, batches=batches).SerializeToString()


def _doubles(channel: str, n_ts: int, n_values: int, tags: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "channel": channel,
        "tags": tags or {},
        "timestamps": [_pb_ts(T + i) for i in range(n_ts)],
        "values": {"doubles": {"points": [float(i) for i in range(n_values)]}},
    }


@pytest.fixture
def seeded(server: LocalServer, client: Client) -> tuple[list[Any], list[str]]:
    client.write(all_types_request())
    return snapshot(server.store.data_dir)


def _check_rejected(
    client: Client, server: LocalServer, seeded: Any, body: bytes, *fragments: str, rows: bool = False
) -> None:
    err = client.rejected(body, rows=rows)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    for fragment in fragments:
        assert fragment in err.details(), (fragment, err.details())
    assert snapshot(server.store.data_dir) == seeded


def test_type_conflict_with_stored_series_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    body = encode_request(
        RID,
        [
            series_batch("fresh", None, ValueType.DOUBLE, [1.0]),
            series_batch("i", None, ValueType.DOUBLE, [1.0]),
        ],
    )
    _check_rejected(client, server, seeded, body, "batches[1]", "'i'", "int64")


def test_type_disagreement_inside_one_request_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    body = encode_request(
        RID,
        [
            series_batch("new", {"a": "b"}, ValueType.DOUBLE, [1.0]),
            series_batch("other", None, ValueType.DOUBLE, [1.0]),
            series_batch("new", {"a": "b"}, ValueType.STRING, ["x"]),
        ],
    )
    _check_rejected(client, server, seeded, body, "batches[2]", "'new'", "batches[0]")


def test_count_mismatch_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    body = _column_request(RID, [_doubles("ok", 2, 2), _doubles("short", 3, 2)])
    _check_rejected(client, server, seeded, body, "batches[1]", "'short'")


def test_value_type_not_set_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    body = _column_request(RID, [_doubles("ok", 1, 1), {"channel": "untyped", "timestamps": [_pb_ts(T)]}])
    _check_rejected(client, server, seeded, body, "batches[1]", "'untyped'")


def test_row_batch_without_points_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    req = cw.WriteBatchesRequest(data_source_rid=RID)
    req.batches.add(channel="rows-ok").points.double_points.points.add(timestamp=_pb_ts(T), value=1.0)
    req.batches.add(channel="rows-empty")
    _check_rejected(client, server, seeded, req.SerializeToString(), "batches[1]", "'rows-empty'", rows=True)


@pytest.mark.parametrize("rid", ["../x", "a/b", "..", ".", "", "x" * 1025, "a\\b", "sp ace"])
def test_unsafe_rid_is_rejected(server: LocalServer, client: Client, seeded: Any, rid: str) -> None:
    _check_rejected(client, server, seeded, _column_request(rid, [_doubles("c", 1, 1)]), "data_source_rid")
    assert not (server.store.data_dir.parent / "x").exists()


def test_longest_names_are_accepted(server: LocalServer, client: Client) -> None:
    rid, channel, tag = "r" * 1024, "c" * 1024, "t" * 1024
    client.write(_column_request(rid, [_doubles(channel, 2, 2, {tag: tag})]))
    store = LocalStore(server.store.data_dir)
    [info] = store.list_series(rid)
    assert (info.channel, info.tags, info.count) == (channel, {tag: tag}, 2)
    assert store.list_datasets() == [rid]
    assert store.read(rid, channel, {tag: tag}).column("value").to_pylist() == [0.0, 1.0]


def test_over_long_channel_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    body = _column_request(RID, [_doubles("fine", 1, 1), _doubles("c" * 1025, 1, 1)])
    _check_rejected(client, server, seeded, body, "batches[1]", "1025 characters")


def test_over_long_tag_is_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    body = _column_request(RID, [_doubles("tagged", 1, 1, {"k": "v" * 1025})])
    _check_rejected(client, server, seeded, body, "batches[0]", "'tagged'", "tag 'k'")
    body = _column_request(RID, [_doubles("tagged", 1, 1, {"k" * 1025: "v"})])
    _check_rejected(client, server, seeded, body, "batches[0]", "'tagged'", "tag key")


def test_garbage_bytes_are_rejected(server: LocalServer, client: Client, seeded: Any) -> None:
    _check_rejected(client, server, seeded, b"\xff\xff\xff\xff garbage", "WriteColumnBatchesRequest")


def test_read_of_unknown_series(server: LocalServer, client: Client) -> None:
    client.write(all_types_request())
    with pytest.raises(KeyError, match="nope"):
        server.store.read(RID, "nope")
    with pytest.raises(KeyError):
        server.store.read(RID, "d")  # stored with tags; without them it is another series
    remote = RemoteStore(server.target)
    try:
        with pytest.raises(KeyError, match="nope"):
            remote.read(RID, "nope")
        assert remote.list_series("ri.unknown") == []
        assert remote.list_datasets() == [RID]
    finally:
        remote.close()


# ---------------------------------------------------------------------------------------------
# Auth, capabilities, the fault-injection seam, TLS, recovery
# ---------------------------------------------------------------------------------------------


def _call_every_method(target: str, metadata: list[tuple[str, str]]) -> dict[str, grpc.StatusCode]:
    ch = grpc.insecure_channel(address(target))
    read = local_pb2_grpc.LocalReadServiceStub(ch)
    caps = local_pb2_grpc.CapabilitiesServiceStub(ch)
    calls = {
        "WriteColumnBatches": lambda: ch.unary_unary(md.WRITE_COLUMN_BATCHES)(
            all_types_request(), metadata=metadata, timeout=30
        ),
        "WriteBatches": lambda: ch.unary_unary(md.WRITE_BATCHES)(
            all_types_row_request("ri.rows"), metadata=metadata, timeout=30
        ),
        "ListSeries": lambda: read.ListSeries(local_pb2.ListSeriesRequest(), metadata=metadata, timeout=30),
        "ReadSeries": lambda: read.ReadSeries(
            local_pb2.ReadSeriesRequest(dataset_rid=RID, channel="i"), metadata=metadata, timeout=30
        ),
        "GetCapabilities": lambda: caps.GetCapabilities(
            local_pb2.GetCapabilitiesRequest(), metadata=metadata, timeout=30
        ),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            out[name] = exc.code()
    ch.close()
    return out


def test_token_is_required_by_every_service(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "data", token="s3cret") as srv:
        for bad in ([], [(md.AUTHORIZATION, "Bearer wrong")], [(md.AUTHORIZATION, "s3cret")]):
            codes = _call_every_method(srv.target, bad)
            assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, (bad, codes)
        assert LocalStore(srv.store.data_dir).list_datasets() == []
        codes = _call_every_method(srv.target, [(md.AUTHORIZATION, "Bearer s3cret")])
        assert set(codes.values()) == {grpc.StatusCode.OK}, codes
        remote = RemoteStore(srv.target, token="s3cret")
        try:
            assert_all_types_stored([remote])
        finally:
            remote.close()


def test_capabilities(server: LocalServer) -> None:
    with grpc.insecure_channel(address(server.target)) as ch:
        stub = local_pb2_grpc.CapabilitiesServiceStub(ch)
        caps = stub.GetCapabilities(local_pb2.GetCapabilitiesRequest(), timeout=30)
    assert caps.server == "beam_nominal.local"
    assert caps.version
    assert set(caps.services) == {
        "nominal.channel_writer.v1.NominalChannelWriterService",
        "beam_nominal.local.v1.LocalReadService",
        "beam_nominal.local.v1.CapabilitiesService",
    }
    assert list(caps.value_types) == [
        "double",
        "string",
        "int64",
        "uint64",
        "double_array",
        "string_array",
        "struct",
    ]
    assert caps.idempotency_metadata_key == "x-idempotency-key"
    assert caps.max_request_bytes == 256 * 1024 * 1024
    assert caps.durable_acknowledgements is True


class FailFirst(grpc.ServerInterceptor):  # type: ignore[misc]
    """Fails the first ``n`` writes with ``code`` before they reach the handler."""

    def __init__(self, n: int, code: grpc.StatusCode) -> None:
        self.remaining, self.code, self.seen = n, code, 0
        self.lock = threading.Lock()

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method != md.WRITE_COLUMN_BATCHES:
            return continuation(details)
        with self.lock:
            self.seen += 1
            fail = self.remaining > 0
            self.remaining -= fail
        if not fail:
            return continuation(details)
        code = self.code

        def abort(_request: bytes, context: grpc.ServicerContext) -> bytes:
            context.abort(code, "injected fault")

        return grpc.unary_unary_rpc_method_handler(abort)


def test_interceptor_can_fail_writes_then_let_them_through(tmp_path: Path) -> None:
    fault = FailFirst(2, grpc.StatusCode.UNAVAILABLE)
    with LocalServer(tmp_path / "data", interceptors=[fault]) as srv:
        c = Client(srv.target)
        body = all_types_request()
        for _ in range(2):
            err = c.rejected(body, key="k")
            assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, "injected fault")
        assert LocalStore(srv.store.data_dir).list_datasets() == []
        c.write(body, key="k")
        c.write(body, key="k")
        c.channel.close()
        assert fault.seen == 4
        assert_all_types_stored([LocalStore(srv.store.data_dir)])


def test_leftover_staging_is_removed_and_commits_survive(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LocalServer(data) as srv:
        Client(srv.target).write(all_types_request())
    leftover = data / RID / "staging" / "deadbeef.parquet"
    leftover.write_bytes(b"half a file")
    with LocalServer(data) as srv:
        assert not leftover.exists()
        assert list((data / RID / "staging").iterdir()) == []
        assert_all_types_stored([srv.store, LocalStore(data)])


def test_tls(tmp_path: Path, tls_files: Any) -> None:
    cert_pem = tls_files.cert_pem
    with LocalServer(
        tmp_path / "data", host="localhost", tls_cert=tls_files.cert, tls_key=tls_files.key
    ) as srv:
        assert srv.target == f"grpcs://localhost:{srv.port}"
        ch = grpc.secure_channel(address(srv.target), grpc.ssl_channel_credentials(cert_pem))
        ch.unary_unary(md.WRITE_COLUMN_BATCHES)(all_types_request(), timeout=30)
        ch.close()
        plain = Client(f"grpc://localhost:{srv.port}")
        assert plain.rejected(all_types_request()).code() == grpc.StatusCode.UNAVAILABLE
        plain.channel.close()
        remote = RemoteStore(srv.target, root_certificates=cert_pem)
        try:
            assert_all_types_stored([remote])
        finally:
            remote.close()


class HoldWrites(grpc.ServerInterceptor):  # type: ignore[misc]
    """Holds each write inside the server until ``release`` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        if details.method != md.WRITE_COLUMN_BATCHES:
            return handler
        inner = handler.unary_unary

        def held(request: bytes, context: grpc.ServicerContext) -> bytes:
            self.entered.set()
            assert self.release.wait(30)
            out: bytes = inner(request, context)
            return out

        return grpc.unary_unary_rpc_method_handler(held)


def test_stop_lets_a_write_in_progress_finish(tmp_path: Path) -> None:
    hold = HoldWrites()
    srv = LocalServer(tmp_path / "data", interceptors=[hold]).start()
    client = Client(srv.target)
    result: list[Any] = []
    writer = threading.Thread(target=lambda: result.append(client.write(all_types_request())))
    writer.start()
    assert hold.entered.wait(30)
    stopper = threading.Thread(target=srv.stop, kwargs={"grace": 30})
    stopper.start()
    # The server refuses new calls once stopping has begun; only then let the held write go on.
    probe = Client(srv.target)
    deadline = threading.Event()
    timer = threading.Timer(30, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            try:
                probe.channel.unary_unary("/beam_nominal.local.v1.CapabilitiesService/GetCapabilities")(b"", timeout=1)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    break
        assert not deadline.is_set(), "the server kept accepting calls after stop()"
    finally:
        timer.cancel()
    hold.release.set()
    writer.join(30)
    stopper.join(30)
    assert result == [b""]
    assert_all_types_stored([LocalStore(srv.store.data_dir)])


def test_batches_without_points(server: LocalServer, client: Client, seeded: Any) -> None:
    empty_new = SeriesBatch(SeriesKey.of("empty"), ValueType.DOUBLE, np.empty(0, np.int64), np.empty(0))
    assert client.write(encode_request(RID, [empty_new])) == b""
    assert snapshot(server.store.data_dir) == seeded
    empty_conflict = SeriesBatch(SeriesKey.of("i"), ValueType.STRING, np.empty(0, np.int64), [])
    _check_rejected(client, server, seeded, encode_request(RID, [empty_conflict]), "batches[0]", "'i'", "int64")


def test_read_all_gives_what_read_gives(server: LocalServer, client: Client) -> None:
    client.write(all_types_request())
    client.write_rows(all_types_row_request())
    store = LocalStore(server.store.data_dir)
    everything = store.read_all(RID)
    assert sorted(everything) == sorted(SeriesKey.of(c, t) for c, t, *_ in CASES)
    for channel, tags, *_ in CASES:
        table = everything[SeriesKey.of(channel, tags)]
        assert table.num_rows == 8
        one = store.read(RID, channel, tags)
        assert table.schema == one.schema
        assert exact(table.to_pylist()) == exact(one.to_pylist())
    assert store.read_all("ri.unknown") == {}


# ---------------------------------------------------------------------------------------------
# Property: whatever is acknowledged reads back as a plain Python model predicts
# ---------------------------------------------------------------------------------------------

_rid_counter = iter(range(10**9))


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("prop")) as srv:
        yield srv


def _value_strategy(vt: ValueType) -> Any:
    from hypothesis import strategies as st

    text = st.text(max_size=5)
    return {
        ValueType.DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
        ValueType.INT64: st.integers(-(2**63), 2**63 - 1),
        ValueType.UINT64: st.integers(0, 2**64 - 1),
        ValueType.STRING: text,
        ValueType.STRUCT: st.dictionaries(st.text(max_size=3), st.integers(), max_size=2).map(json.dumps),
        ValueType.DOUBLE_ARRAY: st.lists(st.floats(allow_nan=False), max_size=3),
        ValueType.STRING_ARRAY: st.lists(text, max_size=3),
    }[vt]


def _requests_strategy() -> Any:
    from hypothesis import strategies as st

    series = st.tuples(
        st.sampled_from(["a", "b", "ç"]),
        st.sampled_from([None, {}, {"k": "1"}, {"k": "2", "z": ""}]),
    )
    types = st.sampled_from(list(ValueType))

    @st.composite
    def requests(draw: Any) -> list[list[tuple[str, dict[str, str] | None, ValueType, list[int], list[Any]]]]:
        # One value type per series for the whole run, as the server demands.
        pinned: dict[Any, ValueType] = {}
        out = []
        for _ in range(draw(st.integers(1, 3))):
            batches = []
            for _ in range(draw(st.integers(1, 4))):
                channel, tags = draw(series)
                key = SeriesKey.of(channel, tags)
                vt = pinned.setdefault(key, draw(types))
                n = draw(st.integers(1, 6))
                ts = draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n))
                values = draw(st.lists(_value_strategy(vt), min_size=n, max_size=n))
                batches.append((channel, tags, vt, ts, values))
            out.append(batches)
        return out

    return requests()


def test_random_requests_read_back_as_modelled(shared_server: LocalServer) -> None:
    from hypothesis import HealthCheck, given, settings

    client = Client(shared_server.target)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_requests_strategy())
    def check(requests: list[list[tuple[str, dict[str, str] | None, ValueType, list[int], list[Any]]]]) -> None:
        rid = f"ri.prop.{next(_rid_counter)}"
        model: dict[SeriesKey, list[tuple[int, int, Any]]] = {}
        arrival = 0
        for batches in requests:
            encoded = []
            for channel, tags, vt, ts, values in batches:
                col: Any
                if vt is ValueType.DOUBLE_ARRAY:
                    col = [np.array(v, dtype=np.float64) for v in values]
                elif vt.numpy_dtype is not None:
                    col = np.array(values, dtype=vt.numpy_dtype)
                else:
                    col = list(values)
                encoded.append(SeriesBatch(SeriesKey.of(channel, tags), vt, np.array(ts, dtype=np.int64), col))
                for t, v in zip(ts, values, strict=True):
                    model.setdefault(SeriesKey.of(channel, tags), []).append((t, arrival, v))
                    arrival += 1
            client.write(encode_request(rid, encoded))
        store = LocalStore(shared_server.store.data_dir)
        everything = store.read_all(rid)
        assert sorted(everything) == sorted(model)
        for key, points in model.items():
            points.sort(key=lambda p: (p[0], p[1]))
            table = store.read(rid, key.channel, key.tag_dict)
            assert table.column("timestamp").to_pylist() == [p[0] for p in points]
            assert exact(table.column("value").to_pylist()) == exact([p[2] for p in points])
            assert exact(everything[key].to_pylist()) == exact(table.to_pylist())

    try:
        check()
    finally:
        client.channel.close()
