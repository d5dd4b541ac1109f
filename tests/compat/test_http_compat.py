"""Nominal's HTTP write API, checked with Nominal's published classes (``nominal-api-protos``).

Runs in ``.venv-compat``; what needs our client stack or server runs in the main ``.venv`` as a
subprocess (``_main_venv.py``, ``beam-nominal serve``), talking to this process through files and
loopback HTTP only.

- The closest offline proof that a real Nominal accepts what we send: for the same points, the
  request our HTTP target sends and the one nominal-streaming 0.10.5 sends, both captured at a
  loopback listener, have the same method, path, content type, content encoding and auth header,
  and their bodies, decoded with Nominal's classes, hold the same series and points.
- Requests built with Nominal's classes, zstd-compressed and posted with plain HTTP to the local
  server, are stored exactly.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

zstandard = pytest.importorskip("zstandard")
nominal_write = pytest.importorskip("nominal.protos.write.nominal_write_pb2")
from nominal.protos.direct_channel_writer.v2 import direct_nominal_channel_writer_pb2 as their_columnar  # noqa: E402
from nominal.protos.direct_channel_writer_common.v2 import (  # noqa: E402
    direct_channel_writer_common_pb2 as their_common,
)

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("_main_venv.py")
MAIN_BIN = ROOT / ".venv" / "bin"
T = 1_767_225_600_000_000_000

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not (MAIN_BIN / "python").exists(), reason="needs the main .venv (make test builds it)"),
]


def _main(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MAIN_BIN / "python"), str(HELPER), *args], capture_output=True, text=True, timeout=150, check=True,
        cwd=ROOT, **kw,
    )


def _ns(ts: Any) -> int:
    return int(ts.seconds) * 1_000_000_000 + int(ts.nanos)


def _row_points(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, Any]]]:
    """Every point of a WriteRequestNominal body, per series, parsed with Nominal's classes."""
    req = nominal_write.WriteRequestNominal.FromString(body)
    out: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, Any]]] = {}
    for series in req.series:
        key = (series.channel.name, tuple(sorted(series.tags.items())))
        which = series.points.WhichOneof("points_type")
        assert which is not None, key
        group = getattr(series.points, which)
        if which == "array_points":
            group = getattr(group, group.WhichOneof("array_type"))
            values: list[Any] = [list(p.value) for p in group.points]
        elif which == "struct_points":
            values = [json.loads(p.json_string) for p in group.points]
        else:
            values = [p.value for p in group.points]
        out.setdefault(key, []).extend(zip((_ns(p.timestamp) for p in group.points), values, strict=True))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in out.items()}


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    out = tmp_path_factory.mktemp("capture")
    _main("capture", str(out))
    return out, json.loads((out / "index.json").read_text())


def test_our_requests_look_like_nominal_streamings_to_the_server(
    captured: tuple[Path, dict[str, list[dict[str, Any]]]],
) -> None:
    _, index = captured
    assert index["nominal-streaming"] and index["beam_nominal"]

    def shape(req: dict[str, Any]) -> tuple[Any, ...]:
        h = {k.lower(): v for k, v in req["headers"].items()}
        return (req["method"], req["path"], h.get("content-type"), h.get("content-encoding"), h.get("authorization"))

    theirs = {shape(r) for r in index["nominal-streaming"]}
    ours = {shape(r) for r in index["beam_nominal"]}
    assert len(theirs) == 1 and theirs == ours, (theirs, ours)
    method, path, ctype, encoding, auth = next(iter(ours))
    assert (method, ctype, encoding) == ("POST", "application/x-protobuf", "zstd")
    assert path == "/api/storage/writer/v1/nominal/ri.catalog.main.dataset.capture-1"
    assert auth == "Bearer tok-capture-1"


def test_our_bodies_hold_the_same_series_and_points_as_nominal_streamings(
    captured: tuple[Path, dict[str, list[dict[str, Any]]]],
) -> None:
    out, index = captured

    def points(client: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, Any]]]:
        merged: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, Any]]] = {}
        for req in index[client]:
            body = (out / req["body_file"]).read_bytes()
            raw = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 28)
            for key, pts in _row_points(raw).items():
                merged.setdefault(key, []).extend(pts)
        return {k: sorted(v, key=lambda p: p[0]) for k, v in merged.items()}

    theirs, ours = points("nominal-streaming"), points("beam_nominal")
    assert sorted(theirs) == sorted(ours)
    assert theirs == ours
    assert len(ours) == 7 and sum(map(len, ours.values())) == 35


def _serve(data_dir: Path, token: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [str(MAIN_BIN / "beam-nominal"), "serve", "--data-dir", str(data_dir), "--port", "0", "--http-port", "0",
         "--token", token],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+)", line)
        assert m is not None, line
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    data = tmp_path / "data"
    for url in _serve(data, "tok-2"):
        yield url, data


def _post(url: str, message: Any) -> int:
    body = zstandard.ZstdCompressor(level=1).compress(message.SerializeToString())
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "zstd",
            "Authorization": "Bearer tok-2",
        },
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return int(resp.status)


