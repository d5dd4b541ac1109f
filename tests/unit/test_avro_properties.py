"""AvroFileTarget against fastavro on random data: exact read-back and byte-identical records.

fastavro is the independent implementation here: its reader decodes our files, and its
``schemaless_writer`` encodes the same records (canonical varints, one block per array/map, the
union branch named), which our block data must equal byte for byte.
"""

from __future__ import annotations

import io
import pathlib
import struct
import tempfile
from typing import Any

import fastavro
import numpy as np
import pytest
from _avro_bytes import read_long
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.targets.avro import AVRO_STREAM_SCHEMA, AvroFileTarget
from beam_nominal.targets.base import Request

V = ValueType
RID = "ri.catalog.main.dataset.props"
PARSED = fastavro.parse_schema(AVRO_STREAM_SCHEMA)
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
NS = "io.nominal.ingest."

# Timestamps and integers in the forms that take different encoder paths: all varints one length
# (real timestamps: nine bytes), mixed lengths, both signs, and the extremes (ten-byte varints).
ints = st.one_of(
    st.integers(I64_MIN, I64_MAX),
    st.integers(-300, 300),
    st.integers(1_600_000_000_000_000_000, 1_800_000_000_000_000_000),
    st.sampled_from([I64_MIN, I64_MAX, 0, -1, 2**55, 2**56 - 1, 2**62, -(2**62) - 1]),
)


