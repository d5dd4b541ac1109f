"""Nominal's own client, nominal-streaming, writing to the local server over HTTP.

``NominalDatasetStream`` is pointed at ``LocalServer.http_url`` (as at ``https://HOST/api`` in
production) with the server's token, writes every kind of value it has, and closes; then every
point is read back from the store and compared exactly. nominal-streaming sends numbers as
doubles (ints included, converted as ``float(int)``) and, being proto3, leaves a double equal to
0.0 off the wire (so -0.0 arrives as 0.0): that is what the test expects.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _exact import exact
from aiohttp import web
from aiohttp.typedefs import Handler
from nominal_streaming import NominalDatasetStream, PyNominalStreamOpts

from beam_nominal.model import ValueType
from beam_nominal.server import LocalServer

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.streaming-http"
TOKEN = "nominal-streaming-s3cret"
T0 = 1_700_000_000_000_000_000

Key = tuple[str, tuple[tuple[str, str], ...]]


class Expected:
    """What was enqueued, per series: value type and (timestamp, value) pairs."""

    def __init__(self) -> None:
        self.points: dict[Key, list[tuple[int, Any]]] = defaultdict(list)
        self.types: dict[Key, ValueType] = {}

    def add(self, channel: str, tags: dict[str, str] | None, vt: ValueType, ts: int, value: Any) -> None:
        key = (channel, tuple(sorted((tags or {}).items())))
        assert self.types.setdefault(key, vt) is vt
        self.points[key].append((ts, value))


def write_everything(stream: NominalDatasetStream, exp: Expected) -> None:
    # Doubles, one point at a time, with the edge values a double has.
    edge = [-0.0, 0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308, 0.1]
    tags = {"sensor": "a", "site": "é"}
    for k in range(400):
        v = edge[k % len(edge)] if k < 40 else k * 0.25
        stream.enqueue("temperature", T0 + k, v, tags=tags)
        # The client (prost, proto3) leaves a value equal to 0.0 off the wire, so -0.0 arrives as 0.0.
        exp.add("temperature", tags, ValueType.DOUBLE, T0 + k, 0.0 if v == 0 else v)
    # Ints become doubles in nominal-streaming (float(int), rounded past 2**53).
    for k, v in enumerate([0, -1, 2**53 + 1, -(2**62), 7]):
        stream.enqueue("count", T0 + k, v)
        exp.add("count", None, ValueType.DOUBLE, T0 + k, float(v))
    # Batches: numpy float64 and int64 columns, untagged and tagged.
    ts = T0 + np.arange(5_000, dtype=np.int64) * 1_000
    values = np.random.default_rng(7).normal(size=5_000)
    stream.enqueue_batch("vibration", ts, values, tags={"axis": "x"})
    for t, v in zip(ts.tolist(), values.tolist(), strict=True):
        exp.add("vibration", {"axis": "x"}, ValueType.DOUBLE, t, v)
    ints = np.arange(-1_500, 1_500, dtype=np.int64) * 3_000_000_007
    stream.enqueue_batch("ticks", ts[: len(ints)], ints)
    for t, i in zip(ts[: len(ints)].tolist(), ints.tolist(), strict=True):
        exp.add("ticks", None, ValueType.DOUBLE, t, float(i))
    # Strings.
    for k, s in enumerate(["", "ok", "héllo ✓", "日本語", "x" * 2_000, "line\nbreak", 'tab\tquote"']):
        stream.enqueue("status", T0 + k, s, tags={"unit": "motor"})
        exp.add("status", {"unit": "motor"}, ValueType.STRING, T0 + k, s)
    # Arrays of doubles and of strings, rows of different widths.
    for k in range(60):
        row = [k * 0.5 + j for j in range(k % 5)] + ([math.nan] if k % 7 == 0 else [])
        stream.enqueue_float_array("spectrum", T0 + k, row, tags={"band": "L"})
        exp.add("spectrum", {"band": "L"}, ValueType.DOUBLE_ARRAY, T0 + k, row)
        srow = [f"s{k}-{j}" for j in range(k % 4)] + (["ü"] if k % 3 == 0 else [])
        stream.enqueue_string_array("labels", T0 + k, srow)
        exp.add("labels", None, ValueType.STRING_ARRAY, T0 + k, srow)
    # Structs (JSON objects; the client serialises them).
    for k in range(30):
        obj = {"k": k, "name": f"n{k}", "nested": {"ok": k % 2 == 0, "xs": [1, 2.5, None]}, "é": "✓"}
        stream.enqueue_struct("event", T0 + k, obj, tags={"source": "sim"})
        exp.add("event", {"source": "sim"}, ValueType.STRUCT, T0 + k, obj)
    # Wide records with tags: many channels at one timestamp, mixed value types.
    for k in range(200):
        record: dict[str, Any] = {f"wide.{c:03d}": k + c / 8 for c in range(120)}
        record["wide.label"] = f"row {k}"
        record["wide.int"] = k * 11
        stream.enqueue_from_dict(T0 + 10 * k, record, tags={"rig": "r1", "run": "7"})
        for name, v in record.items():
            vt = ValueType.STRING if isinstance(v, str) else ValueType.DOUBLE
            exp.add(name, {"rig": "r1", "run": "7"}, vt, T0 + 10 * k, float(v) if vt is ValueType.DOUBLE else v)


def test_nominal_streaming_writes_everything_exactly(tmp_path: Path) -> None:
    fallback = tmp_path / "fallback.avro"
    posts: list[tuple[str, str | None]] = []

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        posts.append((request.path, request.headers.get("Content-Encoding")))
        return await handler(request)

    with LocalServer(tmp_path / "data", token=TOKEN, http_port=0, http_middlewares=[record]) as server:
        assert server.http_url.endswith("/api")
        opts = PyNominalStreamOpts(
            # Small requests, so the run is many requests over several upload workers.
            max_points_per_batch=2_000,
            max_request_delay_secs=0.05,
            num_upload_workers=4,
            num_runtime_workers=4,
            base_api_url=server.http_url,
        )
        exp = Expected()
        stream = NominalDatasetStream(TOKEN, opts).with_core_consumer(RID).with_file_fallback(fallback)
        with stream:
            write_everything(stream, exp)

        # Many requests, each the row form, zstd-compressed, to the dataset's path under /api.
        assert len(posts) > 10
        assert set(posts) == {(f"/api/storage/writer/v1/nominal/{RID}", "zstd")}
        # Nothing fell back: the server took every request.
        assert not fallback.exists() or fallback.stat().st_size == 0
        infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in server.store.list_series(RID)}
        assert set(infos) == set(exp.points)
        total = 0
        for key, points in exp.points.items():
            channel, tags = key
            assert infos[key].value_type is exp.types[key], key
            table = server.store.read(RID, channel, dict(tags))
            got = list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
            if exp.types[key] is ValueType.STRUCT:
                got = [(t, json.loads(v)) for t, v in got]
            assert [(t, exact(v)) for t, v in got] == [(t, exact(v)) for t, v in sorted(points, key=lambda p: p[0])], (
                key
            )
            total += len(points)
        assert total == sum(s.count for s in infos.values()) > 30_000


def test_nominal_streaming_with_a_wrong_token_stores_nothing(tmp_path: Path) -> None:
    fallback = tmp_path / "fallback.avro"
    with LocalServer(tmp_path / "data", token=TOKEN, http_port=0) as server:
        opts = PyNominalStreamOpts(max_request_delay_secs=0.05, base_api_url=server.http_url)
        with NominalDatasetStream(TOKEN + "-wrong", opts).with_core_consumer(RID).with_file_fallback(fallback) as s:
            s.enqueue("temperature", T0, 1.5)
        assert server.store.list_datasets() == []
    # The client's refused request went to its fallback file instead.
    assert fallback.stat().st_size > 0
