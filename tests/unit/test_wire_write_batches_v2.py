"""The columnar HTTP body codec (``direct_channel_writer.v2.WriteBatchesRequest``) against upb.

Expectations come from the input itself or from upb's parse of the bytes (``reference_columnar``
on the generated classes), never from the codec under test.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from test_wire_codec import (
    EXAMPLES,
    PROPS,
    TEXT,
    _copy_values,
    _ld,
    _padded_varint,
    _ts,
    _varint,
    assert_request_equal,
    series_batch,
)

from beam_nominal._wire import decode as dec
from beam_nominal._wire import reference_columnar as ref
from beam_nominal._wire import write_batches_v2 as v2
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_nominal_channel_writer_pb2 as dcw,
)
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal._wire.encode import encode_columns
from beam_nominal._wire.write_batches_v2 import (
    decode_write_batches_v2,
    encode_write_batches_v2,
)
from beam_nominal.model import SeriesKey, ValueType

V = ValueType
RID = "ri.catalog.main.dataset.columnar-1"
T = 1_700_000_000_000_000_000


@st.composite
def request(draw: Any) -> tuple[str, list[SeriesBatch]]:
    nonneg = draw(st.booleans())  # all-non-negative requests take the one-pass timestamp path
    return draw(TEXT), draw(st.lists(series_batch(nonneg=nonneg), max_size=6))


def check(want: list[SeriesBatch], got: DecodedRequest, rid: str) -> None:
    assert_request_equal(want, got, rid, None)


# ---------------------------------------------------------------------------------------------
# Round trips, both directions, against upb
# ---------------------------------------------------------------------------------------------


@PROPS
@given(request())
def test_fast_encoding_parses_with_generated_classes(req: tuple[str, list[SeriesBatch]]) -> None:
    rid, batches = req
    check(batches, ref.decode(encode_write_batches_v2(rid, batches)), rid)


@PROPS
@given(request())
def test_fast_encoding_round_trips_through_fast_decoder(req: tuple[str, list[SeriesBatch]]) -> None:
    rid, batches = req
    check(batches, decode_write_batches_v2(encode_write_batches_v2(rid, batches)), rid)


@PROPS
@given(request())
def test_generated_class_bytes_decode_with_fast_decoder(req: tuple[str, list[SeriesBatch]]) -> None:
    rid, batches = req
    check(batches, decode_write_batches_v2(ref.encode(rid, batches)), rid)


@PROPS
@given(request())
def test_encoding_is_deterministic(req: tuple[str, list[SeriesBatch]]) -> None:
    rid, batches = req
    data = encode_write_batches_v2(rid, batches)
    copies = [SeriesBatch(b.key, b.value_type, b.timestamps.copy(), _copy_values(b.values)) for b in batches]
    assert encode_write_batches_v2(rid, copies) == data


# ---------------------------------------------------------------------------------------------
# Edge values, explicitly
# ---------------------------------------------------------------------------------------------

EDGE = [
    SeriesBatch(SeriesKey.of("f64", {"unit": "m/s", "ünï": "✓", "": ""}), V.DOUBLE,
                _ts(-1, 0, -(10**18), 2**63 - 1, -(2**63)),
                np.array([math.nan, math.inf, -math.inf, -0.0, 5e-324])),
    SeriesBatch(SeriesKey.of("i64"), V.INT64, _ts(1, 2, 3, 4, 5),
                np.array([2**53 + 1, -(2**63), 2**63 - 1, -1, 0], dtype=np.int64)),
    SeriesBatch(SeriesKey.of("u64"), V.UINT64, _ts(1, 1, 1), np.array([2**63 + 1, 2**64 - 1, 0], dtype=np.uint64)),
    SeriesBatch(SeriesKey.of("str"), V.STRING, _ts(5, 5, 5, 6, 7),
                ["", "héllo wörld", "日本語 🚀", "x" * 300, "nul\x00inside"]),
    SeriesBatch(SeriesKey.of("json"), V.STRUCT, _ts(9, 2**63 - 1), ['{"a": [1, 2], "b": "ü"}', "{}"]),
    SeriesBatch(SeriesKey.of("da"), V.DOUBLE_ARRAY, _ts(1, 2, 3),
                [np.array([]), np.array([math.nan, -0.0]), np.arange(40, dtype=np.float64)]),
    SeriesBatch(SeriesKey.of("da-uniform"), V.DOUBLE_ARRAY, _ts(-5, 2), np.arange(6.0).reshape(2, 3)),
    SeriesBatch(SeriesKey.of("sa"), V.STRING_ARRAY, _ts(1, 2, 3), [[], ["", "ü"], ["a" * 200] * 3]),
    SeriesBatch(SeriesKey.of("empty"), V.DOUBLE, _ts(), np.array([], dtype=np.float64)),
    SeriesBatch(SeriesKey.of("empty-s"), V.STRING, _ts(), []),
]
EDGE_WANT = [
    SeriesBatch(b.key, b.value_type, b.timestamps, list(b.values) if isinstance(b.values, np.ndarray)
                and b.values.ndim == 2 else b.values)
    for b in EDGE
]


@pytest.mark.parametrize("decoder", [ref.decode, decode_write_batches_v2], ids=["upb", "fast"])
@pytest.mark.parametrize("encoder", [encode_write_batches_v2, ref.encode], ids=["fast", "upb"])
def test_edge_values_round_trip(encoder: Any, decoder: Any) -> None:
    check(EDGE_WANT, decoder(encoder(RID, EDGE)), RID)


def _ts_v2(sec: int | None, nanos: int | None, width: tuple[int, int] | None = None) -> bytes:
    """One Points.timestamps entry (field 1): the given fields, canonical or padded varints."""
    body = b""
    if sec is not None:
        body += b"\x08" + (_varint(sec & (2**64 - 1)) if width is None else _padded_varint(sec, width[0]))
    if nanos is not None:
        body += b"\x10" + (_varint(nanos & (2**64 - 1)) if width is None else _padded_varint(nanos, width[1]))
    return _ld(1, body)


def test_layout_is_the_grpc_columns_inside_points() -> None:
    # Built independently of the codec: RecordsBatch { channel, tags, Points { fixed-width
    # timestamps, double_points = 2 { packed doubles } } }, then the rid.
    batch = SeriesBatch(SeriesKey.of("c", {"k": "v"}), V.DOUBLE, _ts(1_500_000_001, -1), np.array([1.5, -2.0]))
    timestamps = _ts_v2(1, 500_000_001, (10, 5)) + _ts_v2(-1, 999_999_999, (10, 5))
    points = timestamps + _ld(2, _ld(1, struct.pack("<2d", 1.5, -2.0)))
    want = _ld(2, RID.encode()) + _ld(1, _ld(1, b"c") + _ld(2, _ld(1, b"k") + _ld(2, b"v")) + _ld(3, points))
    assert encode_write_batches_v2(RID, [batch]) == want
    # Non-negative timestamps: 5-byte seconds, 14 bytes per entry as in the gRPC form.
    one = encode_write_batches_v2("", [SeriesBatch(SeriesKey.of("c"), V.INT64, _ts(7), np.array([3]))])
    assert one == _ld(1, _ld(1, b"c") + _ld(3, _ts_v2(0, 7, (5, 5)) + _ld(5, _ld(1, b"\x03"))))


def test_numeric_requests_take_the_whole_request_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = dec._fixed_layout_batches

    def spy(*args: Any) -> Any:
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(dec, "_fixed_layout_batches", spy)
    ts = T + np.arange(300, dtype=np.int64) * 7
    batches = [
        SeriesBatch(SeriesKey.of("d", {"rig": "a"}), V.DOUBLE, ts, np.linspace(-1, 1, 300)),
        SeriesBatch(SeriesKey.of("i"), V.INT64, ts[:3], np.array([-(2**63), 0, 2**62], dtype=np.int64)),
        SeriesBatch(SeriesKey.of("u", {"k": ""}), V.UINT64, ts[:2], np.array([2**64 - 1, 300], np.uint64)),
        # Bytes 0a 0c (a timestamp entry's key and length) inside the channel and a tag value.
        SeriesBatch(SeriesKey.of("x\x0a\x0cy", {"t": "\x0a\x0c"}), V.DOUBLE, ts[:1], np.array([2.5])),
        # A channel of 12 bytes: its own field starts 0a 0c.
        SeriesBatch(SeriesKey.of("abcdefghijkl"), V.DOUBLE, ts[:2], np.array([3.0, 4.0])),
    ]
    data = encode_write_batches_v2(RID, batches)
    for _ in range(2):  # the second time from the key cache
        check(batches, decode_write_batches_v2(data), RID)
    assert calls == [True, True]
    check([*batches, EDGE[3]], decode_write_batches_v2(encode_write_batches_v2(RID, [*batches, EDGE[3]])), RID)
    assert calls[-1] is False  # a string batch: the general path


def test_large_canonical_request_decodes_exactly() -> None:
    # Canonical (upb's) timestamps, pre-1970 and not, some whole seconds (nanos omitted): upb reads them.
    rng = np.random.default_rng(11)
    seconds = rng.integers(-(2**32), 2**33, 30_000)
    ts = np.sort(seconds * 10**9 + np.where(seconds % 5 == 0, 0, rng.integers(0, 10**9, seconds.shape[0])))
    batches = [
        SeriesBatch(SeriesKey.of("u"), V.UINT64, ts, rng.integers(0, 2**64 - 1, ts.shape[0], dtype=np.uint64)),
        SeriesBatch(SeriesKey.of("f", {"k": "v"}), V.DOUBLE, ts[::2], rng.standard_normal(ts[::2].shape[0])),
        SeriesBatch(SeriesKey.of("j"), V.STRUCT, ts[:20_000], [f'{{"i": {i}}}' for i in range(20_000)]),
    ]
    check(batches, decode_write_batches_v2(ref.encode("r", batches)), "r")
    check(batches, decode_write_batches_v2(encode_write_batches_v2("r", batches)), "r")


# ---------------------------------------------------------------------------------------------
# Other valid encodings: what another client (prost, upb, a hand-written encoder) may send
# ---------------------------------------------------------------------------------------------


def check_both(want: list[SeriesBatch], data: bytes, rid: str) -> None:
    check(want, ref.decode(data), rid)
    check(want, decode_write_batches_v2(data), rid)


def test_any_field_order_unknown_fields_unit_and_omitted_optionals() -> None:
    unknown = b"\x78\x01" + _ld(14, b"future") + b"\x7d\x00\x00\x00\x00"  # fields 15 (varint), 14, 15 (fixed32)
    doubles = _ld(1, struct.pack("<d", 1.5)) + unknown + _ld(1, struct.pack("<d", -2.0))
    points = (
        unknown
        + _ld(2, doubles)  # the member before the timestamps
        + _ts_v2(None, 5)  # seconds omitted (proto3 optional: 0)
        + unknown
        + _ts_v2(2, None)  # nanos omitted
    )
    batch = unknown + _ld(4, "m/s ✓".encode()) + _ld(3, points) + _ld(2, _ld(2, b"v") + _ld(1, b"k")) + _ld(1, b"ch")
    data = unknown + _ld(2, b"rid") + _ld(1, batch) + unknown
    want = [SeriesBatch(SeriesKey.of("ch", {"k": "v"}), V.DOUBLE, _ts(5, 2_000_000_000), np.array([1.5, -2.0]))]
    check_both(want, data, "rid")


def test_points_split_over_occurrences_merge_as_upb_merges() -> None:
    # Two occurrences of RecordsBatch.points: timestamps in both, the member in the second; and a
    # member given twice (packed chunks of one column).
    first = _ts_v2(1, 0) + _ts_v2(2, 0)
    second = _ts_v2(3, 0) + _ld(5, _ld(1, _varint(7))) + _ld(5, _ld(1, _varint(8) + _varint(2**64 - 1)))
    data = _ld(1, _ld(1, b"c") + _ld(3, first) + _ld(3, second))
    want = [SeriesBatch(SeriesKey.of("c"), V.INT64, _ts(10**9, 2 * 10**9, 3 * 10**9), np.array([7, 8, -1]))]
    check_both(want, data, "")


def test_fixed_width_runs_split_by_unknown_fields() -> None:
    fixed = encode_write_batches_v2("", [SeriesBatch(SeriesKey.of("c"), V.DOUBLE, _ts(3, 4), np.array([1.0, 2.0]))])
    at = fixed.index(b"\x0a\x0c\x08")
    entries = fixed[at : at + 28]
    points = entries[:14] + b"\x78\x05" + entries[14:] + _ts_v2(0, 9) + _ld(2, _ld(1, struct.pack("<3d", 1, 2, 3)))
    data = _ld(1, _ld(1, b"c") + _ld(3, points))
    want = [SeriesBatch(SeriesKey.of("c"), V.DOUBLE, _ts(3, 4, 9), np.array([1.0, 2.0, 3.0]))]
    check_both(want, data, "")


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def _ok_batch(width: tuple[int, int] | None = None) -> bytes:
    return _ld(1, _ld(1, b"ok") + _ld(3, _ts_v2(1, 0, width) + _ld(2, _ld(1, struct.pack("<d", 1.0)))))


def _malformed(data: bytes) -> MalformedBatchError:
    """The error both decoders raise for ``data``, checked to agree on batch and channel."""
    with pytest.raises(MalformedBatchError) as fast:
        decode_write_batches_v2(data)
    with pytest.raises(MalformedBatchError) as slow:
        ref.decode(data)
    assert (fast.value.index, fast.value.channel) == (slow.value.index, slow.value.channel)
    return fast.value


def test_points_type_not_set_names_batch_and_channel() -> None:
    for points in (b"", _ts_v2(1, 0) + b"\x78\x01"):
        err = _malformed(_ok_batch() + _ld(1, _ld(1, b"bare") + _ld(3, points)))
        assert (err.index, err.channel) == (1, "bare")
        assert "points type not set" in err.reason
    assert "points type not set" in _malformed(_ld(1, _ld(1, b"none"))).reason


@pytest.mark.parametrize("with_doubles", [False, True])
def test_log_points_are_refused(with_doubles: bool) -> None:
    # LogPoints { repeated LogPoint points = 1 }, LogPoint { Timestamp timestamp = 1; LogValue value = 2 }.
    log = _ld(4, _ld(1, _ld(1, _varint(8) + _varint(1)) + _ld(2, _ld(1, b"hello"))))
    doubles = _ld(2, _ld(1, struct.pack("<d", 1.0))) if with_doubles else b""
    data = _ok_batch() + _ld(1, _ld(3, _ts_v2(1, 0) + doubles + log) + _ld(1, b"logs"))
    err = _malformed(data)
    assert (err.index, err.channel) == (1, "logs")
    assert "log points are not stored" in err.reason


# The 5-byte fixed form holds nanos below 2**35 only.
@pytest.mark.parametrize(
    ("form", "nanos"),
    [("fixed", 10**9), ("fixed", 2**32 + 5), *(("canonical", n) for n in (10**9, -1, 2**32 + 5, 2**62))],
)
def test_nanos_outside_a_second_are_refused(nanos: int, form: str) -> None:
    # In the fixed form the whole request is numeric and fixed-width: the whole-request fast path.
    width = (5, 5) if form == "fixed" else None
    points = _ts_v2(1, 0, width) + _ts_v2(1, nanos, width) + _ld(5, _ld(1, _varint(1) + _varint(2)))
    err = _malformed(_ok_batch(width) + _ld(1, _ld(1, b"n") + _ld(3, points)))
    assert (err.index, err.channel) == (1, "n")
    assert "nanos" in err.reason and "outside [0, 1e9)" in err.reason


@pytest.mark.parametrize("sec", [2**34, -(2**34), 9_223_372_037])
def test_timestamp_outside_int64_nanoseconds_is_refused(sec: int) -> None:
    fixed = _ts_v2(sec, 0, (10, 5)) if sec < 0 else _ts_v2(sec, 0, (5, 5))
    for entry in (fixed, _ts_v2(sec, 0)):
        data = _ld(1, _ld(1, b"far") + _ld(3, entry + _ld(2, _ld(1, struct.pack("<d", 1.0)))))
        assert "outside the int64 nanosecond range" in _malformed(data).reason


@pytest.mark.parametrize("member", [2, 3, 5, 6, 7, 8])
def test_count_mismatch_names_batch_and_channel(member: int) -> None:
    one_value = {
        2: _ld(1, struct.pack("<d", 1.0)),
        3: _ld(1, b"a"),
        5: _ld(1, b"\x01"),
        6: _ld(1, _ld(1, _ld(2, struct.pack("<d", 1.0)))),
        7: _ld(1, b"{}"),
        8: _ld(1, b"\x01"),
    }[member]
    data = _ld(1, _ld(1, b"two-ts") + _ld(3, _ts_v2(1, 0) + _ts_v2(2, 0) + _ld(member, one_value)))
    err = _malformed(data)
    assert (err.index, err.channel) == (0, "two-ts")
    assert "2 timestamps but 1 values" in err.reason


def test_array_type_not_set() -> None:
    assert "array value type not set" in _malformed(_ld(1, _ld(1, b"arr") + _ld(3, _ld(6, b"")))).reason


def test_broken_bytes_win_over_a_malformed_batch() -> None:
    # A batch that is fine but for its unit, which is not UTF-8.
    points = _ts_v2(1, 0, (5, 5)) + _ld(2, _ld(1, struct.pack("<d", 1.0)))
    bad_utf8_unit = _ld(1, _ld(1, b"u") + _ld(4, b"\xff") + _ld(3, points))
    data = _ld(1, _ld(1, b"none")) + bad_utf8_unit
    for decoder in (decode_write_batches_v2, ref.decode):
        with pytest.raises(DecodeError):
            decoder(data)


def _oracle(data: bytes) -> DecodedRequest | tuple[type[Exception], int | None]:
    """What upb makes of ``data``: the decoded request, or the error (and batch) we must raise."""
    try:
        req = dcw.WriteBatchesRequest.FromString(data)
    except DecodeError:
        return DecodeError, None
    try:
        return ref.from_proto(req)
    except MalformedBatchError as exc:
        return MalformedBatchError, exc.index


def _assert_agrees_with_upb(data: bytes) -> None:
    want = _oracle(data)
    if isinstance(want, tuple):
        error, index = want
        with pytest.raises(error) as info:
            decode_write_batches_v2(data)
        assert getattr(info.value, "index", None) == index
    else:
        check(want.batches, decode_write_batches_v2(data), want.dataset_rid)


def test_every_truncation_agrees_with_upb() -> None:
    data = encode_write_batches_v2(RID, EDGE[:5])
    raised = 0
    for cut in range(len(data)):
        _assert_agrees_with_upb(data[:cut])
        raised += isinstance(_oracle(data[:cut]), tuple)
    assert raised > len(data) // 2  # most cuts land inside a field


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_agrees_with_upb(data: bytes) -> None:
    _assert_agrees_with_upb(data)


_MUTATION_BASES = [encode_write_batches_v2(RID, EDGE), ref.encode(RID, EDGE)]


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(st.sampled_from(_MUTATION_BASES), st.data())
def test_spliced_requests_agree_with_upb(base: bytes, draw: st.DataObject) -> None:
    # Each splice replaces up to 4 bytes by up to 4 others: a changed, dropped or inserted byte.
    data = base
    for _ in range(draw.draw(st.integers(1, 3))):
        start = draw.draw(st.integers(0, len(data)))
        stop = draw.draw(st.integers(start, min(len(data), start + 4)))
        data = data[:start] + draw.draw(st.binary(max_size=4)) + data[stop:]
    _assert_agrees_with_upb(data)


@pytest.mark.parametrize(
    ("batch", "error", "fragment"),
    [
        (SeriesBatch(SeriesKey.of("x"), V.DOUBLE, _ts(1, 2), np.array([1.0])), ValueError, "2 timestamps"),
        (SeriesBatch(SeriesKey.of("x"), V.UINT64, _ts(1), np.array([-1])), TypeError, "uint64 values"),
        (SeriesBatch(SeriesKey.of("x"), V.STRING, _ts(1), ["\ud800"]), ValueError, "values[0] is not valid"),
    ],
)
def test_encoder_rejects_bad_batches_naming_them(batch: SeriesBatch, error: type[Exception], fragment: str) -> None:
    good = SeriesBatch(SeriesKey.of("fine"), V.DOUBLE, _ts(1), np.array([1.0]))
    with pytest.raises(error) as info:
        encode_write_batches_v2("r", [good, batch])
    assert "batches[1] (series 'x'" in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("form", ["grpc", "columnar"])
def test_a_packed_header_cut_at_the_end_of_the_request_is_a_decode_error(form: str) -> None:
    # One fixed-width timestamp, then an int64 member whose packed field's length varint is cut
    # by the end of the bytes, right after the whole-request fast path's layout checks.
    cut = b"\x0a\x80"
    if form == "grpc":
        entry = _ld(3, b"\x08" + _padded_varint(0, 5) + b"\x10" + _padded_varint(5, 5))
        data, decode = _ld(2, _ld(1, b"c") + entry + _ld(4, _ld(3, cut))), dec.decode_request
    else:
        data = _ld(1, _ld(1, b"c") + _ld(3, _ts_v2(0, 5, (5, 5)) + _ld(5, cut)))
        decode = decode_write_batches_v2
    assert data.endswith(cut)
    with pytest.raises(DecodeError):
        decode(data)


def test_a_form_without_a_source_name_field_refuses_one() -> None:
    with pytest.raises(ValueError, match="no source name field"):
        encode_columns(v2.WRITE_BATCHES_V2, RID, EDGE[:1], "source")