def _stored(data: Path, rid: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[tuple[int, Any]]]]:
    def cell(v: Any) -> Any:
        if isinstance(v, dict):
            return math.nan if v["f"] == "nan" else float.fromhex(v["f"])
        if isinstance(v, list):
            return [cell(x) for x in v]
        return v

    series = json.loads(_main("read", str(data), rid).stdout)
    return {
        (s["channel"], tuple(sorted(s["tags"].items()))): (
            s["type"],
            list(zip(s["timestamps"], [cell(v) for v in s["values"]], strict=True)),
        )
        for s in series
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


EXPECTED: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[tuple[int, Any]]]] = {
    ("d", (("rig", "7"),)): ("double", [(T - 5, -0.0), (T, 1.5), (T + 1, math.nan), (T + 2, math.inf)]),
    ("s", ()): ("string", [(T, ""), (T + 1, "héllo ✓ 日本")]),
    ("i", ()): ("int64", [(T, 2**53 + 1), (T + 1, -(2**63)), (T + 2, 2**63 - 1)]),
    ("u", ()): ("uint64", [(T, 2**64 - 1), (T + 1, 0)]),
    ("fa", ()): ("double_array", [(T, [1.0, -2.5]), (T + 1, [])]),
    ("sa", ()): ("string_array", [(T, ["x", "", "ÿ"])]),
    ("st", ()): ("struct", [(T, '{"a":1}')]),
    ("old", ()): ("double", [(-1_500_000_000, 7.0)]),
}


def _ts(ns: int, cls: Any) -> Any:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return cls(seconds=seconds, nanos=nanos)


def _row_request() -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    w = nominal_write
    req = w.WriteRequestNominal()
    for (channel, tags), (vtype, pts) in EXPECTED.items():
        series = req.series.add(channel=w.Channel(name=channel), tags=dict(tags))
        for ns, v in pts:
            ts = _ts(ns, Timestamp)
            if vtype == "double":
                series.points.double_points.points.add(timestamp=ts, value=v)
            elif vtype == "string":
                series.points.string_points.points.add(timestamp=ts, value=v)
            elif vtype == "int64":
                series.points.integer_points.points.add(timestamp=ts, value=v)
            elif vtype == "uint64":
                series.points.uint64_points.points.add(timestamp=ts, value=v)
            elif vtype == "double_array":
                series.points.array_points.double_array_points.points.add(timestamp=ts, value=v)
            elif vtype == "string_array":
                series.points.array_points.string_array_points.points.add(timestamp=ts, value=v)
            else:
                series.points.struct_points.points.add(timestamp=ts, json_string=v)
    return req


def _columnar_request(rid: str) -> Any:
    from nominal.protos.types.time import time_pb2

    c = their_common
    req = their_columnar.WriteBatchesRequest(data_source_rid=rid)
    for (channel, tags), (vtype, pts) in EXPECTED.items():
        batch = req.batches.add(channel=channel, tags=dict(tags))
        batch.points.timestamps.extend(_ts(ns, time_pb2.Timestamp) for ns, _ in pts)
        values = [v for _, v in pts]
        p = batch.points
        if vtype == "double":
            p.double_points.CopyFrom(c.DoublePoints(points=values))
        elif vtype == "string":
            p.string_points.CopyFrom(c.StringPoints(points=values))
        elif vtype == "int64":
            p.int_points.CopyFrom(c.IntPoints(points=values))
        elif vtype == "uint64":
            p.uint64_points.CopyFrom(c.Uint64Points(points=values))
        elif vtype == "double_array":
            p.array_points.double_array_points.points.extend(c.DoubleArrayPoint(value=v) for v in values)
        elif vtype == "string_array":
            p.array_points.string_array_points.points.extend(c.StringArrayPoint(value=v) for v in values)
        else:
            p.struct_points.CopyFrom(c.StructPoints(points=values))
    return req


@pytest.mark.parametrize("form", ["row", "columnar"])
def test_requests_built_with_nominals_classes_are_stored_exactly(http_server: tuple[str, Path], form: str) -> None:
    base, data = http_server
    rid = f"ri.catalog.main.dataset.published-{form}"
    if form == "row":
        status = _post(f"{base}/storage/writer/v1/nominal/{rid}", _row_request())
    else:
        status = _post(f"{base}/storage/writer/v1/nominal-columnar", _columnar_request(rid))
    assert status == 200
    stored = _stored(data, rid)
    assert sorted(stored) == sorted(EXPECTED)
    for key, (vtype, pts) in EXPECTED.items():
        got_type, got = stored[key]
        assert got_type == vtype, key
        assert len(got) == len(pts) and all(
            g[0] == e[0] and _same(g[1], e[1]) for g, e in zip(got, pts, strict=True)
        ), (key, got, pts)


def test_a_wrong_token_is_refused(http_server: tuple[str, Path]) -> None:
    base, _ = http_server
    req = urllib.request.Request(
        f"{base}/storage/writer/v1/nominal/ri.x", data=b"", method="POST",
        headers={"Content-Type": "application/x-protobuf", "Authorization": "Bearer nope"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=30)
    assert info.value.code == 401
