"""The fast wire codec against the generated protobuf classes (upb), property by property.

Every expectation comes from the input itself or from upb's parse of the bytes, never from the
codec under test.
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_nominal._wire import reference
from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal._wire.decode import decode_request, decode_write_batches
from beam_nominal._wire.encode import (
    TIMESTAMP_BYTES,
    TIMESTAMP_BYTES_NEGATIVE,
    encode_request,
)
from beam_nominal.model import SeriesKey, ValueType

V = ValueType
# WIRE_EXAMPLES=2000 for a deeper local run.
EXAMPLES = int(os.environ.get("WIRE_EXAMPLES", "60"))
PROPS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# Comparison (NaN-aware, dtype-aware, -0.0-aware)
# ---------------------------------------------------------------------------------------------


def assert_floats_equal(a: np.ndarray, b: np.ndarray, where: str) -> None:
    assert a.dtype == np.float64 and b.dtype == np.float64, f"{where}: dtypes {a.dtype} {b.dtype}"
    assert a.shape == b.shape, f"{where}: shapes {a.shape} {b.shape}"
    assert np.array_equal(np.isnan(a), np.isnan(b)), f"{where}: NaN positions differ"
    ok = ~np.isnan(a)
    assert np.array_equal(a[ok], b[ok]), f"{where}: {a} != {b}"
    assert np.array_equal(np.signbit(a[ok]), np.signbit(b[ok])), f"{where}: signs of zero differ"


def assert_batch_equal(want: SeriesBatch, got: SeriesBatch, where: str) -> None:
    assert got.key == want.key, where
    assert got.value_type is want.value_type, where
    assert got.timestamps.dtype == np.int64, where
    assert got.timestamps.tolist() == np.asarray(want.timestamps).tolist(), f"{where}: timestamps"
    vt = want.value_type
    if vt is V.DOUBLE:
        assert_floats_equal(np.asarray(want.values, dtype=np.float64), got.values, where)
    elif vt in (V.INT64, V.UINT64):
        assert got.values.dtype == vt.numpy_dtype, f"{where}: dtype {got.values.dtype}"
        assert got.values.tolist() == np.asarray(want.values).tolist(), f"{where}: values"
    elif vt is V.DOUBLE_ARRAY:
        assert len(got.values) == len(want.values), where
        for j, (w, g) in enumerate(zip(want.values, got.values, strict=True)):
            assert_floats_equal(np.asarray(w, dtype=np.float64), g, f"{where} row {j}")
    elif vt is V.STRING_ARRAY:
        assert [list(r) for r in got.values] == [list(r) for r in want.values], where
    else:
        assert list(got.values) == list(want.values), where


def assert_request_equal(
    want: list[SeriesBatch], got: DecodedRequest, rid: str, source_name: str | None
) -> None:
    assert got.dataset_rid == rid
    assert got.source_name == source_name
    assert len(got.batches) == len(want)
    for i, (w, g) in enumerate(zip(want, got.batches, strict=True)):
        assert_batch_equal(w, g, f"batches[{i}]")


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
NAME = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
INT64 = st.integers(-(2**63), 2**63 - 1)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([-0.0, 0.0, math.nan, -math.inf])
# Timestamps: the whole int64 range, and a few shared values so that equal timestamps are common.
TIMESTAMP = INT64 | st.sampled_from([0, 1, 999_999_999, 1_000_000_000, -1, 1_700_000_000_123_456_789])


@st.composite
def series_batch(draw: Any, value_type: ValueType | None = None, nonneg: bool = False) -> SeriesBatch:
    vt = draw(st.sampled_from(list(ValueType))) if value_type is None else value_type
    key = SeriesKey.of(draw(NAME), draw(st.dictionaries(TEXT, TEXT, max_size=3)))
    n = draw(st.integers(0, 8))
    ts_strategy = st.integers(0, 2**63 - 1) if nonneg else TIMESTAMP
    ts = np.array(draw(st.lists(ts_strategy, min_size=n, max_size=n)), dtype=np.int64)
    values: Any
    if vt is V.DOUBLE:
        values = np.array(draw(st.lists(FLOATS, min_size=n, max_size=n)), dtype=np.float64)
    elif vt is V.INT64:
        values = np.array(draw(st.lists(INT64, min_size=n, max_size=n)), dtype=np.int64)
    elif vt is V.UINT64:
        values = np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), dtype=np.uint64)
    elif vt in (V.STRING, V.STRUCT):
        values = draw(st.lists(TEXT, min_size=n, max_size=n))
    elif vt is V.DOUBLE_ARRAY:
        rows = draw(st.lists(st.lists(FLOATS, max_size=5), min_size=n, max_size=n))
        values = [np.array(r, dtype=np.float64) for r in rows]
    else:
        values = draw(st.lists(st.lists(TEXT, max_size=4), min_size=n, max_size=n))
    return SeriesBatch(key, vt, ts, values)


@st.composite
def request(draw: Any) -> tuple[str, list[SeriesBatch], str | None]:
    nonneg = draw(st.booleans())  # all-non-negative requests take the one-pass timestamp path
    batches = draw(st.lists(series_batch(nonneg=nonneg), max_size=6))
    return draw(TEXT), batches, draw(st.none() | TEXT)


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


@PROPS
@given(request())
def test_fast_encoding_parses_with_generated_classes(req: tuple[str, list[SeriesBatch], str | None]) -> None:
    rid, batches, source = req
    assert_request_equal(batches, reference.decode(encode_request(rid, batches, source)), rid, source)


@PROPS
@given(request())
def test_fast_encoding_round_trips_through_fast_decoder(req: tuple[str, list[SeriesBatch], str | None]) -> None:
    rid, batches, source = req
    assert_request_equal(batches, decode_request(encode_request(rid, batches, source)), rid, source)


@PROPS
@given(request())
def test_generated_class_bytes_decode_with_fast_decoder(req: tuple[str, list[SeriesBatch], str | None]) -> None:
    rid, batches, source = req
    assert_request_equal(batches, decode_request(reference.encode(rid, batches, source)), rid, source)


def test_large_canonical_request_decodes_exactly() -> None:
    # Timestamps in the canonical form (as the generated classes write them) are read by upb.
    n = 30_000
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(-(2**62), 2**62, n))
    ts[::7] = ts[::7] // 10**9 * 10**9  # whole seconds: upb omits the nanos field
    batches = [
        SeriesBatch(SeriesKey.of("d"), V.DOUBLE, ts, rng.standard_normal(n)),
        SeriesBatch(SeriesKey.of("s"), V.STRING, ts, [str(i) for i in range(n)]),
    ]
    assert_request_equal(batches, decode_request(reference.encode("r", batches)), "r", None)


@PROPS
@given(request())
def test_encoding_is_deterministic(req: tuple[str, list[SeriesBatch], str | None]) -> None:
    rid, batches, source = req
    data = encode_request(rid, batches, source)
    copies = [
        SeriesBatch(b.key, b.value_type, b.timestamps.copy(), _copy_values(b.values)) for b in batches
    ]
    assert encode_request(rid, copies, source) == data


def _copy_values(values: Any) -> Any:
    if isinstance(values, np.ndarray):
        return values.copy()
    return [v.copy() if isinstance(v, np.ndarray) else list(v) if isinstance(v, list) else v for v in values]


# ---------------------------------------------------------------------------------------------
# Edge values, explicitly
# ---------------------------------------------------------------------------------------------


def _ts(*ns: int) -> np.ndarray:
    return np.array(ns, dtype=np.int64)


EDGE_BATCHES = [
    SeriesBatch(SeriesKey.of("i64"), V.INT64, _ts(1, 2, 3, 4, 5),
                np.array([2**53 + 1, -(2**63), 2**63 - 1, -1, 0], dtype=np.int64)),
    SeriesBatch(SeriesKey.of("u64"), V.UINT64, _ts(1, 1, 1),
                np.array([2**63 + 1, 2**64 - 1, 0], dtype=np.uint64)),
    SeriesBatch(SeriesKey.of("f64", {"unit": "m/s", "ünï": "✓"}), V.DOUBLE, _ts(-1, 0, -(10**18), 2**62, 7),
                np.array([math.nan, math.inf, -math.inf, -0.0, 5e-324])),
    SeriesBatch(SeriesKey.of("str"), V.STRING, _ts(5, 5, 5, 6, 7),
                ["", "héllo wörld", "日本語 🚀", "x" * 300, "nul\x00inside"]),
    SeriesBatch(SeriesKey.of("json"), V.STRUCT, _ts(9), ['{"a": [1, 2], "b": "ü"}']),
    SeriesBatch(SeriesKey.of("da"), V.DOUBLE_ARRAY, _ts(1, 2, 3),
                [np.array([]), np.array([math.nan, -0.0]), np.arange(40, dtype=np.float64)]),
    SeriesBatch(SeriesKey.of("sa"), V.STRING_ARRAY, _ts(1, 2, 3), [[], ["", "ü"], ["a" * 200] * 3]),
    SeriesBatch(SeriesKey.of("empty"), V.DOUBLE, _ts(), np.array([], dtype=np.float64)),
]


@pytest.mark.parametrize("decoder", [reference.decode, decode_request], ids=["upb", "fast"])
def test_edge_values_round_trip(decoder: Any) -> None:
    data = encode_request("ri.dataset.1", EDGE_BATCHES, "édge")
    assert_request_equal(EDGE_BATCHES, decoder(data), "ri.dataset.1", "édge")


@pytest.mark.parametrize("width", [0, 1, 8, 200])
@pytest.mark.parametrize("form", ["2d", "list", "reference"])
def test_uniform_double_array_rows(width: int, form: str) -> None:
    rows = np.random.default_rng(width).standard_normal((5, width))
    rows[0, :1] = math.nan
    values: Any = rows if form == "2d" else list(rows)
    batch = SeriesBatch(SeriesKey.of("arr"), V.DOUBLE_ARRAY, _ts(1, 2, 3, 4, 5), values)
    want = SeriesBatch(batch.key, V.DOUBLE_ARRAY, batch.timestamps, list(rows))
    encode = reference.encode if form == "reference" else encode_request
    data = encode("r", [batch])
    assert_request_equal([want], reference.decode(data), "r", None)
    assert_request_equal([want], decode_request(data), "r", None)


def test_decoded_numeric_columns_are_writable_copies() -> None:
    out = decode_request(encode_request("r", EDGE_BATCHES))
    for b in out.batches:
        if isinstance(b.values, np.ndarray):
            assert b.values.flags.writeable
        assert b.timestamps.flags.writeable


def _padded_varint(value: int, width: int) -> bytes:
    """Independent reference for the fixed-width layout: little-endian 7-bit groups."""
    value &= (1 << 64) - 1
    out = [((value >> (7 * k)) & 0x7F) | (0x80 if k < width - 1 else 0) for k in range(width)]
    return bytes(out)


@pytest.mark.parametrize(
    ("ns", "width"), [(1_500_000_001, 5), (0, 5), (2**63 - 1, 5), (-1, 10), (-(2**63), 10)]
)
def test_timestamp_layout_is_fixed_width(ns: int, width: int) -> None:
    data = encode_request("", [SeriesBatch(SeriesKey.of("c"), V.INT64, _ts(ns), np.array([7]))])
    sec, nanos = divmod(ns, 10**9)
    body = b"\x08" + _padded_varint(sec, width) + b"\x10" + _padded_varint(nanos, 5)
    entry = b"\x1a" + bytes([len(body)]) + body
    assert len(entry) == (TIMESTAMP_BYTES if width == 5 else TIMESTAMP_BYTES_NEGATIVE)
    assert entry in data
    parsed = cw.WriteColumnBatchesRequest.FromString(data).batches[0].timestamps[0]
    assert (parsed.seconds, parsed.nanos) == (sec, nanos)


def test_mixed_sign_request_keeps_each_batch_exact() -> None:
    batches = [
        SeriesBatch(SeriesKey.of("pos"), V.DOUBLE, _ts(1, 2), np.array([1.0, 2.0])),
        SeriesBatch(SeriesKey.of("neg"), V.DOUBLE, _ts(-5, 2), np.array([3.0, 4.0])),
    ]
    data = encode_request("r", batches)
    assert_request_equal(batches, decode_request(data), "r", None)
    assert_request_equal(batches, reference.decode(data), "r", None)


def test_large_request_round_trips() -> None:
    rng = np.random.default_rng(7)
    n = 50_000
    ts = np.sort(rng.integers(0, 2**62, n))
    batches = [
        SeriesBatch(SeriesKey.of("d"), V.DOUBLE, ts, rng.standard_normal(n)),
        SeriesBatch(SeriesKey.of("i"), V.INT64, ts, rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)),
        SeriesBatch(SeriesKey.of("u"), V.UINT64, ts, rng.integers(0, 2**64 - 1, n, dtype=np.uint64)),
        SeriesBatch(SeriesKey.of("s"), V.STRING, ts, [f"v{i}é" * (i % 50) for i in range(n)]),
    ]
    data = encode_request("r", batches)
    assert_request_equal(batches, decode_request(data), "r", None)
    assert_request_equal(batches, reference.decode(data), "r", None)


# ---------------------------------------------------------------------------------------------
# Other valid encodings: what another client may send
# ---------------------------------------------------------------------------------------------


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _ts_entry(sec: int, nanos: int) -> bytes:
    return _ld(3, b"\x08" + _varint(sec) + b"\x10" + _varint(nanos))


def test_unpacked_doubles_split_fields_and_unknown_fields_are_read() -> None:
    unknown = b"\x78\x01" + _ld(14, b"future") + b"\x7d\x00\x00\x00\x00"  # fields 15 (varint), 14, 15 (fixed32)
    doubles = b"".join(b"\x09" + struct.pack("<d", x) for x in (1.5, -2.0)) + unknown
    batch = (
        unknown
        + _ts_entry(1, 5)
        + _ld(1, b"ch")
        + _ts_entry(2, 0)
        + _ld(2, _ld(1, b"k") + _ld(2, b"v"))
        + _ld(4, _ld(1, doubles) + unknown)
    )
    data = unknown + _ld(2, batch) + _ld(1, b"rid") + unknown
    want = [SeriesBatch(SeriesKey.of("ch", {"k": "v"}), V.DOUBLE, _ts(1_000_000_005, 2_000_000_000),
                        np.array([1.5, -2.0]))]
    assert_request_equal(want, reference.decode(data), "rid", None)
    assert_request_equal(want, decode_request(data), "rid", None)


def test_fixed_width_run_followed_by_unknown_fields_and_packed_chunks() -> None:
    fixed = encode_request("", [SeriesBatch(SeriesKey.of("c"), V.INT64, _ts(3, 4), np.array([1, 2]))])
    body = cw.WriteColumnBatchesRequest.FromString(fixed).batches[0]
    raw = fixed[fixed.index(b"\x1a\x0c"):]
    ts_region = raw[: 2 * TIMESTAMP_BYTES]
    # Two packed chunks of the same field are one column (protobuf concatenates them).
    values = _ld(4, _ld(3, _ld(1, _varint(1)) + b"\x78\x05" + _ld(1, _varint(2) + _varint(2**64 - 1))))
    batch = _ld(1, b"c") + ts_region + b"\x78\x05" + _ts_entry(0, 9) + values
    data = _ld(2, batch)
    assert body.channel == "c"
    want = [SeriesBatch(SeriesKey.of("c"), V.INT64, _ts(3, 4, 9), np.array([1, 2, -1]))]
    assert_request_equal(want, reference.decode(data), "", None)
    assert_request_equal(want, decode_request(data), "", None)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def test_value_type_not_set_names_batch_and_channel() -> None:
    data = _ld(2, _ld(1, b"ok") + _ld(4, _ld(1, b""))) + _ld(2, _ld(1, b"bare") + _ts_entry(1, 0))
    with pytest.raises(MalformedBatchError) as info:
        decode_request(data)
    assert (info.value.index, info.value.channel) == (1, "bare")
    assert "value type not set" in str(info.value)


def test_array_type_not_set() -> None:
    data = _ld(2, _ld(1, b"arr") + _ld(4, _ld(5, b"")))
    with pytest.raises(MalformedBatchError, match="array value type not set"):
        decode_request(data)


def test_count_mismatch_names_batch_and_channel() -> None:
    req = cw.WriteColumnBatchesRequest(data_source_rid="r")
    cb = req.batches.add(channel="two-ts")
    for s in (1, 2):
        cb.timestamps.add(seconds=s)
    cb.values.doubles.points.append(1.0)
    with pytest.raises(MalformedBatchError) as info:
        decode_request(req.SerializeToString())
    assert (info.value.index, info.value.channel) == (0, "two-ts")
    assert "2 timestamps but 1 values" in str(info.value)


def test_timestamp_outside_int64_nanoseconds_is_rejected() -> None:
    req = cw.WriteColumnBatchesRequest()
    cb = req.batches.add(channel="far")
    cb.timestamps.add(seconds=10**12)
    cb.values.int64s.points.append(1)
    with pytest.raises(MalformedBatchError, match="outside the int64 nanosecond range"):
        decode_request(req.SerializeToString())


def _oracle(data: bytes) -> DecodedRequest | type[Exception]:
    """What upb makes of ``data``: the decoded request, or the error class we must raise."""
    try:
        req = cw.WriteColumnBatchesRequest.FromString(data)
    except DecodeError:
        return DecodeError
    try:
        return reference.from_proto(req)
    except (MalformedBatchError, OverflowError):
        return MalformedBatchError


def _assert_agrees_with_upb(data: bytes) -> None:
    want = _oracle(data)
    if isinstance(want, type):
        with pytest.raises(want):
            decode_request(data)
    else:
        assert_request_equal(want.batches, decode_request(data), want.dataset_rid, want.source_name)


def test_every_truncation_agrees_with_upb() -> None:
    data = encode_request("rid", EDGE_BATCHES[:4], "src")
    raised = 0
    for cut in range(len(data)):
        _assert_agrees_with_upb(data[:cut])
        raised += isinstance(_oracle(data[:cut]), type)
    assert raised > len(data) // 2  # most cuts land inside a field


def test_unknown_groups_are_skipped_and_deep_nesting_refused() -> None:
    group = b"\x7b" + b"\x08\x01" + b"\x7c"  # field 15 start-group, a varint, end-group
    data = group + encode_request("r", EDGE_BATCHES[:1])
    assert_request_equal(EDGE_BATCHES[:1], decode_request(data), "r", None)
    deep = b"\x7b" * 5000 + b"\x7c" * 5000
    with pytest.raises(DecodeError):
        decode_request(deep)
    with pytest.raises(DecodeError):
        cw.WriteColumnBatchesRequest.FromString(deep)


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_agrees_with_upb(data: bytes) -> None:
    _assert_agrees_with_upb(data)


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 255))
def test_corrupted_byte_agrees_with_upb(where: int, byte: int) -> None:
    data = bytearray(encode_request("rid", EDGE_BATCHES, "src"))
    data[where % len(data)] = byte
    _assert_agrees_with_upb(bytes(data))


_UNIFORM = SeriesBatch(SeriesKey.of("u"), V.DOUBLE_ARRAY, _ts(1, 2, 3), np.arange(12.0).reshape(3, 4))
_MUTATION_BASES = [
    encode_request("rid", [*EDGE_BATCHES, _UNIFORM], "src"),
    reference.encode("rid", [*EDGE_BATCHES, _UNIFORM], "src"),
]


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(
    st.sampled_from(_MUTATION_BASES),
    st.lists(st.tuples(st.sampled_from(["set", "delete", "insert"]), st.integers(0, 10**6), st.binary(max_size=4)),
             min_size=1, max_size=3),
)
def test_mutated_requests_agree_with_upb(base: bytes, edits: list[tuple[str, int, bytes]]) -> None:
    data = bytearray(base)
    for op, where, blob in edits:
        at = where % (len(data) + 1)
        if op == "set" and blob and at < len(data):
            data[at] = blob[0]
        elif op == "delete":
            del data[at : at + 1 + len(blob)]
        else:
            data[at:at] = blob
    _assert_agrees_with_upb(bytes(data))


@pytest.mark.parametrize(
    ("batch", "error", "fragment"),
    [
        (SeriesBatch(SeriesKey.of("x"), V.DOUBLE, _ts(1, 2), np.array([1.0])), ValueError, "2 timestamps"),
        (SeriesBatch(SeriesKey.of("x"), V.DOUBLE, _ts(1), np.array(["a"])), TypeError, "double values"),
        (SeriesBatch(SeriesKey.of("x"), V.INT64, _ts(1), np.array([1.5])), TypeError, "int64 values"),
        (SeriesBatch(SeriesKey.of("x"), V.UINT64, _ts(1), np.array([-1])), TypeError, "uint64 values"),
        (SeriesBatch(SeriesKey.of("x"), V.STRING, _ts(1, 2), ["a", None]), TypeError, "values[1] must be str"),
        (SeriesBatch(SeriesKey.of("x"), V.STRING, _ts(1), ["\ud800"]), ValueError, "values[0] is not valid"),
        (SeriesBatch(SeriesKey.of("x"), V.STRING_ARRAY, _ts(1), ["ab"]), TypeError, "values[0] must be a list"),
        (SeriesBatch(SeriesKey.of("x"), V.DOUBLE, np.array([1.5]), np.array([1.0])), TypeError, "timestamps"),
        (SeriesBatch(SeriesKey.of("x"), "float", _ts(1), np.array([1.0])), TypeError, "value_type"),
        (SeriesBatch(SeriesKey.of("x", {"k": "\udc80"}), V.DOUBLE, _ts(1), np.array([1.0])), ValueError,
         "not valid Unicode"),
    ],
)
def test_encoder_rejects_bad_batches_naming_them(batch: SeriesBatch, error: type[Exception], fragment: str) -> None:
    good = SeriesBatch(SeriesKey.of("fine"), V.DOUBLE, _ts(1), np.array([1.0]))
    with pytest.raises(error) as info:
        encode_request("r", [good, batch])
    assert "batches[1] (series 'x'" in str(info.value)
    assert fragment in str(info.value)


# ---------------------------------------------------------------------------------------------
# Row-oriented WriteBatchesRequest
# ---------------------------------------------------------------------------------------------


def test_write_batches_request_decodes_every_point_type() -> None:
    req = cw.WriteBatchesRequest(data_source_rid="r", source_name="s")
    rows: list[tuple[str, ValueType, str, list[Any]]] = [
        ("d", V.DOUBLE, "double_points", [math.nan, -0.0]),
        ("s", V.STRING, "string_points", ["", "ü"]),
        ("i", V.INT64, "int64_points", [2**53 + 1, -(2**63)]),
        ("u", V.UINT64, "uint64_points", [2**64 - 1, 0]),
        ("j", V.STRUCT, "struct_points", ['{"a":1}', "{}"]),
    ]
    want = []
    for channel, vt, field, values in rows:
        rb = req.batches.add(channel=channel, tags={"t": channel})
        points = getattr(rb.points, field).points
        for k, v in enumerate(values):
            p = points.add()
            p.timestamp.seconds, p.timestamp.nanos = -1, k
            if vt is V.STRUCT:
                p.json = v
            else:
                p.value = v
        col = np.array(values, dtype=vt.numpy_dtype) if vt.numpy_dtype is not None else values
        want.append(SeriesBatch(SeriesKey.of(channel, {"t": channel}), vt, _ts(-(10**9), -(10**9) + 1), col))
    rb = req.batches.add(channel="da")
    rb.points.array_points.double_array_points.points.add(values=[1.0, 2.0]).timestamp.seconds = 3
    rb.points.array_points.double_array_points.points.add().timestamp.seconds = 4
    want.append(SeriesBatch(SeriesKey.of("da"), V.DOUBLE_ARRAY, _ts(3 * 10**9, 4 * 10**9),
                            [np.array([1.0, 2.0]), np.array([])]))
    rb = req.batches.add(channel="sa")
    rb.points.array_points.string_array_points.points.add(values=["x", ""]).timestamp.nanos = 1
    want.append(SeriesBatch(SeriesKey.of("sa"), V.STRING_ARRAY, _ts(1), [["x", ""]]))
    assert_request_equal(want, decode_write_batches(req.SerializeToString()), "r", "s")


def test_write_batches_points_not_set() -> None:
    req = cw.WriteBatchesRequest()
    req.batches.add(channel="ok").points.double_points.SetInParent()
    req.batches.add(channel="nothing")
    with pytest.raises(MalformedBatchError) as info:
        decode_write_batches(req.SerializeToString())
    assert (info.value.index, info.value.channel) == (1, "nothing")
    with pytest.raises(DecodeError):
        decode_write_batches(b"\x12\x05ab")