@st.composite
def int_columns(draw: Any, n: int) -> list[int]:
    if draw(st.booleans()):
        base = draw(st.integers(I64_MIN // 2, I64_MAX // 2))
        step = draw(st.integers(0, 2**20))
        return [base + i * step for i in range(n)]
    return draw(st.lists(ints, min_size=n, max_size=n))


text = st.text(max_size=80)  # past 64 UTF-8 bytes a string leaves the two-byte-header fast path
texts = st.one_of(text, st.sampled_from(["", "\x00", "a\x00b", "é" * 40, "🚀"]))
# Any bit pattern, NaN payloads and signed zeros included.
double_bits = st.integers(I64_MIN, I64_MAX)


@st.composite
def batches(draw: Any) -> SeriesBatch:
    vt = draw(st.sampled_from([V.DOUBLE, V.INT64, V.UINT64, V.STRING, V.STRUCT, V.DOUBLE_ARRAY, V.STRING_ARRAY]))
    n = draw(st.integers(0, 40))
    ts = np.array(draw(int_columns(n)), dtype=np.int64)
    values: Any
    if vt is V.DOUBLE:
        values = np.array(draw(st.lists(double_bits, min_size=n, max_size=n)), dtype=np.int64).view(np.float64)
    elif vt is V.INT64:
        values = np.array(draw(int_columns(n)), dtype=np.int64)
    elif vt is V.UINT64:
        values = np.array(draw(st.lists(st.integers(0, I64_MAX), min_size=n, max_size=n)), dtype=np.uint64)
    elif vt in (V.STRING, V.STRUCT):
        values = draw(st.lists(texts, min_size=n, max_size=n))
    elif vt is V.DOUBLE_ARRAY:
        # Rows of one width take the encoder's matrix path, mixed widths the per-row one.
        width = draw(st.one_of(st.none(), st.integers(0, 5)))
        lo, hi = (0, 5) if width is None else (width, width)
        row = st.lists(double_bits, min_size=lo, max_size=hi)
        rows = draw(st.lists(row, min_size=n, max_size=n))
        values = [np.array(r, dtype=np.int64).view(np.float64) for r in rows]
    else:
        # Short NUL-free strings take the encoder's one-pass path; others the per-string one.
        short = st.text(st.characters(min_codepoint=1, exclude_categories=("Cs",)), max_size=20)
        words = draw(st.sampled_from([texts, short]))
        values = draw(st.lists(st.lists(words, max_size=4), min_size=n, max_size=n))
    channel = draw(st.text(min_size=1, max_size=20))
    tags = draw(st.dictionaries(st.text(max_size=10), st.text(max_size=70), max_size=3))
    return SeriesBatch(SeriesKey.of(channel, tags), vt, ts, values)


requests = st.lists(st.lists(batches(), max_size=6), min_size=1, max_size=3)


def _expected_values(b: SeriesBatch) -> list[Any]:
    """The union values as fastavro's reader gives them, doubles as their bits."""
    vt = b.value_type
    if vt is V.DOUBLE:
        return [("double", struct.pack("<d", x)) for x in b.values.tolist()]
    if vt in (V.INT64, V.UINT64):
        return [("long", int(x)) for x in b.values.tolist()]
    if vt is V.STRING:
        return [("string", s) for s in b.values]
    if vt is V.STRUCT:
        return [("JsonStruct", s) for s in b.values]
    if vt is V.DOUBLE_ARRAY:
        return [("DoubleArray", [struct.pack("<d", x) for x in a.tolist()]) for a in b.values]
    return [("StringArray", list(a)) for a in b.values]


def _as_read(v: Any) -> tuple[str, Any]:
    if isinstance(v, tuple):
        name, rec = v
        short = name.removeprefix(NS)
        if short == "JsonStruct":
            return short, rec["json"]
        items = rec["items"]
        return short, [struct.pack("<d", x) for x in items] if short == "DoubleArray" else items
    if isinstance(v, float):
        return "double", struct.pack("<d", v)
    if isinstance(v, int):
        return "long", v
    return "string", v


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests, codec=st.sampled_from(["snappy", "null", "deflate"]))
def test_random_requests_read_back_exactly_with_fastavro(reqs: list[list[SeriesBatch]], codec: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "p.avro"
        with AvroFileTarget(path, dataset_rid=RID, codec=codec) as target:
            for req in reqs:
                target.send(Request(RID, req))
        with open(path, "rb") as f:
            got = list(fastavro.reader(f, return_record_name=True))
    want = [b for req in reqs for b in req if len(b)]
    assert len(got) == len(want)
    for rec, b in zip(got, want, strict=True):
        assert isinstance(rec, dict)
        assert rec["channel"] == b.key.channel
        assert rec["tags"] == dict(b.key.tags)
        assert rec["timestamps"] == b.timestamps.tolist()
        assert [_as_read(v) for v in rec["values"]] == _expected_values(b)


def _fastavro_record(b: SeriesBatch) -> dict[str, Any]:
    vt = b.value_type
    values: list[Any]
    if vt is V.DOUBLE:
        values = [("double", x) for x in b.values.tolist()]
    elif vt in (V.INT64, V.UINT64):
        values = [("long", int(x)) for x in b.values.tolist()]
    elif vt is V.STRING:
        values = [("string", s) for s in b.values]
    elif vt is V.STRUCT:
        values = [(NS + "JsonStruct", {"json": s}) for s in b.values]
    elif vt is V.DOUBLE_ARRAY:
        values = [(NS + "DoubleArray", {"items": a.tolist()}) for a in b.values]
    else:
        values = [(NS + "StringArray", {"items": list(a)}) for a in b.values]
    return {"channel": b.key.channel, "timestamps": b.timestamps.tolist(), "values": values, "tags": dict(b.key.tags)}


def _block_data(block: bytes) -> tuple[int, bytes]:
    """Record count and data of one uncompressed block (count, size, data, 16-byte sync)."""
    count, pos = read_long(block, 0)
    size, pos = read_long(block, pos)
    assert len(block) == pos + size + 16
    return count, block[pos : pos + size]


def _assert_same_bytes_as_fastavro(target: AvroFileTarget, bs: list[SeriesBatch]) -> None:
    # The block ``send`` appends: the file's bytes after those it held before.
    before = target.path.stat().st_size
    target.send(Request(RID, bs))
    block = target.path.read_bytes()[before:]
    want = io.BytesIO()
    kept = [b for b in bs if len(b)]
    for b in kept:
        fastavro.schemaless_writer(want, PARSED, _fastavro_record(b))
    if not kept:
        assert block == b""
        return
    count, data = _block_data(block)
    assert count == len(kept)
    assert data == want.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bs=st.lists(batches(), max_size=6))
def test_records_are_byte_identical_to_fastavros_encoding(bs: list[SeriesBatch]) -> None:
    with tempfile.TemporaryDirectory() as tmp, AvroFileTarget(pathlib.Path(tmp) / "b.avro", codec="null") as target:
        _assert_same_bytes_as_fastavro(target, bs)


def _big_columns() -> dict[str, np.ndarray]:
    # Past the encoder's 16,384-value blocks, in each of its paths.
    rng = np.random.default_rng(7)
    n = 40_000
    return {
        "nine-byte": 1_700_000_000_000_000_000 + np.arange(n, dtype=np.int64) * 1_000_003,
        "ten-byte": rng.integers(I64_MIN, -(2**62) - 1, n, dtype=np.int64),
        "mixed": (rng.integers(0, I64_MAX, n, dtype=np.int64) >> rng.integers(0, 63, n)) * rng.choice([-1, 1], n),
        "small": rng.integers(0, 2**20, n, dtype=np.int64),
        "full": rng.integers(I64_MIN, I64_MAX, n, dtype=np.int64, endpoint=True),
    }


@pytest.mark.parametrize("name", list(_big_columns()))
def test_long_columns_are_byte_identical_to_fastavros_encoding(tmp_path: pathlib.Path, name: str) -> None:
    col = _big_columns()[name]
    rng = np.random.default_rng(1)
    bs = [
        SeriesBatch(SeriesKey.of("ints", {"k": name}), V.INT64, col, col[::-1].copy()),
        SeriesBatch(SeriesKey.of("dbl"), V.DOUBLE, col, rng.standard_normal(col.shape[0])),
        SeriesBatch(SeriesKey.of("short"), V.INT64, col[:3], col[-3:]),
    ]
    with AvroFileTarget(tmp_path / "big.avro", codec="null") as target:
        _assert_same_bytes_as_fastavro(target, bs)
