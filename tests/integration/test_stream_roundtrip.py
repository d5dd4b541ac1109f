"""NominalStream end to end against a real LocalServer on loopback, read back value by value."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from beam_nominal.errors import SeriesTypeError, StreamClosedError
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.stream-1"
T = 1_700_000_000_123_456_789


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        yield srv


#: Every wire the stream speaks to a server: gRPC, and Nominal's HTTP API in both forms.
WIRES = ["grpc", "http-row", "http-columnar"]


def url_and_options(server: LocalServer, wire: str) -> tuple[str, dict[str, Any]]:
    if wire == "grpc":
        return server.target, {}
    return server.http_url, {"format": wire.removeprefix("http-")}


def read(srv: LocalServer, channel: str, tags: dict[str, str] | None = None) -> list[tuple[int, Any]]:
    table = LocalStore(srv.store.data_dir).read(RID, channel, tags)
    return list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))


@pytest.mark.parametrize("wire", WIRES)
def test_every_shape_round_trips_exactly(server: LocalServer, wire: str) -> None:
    url, options = url_and_options(server, wire)
    with NominalStream(url, dataset_rid=RID, linger=None, **options) as s:
        s.enqueue("d", T, 1.5, tags={"unit": "m"})
        s.enqueue("d", T + 1, float("nan"), tags={"unit": "m"})
        s.enqueue("d", T + 1, -0.0, tags={"unit": "m"})  # equal timestamps are both kept
        s.enqueue("i", T, 2**53 + 1)
        s.enqueue("i", T + 1, -(2**63))
        s.enqueue("u", T, 2**64 - 1)
        s.enqueue("u", T + 1, 2**63 + 1)
        s.enqueue("b", T, True)
        s.enqueue("s", T, "")
        s.enqueue("s", T + 1, "héllo ✓ 日本")
        s.enqueue_batch("deep", np.arange(T, T + 50_000), np.arange(50_000, dtype=np.float64))
        s.enqueue_batch("ints", [T, T + 1], [2**62 + 1, 3])
        s.enqueue_batch("fa2d", [T, T + 1], np.array([[1.0, float("nan")], [3.0, 4.0]]))
        s.enqueue_float_array("fa", T, [1.0, 2.5])
        s.enqueue_float_array("fa", T + 1, [])
        s.enqueue_string_array("sa", T, ["x", "", "ÿ"])
        s.enqueue_struct("st", T, {"b": [1, 2], "a": "é"})
        for k in range(3):
            s.enqueue_from_dict(T + k, {"w.f": k + 0.25, "w.i": 2**60 + k, "w.s": f"v{k}"}, tags={"rig": "7"})
        s.enqueue_table(
            pa.table({"timestamp": pa.array([T, T + 1], pa.int64()), "tbl.u": pa.array([2**64 - 2, 0], pa.uint64())})
        )
        report = s.flush()
    d = read(server, "d", {"unit": "m"})
    assert d[0] == (T, 1.5) and d[1][0] == T + 1 and math.isnan(d[1][1]) and d[2] == (T + 1, -0.0)
    assert math.copysign(1, d[2][1]) == -1
    assert read(server, "i") == [(T, 2**53 + 1), (T + 1, -(2**63))]
    assert read(server, "u") == [(T, 2**64 - 1), (T + 1, 2**63 + 1)]
    assert read(server, "b") == [(T, 1)]
    assert read(server, "s") == [(T, ""), (T + 1, "héllo ✓ 日本")]
    deep = LocalStore(server.store.data_dir).read(RID, "deep")
    assert deep.column("timestamp").to_numpy().tolist() == list(range(T, T + 50_000))
    assert deep.column("value").to_numpy().tolist() == [float(i) for i in range(50_000)]
    assert read(server, "ints") == [(T, 2**62 + 1), (T + 1, 3)]
    fa2d = read(server, "fa2d")
    assert fa2d[0][1][0] == 1.0 and math.isnan(fa2d[0][1][1]) and fa2d[1] == (T + 1, [3.0, 4.0])
    assert read(server, "fa") == [(T, [1.0, 2.5]), (T + 1, [])]
    assert read(server, "sa") == [(T, ["x", "", "ÿ"])]
    assert read(server, "st") == [(T, '{"a":"é","b":[1,2]}')]
    assert read(server, "w.f", {"rig": "7"}) == [(T + k, k + 0.25) for k in range(3)]
    assert read(server, "w.i", {"rig": "7"}) == [(T + k, 2**60 + k) for k in range(3)]
    assert read(server, "w.s", {"rig": "7"}) == [(T + k, f"v{k}") for k in range(3)]
    assert read(server, "tbl.u") == [(T, 2**64 - 2), (T + 1, 0)]
    types = {(i.channel, tuple(sorted(i.tags.items()))): i.value_type for i in server.store.list_series(RID)}
    assert types[("i", ())] is ValueType.INT64 and types[("u", ())] is ValueType.UINT64
    assert types[("st", ())] is ValueType.STRUCT and types[("fa2d", ())] is ValueType.DOUBLE_ARRAY
    expected_points = 3 + 2 + 2 + 1 + 2 + 50_000 + 2 + 2 + 2 + 1 + 1 + 9 + 2
    assert report.points == expected_points and report.series == 15


@pytest.mark.parametrize("wire", ["grpc", "http-row"])
def test_eight_threads_land_every_point_exactly_once(server: LocalServer, wire: str) -> None:
    per_thread = 20_000
    url, options = url_and_options(server, wire)
    with NominalStream(url, dataset_rid=RID, linger=None, max_request_bytes=256 * 1024, **options) as s:
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                barrier.wait()
                for i in range(per_thread):
                    s.enqueue("shared", T + k * per_thread + i, k * per_thread + i)
                    if i % 100 == 0:
                        s.enqueue_batch(f"batch{k}", np.arange(T + i, T + i + 100), np.full(100, float(k)))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(100)
        report = s.flush()
    assert not errors
    shared = LocalStore(server.store.data_dir).read(RID, "shared")
    assert sorted(shared.column("value").to_pylist()) == list(range(8 * per_thread))
    assert shared.column("timestamp").to_pylist() == [T + v for v in range(8 * per_thread)]
    for k in range(8):
        assert LocalStore(server.store.data_dir).read(RID, f"batch{k}").num_rows == per_thread
    assert report.points == 16 * per_thread and report.requests > 8


def test_type_conflict_raises_and_other_series_still_land(server: LocalServer) -> None:
    with NominalStream(server.target, dataset_rid=RID, linger=None) as s:
        s.enqueue("temp", T, 20.5, tags={"room": "a"})
        s.enqueue("label", T, "ok")
        with pytest.raises(SeriesTypeError) as info:
            s.enqueue("temp", T + 1, "hot", tags={"room": "a"})
        assert "'temp'" in str(info.value) and "room=a" in str(info.value)
        assert "double" in str(info.value) and "string" in str(info.value)
        s.enqueue("temp", T + 2, 21.5, tags={"room": "a"})
    assert read(server, "temp", {"room": "a"}) == [(T, 20.5), (T + 2, 21.5)]
    assert read(server, "label") == [(T, "ok")]
    with pytest.raises(StreamClosedError):
        s.enqueue("label", T + 3, "late")


def test_tags_none_and_empty_are_one_series(server: LocalServer) -> None:
    with NominalStream(server.target, dataset_rid=RID, linger=None) as s:
        s.enqueue("x", T, 1.0, tags=None)
        s.enqueue("x", T + 1, 2.0, tags={})
    assert [(i.channel, i.tags, i.count) for i in server.store.list_series(RID)] == [("x", {}, 2)]
    assert SeriesKey.of("x", {}) == SeriesKey.of("x", None)


def test_token_is_sent_as_bearer_and_refreshed_per_request(tmp_path: Path) -> None:
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        return "t0k"

    with LocalServer(tmp_path / "data", token="t0k", http_port=0) as srv:
        for url in (srv.target, srv.http_url):
            calls.clear()
            with NominalStream(url, dataset_rid=RID, token=token, linger=None, max_request_points=10) as s:
                s.enqueue_batch(url, np.arange(T, T + 30), np.ones(30))
            assert len(calls) == 1 + 3  # the first contact, then each of the three requests
            assert LocalStore(srv.store.data_dir).read(RID, url).num_rows == 30
