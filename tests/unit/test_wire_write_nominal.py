"""The row-oriented ``WriteRequestNominal`` codec against the generated protobuf classes (upb).

Expectations come from the input itself, from upb's parse of the bytes (``reference_row``), or
from what nominal-streaming (Nominal's Rust client, prost) was given; never from the codec under
test.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import struct
import threading
import unittest.mock
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zstandard
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from test_wire_codec import EDGE_BATCHES, EXAMPLES, PROPS, _ld, _ts, _varint, assert_batch_equal, series_batch

from beam_nominal._wire import reference_row, scratch
from beam_nominal._wire import write_nominal as wn
from beam_nominal._wire._proto.nominal.write import nominal_write_pb2 as nw
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch, StringRows
from beam_nominal._wire.encode import TIMESTAMP_BYTES, encode_request
from beam_nominal._wire.write_nominal import (
    decode_write_nominal,
    encode_write_nominal,
)
from beam_nominal.model import SeriesKey, ValueType

V = ValueType
RID = "ri.catalog.main.dataset.row-1"


def assert_body_equal(want: list[SeriesBatch], got: DecodedRequest, session: str | None) -> None:
    assert got.dataset_rid == RID
    assert got.source_name == session
    assert len(got.batches) == len(want)
    for i, (w, g) in enumerate(zip(want, got.batches, strict=True)):
        assert_batch_equal(w, g, f"series[{i}]")


@st.composite
def body(draw: Any) -> tuple[list[SeriesBatch], str | None]:
    nonneg = draw(st.booleans())  # a body without pre-1970 points has only 14-byte timestamps
    return draw(st.lists(series_batch(nonneg=nonneg), max_size=6)), draw(st.none() | st.text(max_size=8))


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("fell back to upb")

    monkeypatch.setattr(wn, "_upb_series", refuse)


# ---------------------------------------------------------------------------------------------
# Round trips, both directions, against upb
# ---------------------------------------------------------------------------------------------


@PROPS
@given(body())
def test_fast_encoding_parses_with_generated_classes(req: tuple[list[SeriesBatch], str | None]) -> None:
    batches, session = req
    assert_body_equal(batches, reference_row.decode(encode_write_nominal(batches, session), RID), session)


@PROPS
@given(body())
def test_fast_encoding_round_trips_through_fast_decoder(req: tuple[list[SeriesBatch], str | None]) -> None:
    batches, session = req
    assert_body_equal(batches, decode_write_nominal(encode_write_nominal(batches, session), RID), session)


@PROPS
@given(body())
def test_generated_class_bytes_decode_with_fast_decoder(req: tuple[list[SeriesBatch], str | None]) -> None:
    batches, session = req
    assert_body_equal(batches, decode_write_nominal(reference_row.encode(batches, session), RID), session)


@PROPS
@given(body())
def test_encoding_is_deterministic(req: tuple[list[SeriesBatch], str | None]) -> None:
    batches, session = req
    data = encode_write_nominal(batches, session)
    copies = [SeriesBatch(b.key, b.value_type, b.timestamps.copy(), _copy(b.values)) for b in batches]
    assert encode_write_nominal(copies, session) == data


@PROPS
@given(body())
def test_compiled_and_numpy_encodings_are_the_same_bytes(req: tuple[list[SeriesBatch], str | None]) -> None:
    # Idempotency keys are digests of these bytes: a bundle retried on a worker without the C
    # extension must send what the first worker sent.
    if scratch.join_into is None:
        pytest.skip("built without the C extension")
    compiled = encode_write_nominal(*req)
    with unittest.mock.patch.object(scratch, "join_into", None):
        assert encode_write_nominal(*req) == compiled
        assert bytes(wn.encode_write_nominal_transient(*req)) == compiled


@PROPS
@given(body(), body())
def test_transient_encoding_is_the_same_bytes_until_the_next_encode(
    first: tuple[list[SeriesBatch], str | None], second: tuple[list[SeriesBatch], str | None]
) -> None:
    # The HTTP target's form: the body in a buffer the thread reuses (with the C extension).
    view = wn.encode_write_nominal_transient(*first)
    assert bytes(view) == encode_write_nominal(*first)
    assert bytes(wn.encode_write_nominal_transient(*second)) == encode_write_nominal(*second)


def _copy(values: Any) -> Any:
    if isinstance(values, np.ndarray):
        return values.copy()
    return [v.copy() if isinstance(v, np.ndarray) else list(v) if isinstance(v, list) else v for v in values]


@pytest.mark.parametrize("decoder", [reference_row.decode, decode_write_nominal], ids=["upb", "fast"])
def test_edge_values_round_trip(decoder: Any) -> None:
    extremes = [
        SeriesBatch(SeriesKey.of("t"), V.DOUBLE, _ts(-(2**63), -1, 0, 2**63 - 1), np.array([0.0, -0.0, 1.0, 2.0])),
        SeriesBatch(SeriesKey.of("late"), V.INT64, _ts(2**63 - 1, 0), np.array([2**63 - 1, -(2**63)])),
        SeriesBatch(SeriesKey.of("uw", {"k": ""}), V.UINT64, _ts(1, 2), np.array([0, 2**64 - 1], dtype=np.uint64)),
        SeriesBatch(SeriesKey.of("wide"), V.DOUBLE_ARRAY, _ts(-3, 4), np.arange(40.0).reshape(2, 20)),
        SeriesBatch(SeriesKey.of("e"), V.STRING_ARRAY, _ts(), []),
    ]
    batches = [*EDGE_BATCHES, *extremes]
    assert_body_equal(batches, decoder(encode_write_nominal(batches, "édge"), RID), "édge")


@pytest.mark.parametrize("vt", [V.DOUBLE, V.INT64, V.UINT64, V.STRING, V.STRUCT, V.DOUBLE_ARRAY, V.STRING_ARRAY])
@pytest.mark.parametrize("ns", [[0], [0, 0], [1], [10**9], [0, 1, 10**9]])
def test_tiny_series_of_zero_values_decode_like_upb(vt: ValueType, ns: list[int]) -> None:
    """Points at the epoch with zero values are empty messages in the canonical form: bodies of
    a few bytes, shorter than any vector path's first look."""
    zero: Any = {V.DOUBLE: 0.0, V.STRING: "", V.STRUCT: "", V.DOUBLE_ARRAY: np.empty(0), V.STRING_ARRAY: []}.get(vt, 0)
    values = [zero] * len(ns) if vt.numpy_dtype is None else np.zeros(len(ns), dtype=vt.numpy_dtype)
    one = [SeriesBatch(SeriesKey.of("z"), vt, _ts(*ns), values)]
    for want in (one, one * 2):  # alone, and joined with another series
        for data in (reference_row.encode(want), encode_write_nominal(want)):
            assert_body_equal(want, decode_write_nominal(data, RID), None)


@pytest.mark.parametrize("session", [None, "", "s"])
def test_empty_body(session: str | None) -> None:
    data = encode_write_nominal([], session)
    assert data == reference_row.encode([], session)
    assert_body_equal([], decode_write_nominal(data, RID), session)


def test_many_series_of_every_type_round_trip() -> None:
    rng = np.random.default_rng(5)
    batches = []
    for j in range(300):
        vt = list(ValueType)[j % len(ValueType)]
        n = int(rng.integers(0, 40))
        ts = np.sort(rng.integers(-(2**40), 2**62, n)) if j % 5 else np.sort(rng.integers(0, 2**62, n))
        values: Any
        if vt is V.DOUBLE:
            values = rng.standard_normal(n)
        elif vt is V.INT64:
            values = rng.integers(-(2 ** (j % 63)), 2 ** (j % 63), n, dtype=np.int64)
        elif vt is V.UINT64:
            values = rng.integers(0, 2**64 - 1, n, dtype=np.uint64) >> np.uint64(j % 64)
        elif vt in (V.STRING, V.STRUCT):
            values = [f"v{k}" * (k % 70) for k in range(n)]
        elif vt is V.DOUBLE_ARRAY:
            values = [rng.standard_normal(k % 4) for k in range(n)]
        else:
            values = [["a", "bé"][: k % 3] for k in range(n)]
        batches.append(SeriesBatch(SeriesKey.of(f"ch{j}", {"rig": str(j % 3)}), vt, ts, values))
    data = encode_write_nominal(batches, "many")
    assert_body_equal(batches, reference_row.decode(data, RID), "many")
    assert_body_equal(batches, decode_write_nominal(data, RID), "many")


def test_our_numeric_layout_decodes_without_upb(no_fallback: None) -> None:
    rng = np.random.default_rng(1)
    n = 5000
    ts = np.sort(rng.integers(0, 2**62, n))
    batches = [
        SeriesBatch(SeriesKey.of("d", {"a": "b"}), V.DOUBLE, ts, rng.standard_normal(n)),
        SeriesBatch(SeriesKey.of("dn"), V.DOUBLE, ts - 2**62, rng.standard_normal(n)),
        SeriesBatch(SeriesKey.of("i"), V.INT64, ts, rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)),
        SeriesBatch(SeriesKey.of("c"), V.INT64, ts, np.arange(n)),
        SeriesBatch(SeriesKey.of("u"), V.UINT64, ts - 2**62, rng.integers(0, 2**64 - 1, n, dtype=np.uint64)),
        *[SeriesBatch(SeriesKey.of(f"a{w}"), V.DOUBLE_ARRAY, ts[:300] - 2**62 * (w % 2), rng.standard_normal((300, w)))
          for w in (0, 1, 3, 64)],
        SeriesBatch(SeriesKey.of("a64"), V.DOUBLE_ARRAY, ts[:5], rng.standard_normal((5, 64))),
    ]
    out = decode_write_nominal(encode_write_nominal(batches), RID)
    assert_body_equal(batches, out, None)
    assert all(np.asarray(b.values).flags.writeable and b.timestamps.flags.writeable for b in out.batches)


# ---------------------------------------------------------------------------------------------
# What Nominal's own client sends (nominal-streaming, prost encoding), captured on loopback
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _listener() -> Iterator[tuple[int, list[tuple[str, bytes]]]]:
    """A loopback HTTP server that records every POST (path, decompressed body) and replies 200."""
    received: list[tuple[str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "zstd":
                raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
            received.append((self.path, raw))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _capture(write: Any) -> list[tuple[str, bytes]]:
    from nominal_streaming import NominalDatasetStream, PyNominalStreamOpts

    with _listener() as (port, received):
        opts = PyNominalStreamOpts(base_api_url=f"http://127.0.0.1:{port}/api", max_request_delay_secs=0.05)
        stream = NominalDatasetStream("token", opts=opts).with_core_consumer(RID)
        stream.open()
        write(stream)
        stream.close()  # drains: every request has been answered when it returns
    assert received
    return received


T = 1_700_000_000_123_456_789


def test_nominal_streaming_body_decodes_like_upb() -> None:
    n = 3000
    ts = T + np.arange(n, dtype=np.int64) * 1_000_003
    values = np.sin(np.arange(n, dtype=np.float64))
    values[::10] = 0.0  # prost omits a zero value
    ts[::7] = ts[::7] // 10**9 * 10**9  # and zero nanos

    def write(stream: Any) -> None:
        stream.enqueue_batch("wave", ts, values, tags={"rig": "a"})
        stream.enqueue("d", 0, 0.0)  # the epoch with 0.0: an empty point
        stream.enqueue("d", 1_000_000_000, -0.0)  # prost omits it too (-0.0 == 0.0): it arrives as 0.0
        stream.enqueue("d", 5, 7)  # ints become doubles
        stream.enqueue("s", 6, "héllo")
        stream.enqueue("s", 7, "")
        stream.enqueue_float_array("fa", 8, [1.0, math.nan])
        stream.enqueue_float_array("fa", 9, [])
        stream.enqueue_string_array("sa", 10, ["x", ""])
        stream.enqueue_struct("st", 11, {"a": 1})

    received = _capture(write)
    assert {path for path, _ in received} == {f"/api/storage/writer/v1/nominal/{RID}"}
    got: dict[SeriesKey, list[SeriesBatch]] = {}
    for _, data in received:
        want = reference_row.decode(data, RID)
        fast = decode_write_nominal(data, RID)
        assert_body_equal(want.batches, fast, want.source_name)
        for b in fast.batches:
            got.setdefault(b.key, []).append(b)

    def column(channel: str, tags: dict[str, str] | None = None) -> tuple[list[int], list[Any]]:
        parts = got[SeriesKey.of(channel, tags)]
        stamps = [t for b in parts for t in b.timestamps.tolist()]
        vals = [v.tolist() if isinstance(v, np.ndarray) else v for b in parts for v in b.values]
        return stamps, vals

    wave_ts, wave = column("wave", {"rig": "a"})
    assert wave_ts == ts.tolist() and wave == values.tolist()
    d_ts, d = column("d")
    assert d_ts == [0, 1_000_000_000, 5] and d == [0.0, 0.0, 7.0]
    assert column("s") == ([6, 7], ["héllo", ""])
    fa_ts, fa = column("fa")
    assert fa_ts == [8, 9] and fa[0][0] == 1.0 and math.isnan(fa[0][1]) and fa[1] == []
    assert column("sa") == ([10], [["x", ""]])
    st_ts, st_vals = column("st")
    assert st_ts == [11] and [json.loads(v) for v in st_vals] == [{"a": 1}]


def test_nominal_streaming_doubles_strings_and_small_arrays_decode_without_upb(no_fallback: None) -> None:
    rng = np.random.default_rng(21)
    n = 20_000
    ts = np.sort(rng.integers(T, T + 10**12, n))
    words = np.array(["OK", "", "FAULT-12", "héllo", "a\nb"])

    def write(stream: Any) -> None:
        for j in range(5):
            tags = {"rig": str(j)}
            stream.enqueue_batch(f"d{j}", ts, rng.standard_normal(n).round(j), tags=tags)
            stream.enqueue_batch(f"s{j}", ts[:2000], words[rng.integers(0, len(words), 2000)].tolist(), tags=tags)
        for k in range(300):
            stream.enqueue_float_array("xyz", int(ts[k]), rng.standard_normal(3).tolist())
            stream.enqueue_float_array("ragged", int(ts[k]), [0.5] * (k % 5))

    for _, data in _capture(write):
        want = reference_row.decode(data, RID)
        assert_body_equal(want.batches, decode_write_nominal(data, RID), want.source_name)


# ---------------------------------------------------------------------------------------------
# Other valid encodings, built by hand
# ---------------------------------------------------------------------------------------------


def _series(*fields: bytes) -> bytes:
    return _ld(1, b"".join(fields))


def _channel(name: bytes) -> bytes:
    return _ld(1, _ld(1, name))


def _double_point(*fields: bytes) -> bytes:
    return _ld(1, b"".join(fields))


def _stamp(sec: int | None, nanos: int | None) -> bytes:
    body = (b"" if sec is None else b"\x08" + _varint(sec & (2**64 - 1))) + (
        b"" if nanos is None else b"\x10" + _varint(nanos & (2**64 - 1))
    )
    return _ld(1, body)


def _f64(x: float) -> bytes:
    return b"\x11" + struct.pack("<d", x)


UNKNOWN = b"\x78\x01" + _ld(14, b"future") + b"\x7d\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("points", "want_ts", "want"),
    [
        # Timestamp absent (the epoch), value absent (0.0), both absent.
        ([_double_point(_f64(2.5)), _double_point(_stamp(3, None)), _double_point()], [0, 3 * 10**9, 0],
         [2.5, 0.0, 0.0]),
        # Value before timestamp; nanos before seconds; an unknown field in a point.
        ([_double_point(_f64(1.0), _stamp(1, 2)), _double_point(_ld(1, b"\x10\x05\x08\x02"),
                                                                 UNKNOWN, _f64(-1.0))],
         [10**9 + 2, 2 * 10**9 + 5], [1.0, -1.0]),
        # A repeated field: the last one wins.
        ([_double_point(_stamp(1, 0), _f64(1.0), _f64(9.0), _stamp(2, 1))], [2 * 10**9 + 1], [9.0]),
        # Pre-1970 in minimal varints (10-byte two's complement seconds).
        ([_double_point(_stamp(-1, 999_999_999), _f64(3.0)), _double_point(_stamp(-(2**33), 5), _f64(4.0))],
         [-1, -(2**33) * 10**9 + 5], [3.0, 4.0]),
    ],
)
def test_other_point_layouts_decode_like_upb(points: list[bytes], want_ts: list[int], want: list[float]) -> None:
    tags = _ld(2, _ld(1, b"k") + _ld(2, b"v"))
    data = _series(UNKNOWN, _ld(3, _ld(1, b"".join(points) + UNKNOWN)), _channel(b"ch"), tags)
    expected = [SeriesBatch(SeriesKey.of("ch", {"k": "v"}), V.DOUBLE, _ts(*want_ts), np.array(want))]
    assert_body_equal(expected, reference_row.decode(data + UNKNOWN, RID), None)
    assert_body_equal(expected, decode_write_nominal(data + UNKNOWN, RID), None)


@pytest.mark.parametrize(
    "body",
    [
        b"\x08\x01\x10\x02\x10\x03",  # nanos twice: the last wins
        b"\x08\x01\x08\x02\x10\x03",  # seconds twice
        b"\x08\x01\x10\x02\x18\x07",  # an unknown field after them
        b"\x10\x02\x08\x01",  # nanos first
        b"\x10\x02",
        b"\x08\x01",
        b"",
        b"\x08\x81\x80\x80\x00\x10\x82\x80\x00",  # padded varints
    ],
)
@pytest.mark.parametrize("value", [b"", _f64(-1.5)])
def test_timestamp_bodies_between_canonical_points_decode_like_upb(body: bytes, value: bytes) -> None:
    """One odd point among canonical ones, so the vector path sees it (or leaves it to upb)."""
    plain = _double_point(_stamp(1_700_000_000, 5), _f64(2.0))
    points = plain * 3 + _double_point(_ld(1, body), value) + plain * 2
    data = _series(_channel(b"ch"), _ld(3, _ld(1, points))) * 2
    _assert_agrees_with_upb(data)


def test_unpacked_array_values_and_split_points_fields() -> None:
    unpacked = b"".join(b"\x11" + struct.pack("<d", x) for x in (1.5, -2.0))
    arrays = _ld(4, _ld(1, _ld(1, _stamp(1, 0) + unpacked)))
    strings = _ld(2, _ld(1, _stamp(2, 0) + _ld(2, b"a")) + _ld(1, _stamp(3, 0)))
    data = _series(_channel(b"a"), _ld(3, arrays)) + _series(_channel(b"s"), _ld(3, strings), _ld(3, strings))
    want = [
        SeriesBatch(SeriesKey.of("a"), V.DOUBLE_ARRAY, _ts(10**9), [np.array([1.5, -2.0])]),
        # Two points fields merge: their points are concatenated.
        SeriesBatch(SeriesKey.of("s"), V.STRING, _ts(*[2 * 10**9, 3 * 10**9] * 2), ["a", "", "a", ""]),
    ]
    assert_body_equal(want, reference_row.decode(data, RID), None)
    assert_body_equal(want, decode_write_nominal(data, RID), None)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

_OK = _series(_channel(b"ok"), _ld(3, _ld(1, b"")))


@pytest.mark.parametrize(
    ("bad", "channel", "reason"),
    [
        (_series(_ld(3, _ld(1, b""))), "", "channel not set"),
        (_series(_channel(b"bare")), "bare", "points type not set"),
        (_series(_channel(b"bare"), _ld(3, b"")), "bare", "points type not set"),
        (_series(_channel(b"arr"), _ld(3, _ld(4, b""))), "arr", "array points type not set"),
        (_series(_channel(b"far"), _ld(3, _ld(1, _double_point(_stamp(10**12, 0))))), "far", "outside the int64"),
        # Seconds in an 8-byte varint: wider than the word the vector path reads them from.
        (_series(_channel(b"wide"), _ld(3, _ld(1, _double_point(_stamp(2**49 + 5, 0), _f64(1.0))))), "wide",
         "outside the int64"),
        (_series(_channel(b"neg"), _ld(3, _ld(3, _double_point(_stamp(-(2**62), 0))))), "neg", "outside the int64"),
    ],
)
def test_malformed_series_are_named(bad: bytes, channel: str, reason: str) -> None:
    data = _OK + bad + _OK
    for decoder in (reference_row.decode, decode_write_nominal):
        with pytest.raises(MalformedBatchError) as info:
            decoder(data, RID)
        assert (info.value.index, info.value.channel) == (1, channel)
        assert reason in info.value.reason


def test_far_timestamp_in_our_fixed_layout_is_rejected() -> None:
    good = SeriesBatch(SeriesKey.of("d"), V.DOUBLE, _ts(T), np.array([1.0]))
    data = bytearray(encode_write_nominal([good]))
    at = data.index(b"\x0a\x0c\x08")
    for k in range(5):  # 2**34 s fits the 5-byte seconds but not int64 nanoseconds
        data[at + 3 + k] = ((2**34 >> (7 * k)) & 0x7F) | (0x80 if k < 4 else 0)
    with pytest.raises(MalformedBatchError, match="outside the int64 nanosecond range"):
        decode_write_nominal(bytes(data), RID)


def _oracle(data: bytes) -> DecodedRequest | type[Exception]:
    try:
        req = nw.WriteRequestNominal.FromString(data)
    except DecodeError:
        return DecodeError
    try:
        return reference_row.from_proto(req, RID)
    except MalformedBatchError:
        return MalformedBatchError


def _assert_agrees_with_upb(data: bytes) -> None:
    want = _oracle(data)
    if isinstance(want, type):
        with pytest.raises(want):
            decode_write_nominal(data, RID)
    else:
        assert_body_equal(want.batches, decode_write_nominal(data, RID), want.source_name)


_BASE_BATCHES = [
    *EDGE_BATCHES,
    SeriesBatch(SeriesKey.of("neg"), V.INT64, _ts(-5, 3), np.array([1, -1])),
    SeriesBatch(SeriesKey.of("u"), V.DOUBLE_ARRAY, _ts(1, 2, 3), np.arange(12.0).reshape(3, 4)),
]
# Points of 128 bytes and more, whose lengths take two varint bytes, as prost and upb write them.
_LONG_BATCHES = [
    SeriesBatch(SeriesKey.of("wide"), V.DOUBLE_ARRAY, _ts(1, 2, 3), [np.arange(16.0), np.arange(20.0), np.empty(0)]),
    SeriesBatch(SeriesKey.of("text"), V.STRING, _ts(1, 2), ["\n" * 130, "y"]),
]
_MUTATION_BASES = [
    encode_write_nominal(_BASE_BATCHES, "s"),
    reference_row.encode(_BASE_BATCHES, "s"),
    reference_row.encode(_LONG_BATCHES),
]


def test_every_truncation_agrees_with_upb() -> None:
    for data in _MUTATION_BASES:
        for cut in range(len(data)):
            _assert_agrees_with_upb(data[:cut])


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_agrees_with_upb(data: bytes) -> None:
    _assert_agrees_with_upb(data)


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(
    st.sampled_from(_MUTATION_BASES),
    st.lists(st.tuples(st.sampled_from(["set", "delete", "insert"]), st.integers(0, 10**6), st.binary(max_size=4)),
             min_size=1, max_size=3),
)
def test_mutated_bodies_agree_with_upb(base: bytes, edits: list[tuple[str, int, bytes]]) -> None:
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


# ---------------------------------------------------------------------------------------------
# Encoder input checks: the same errors as the column encoder
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch",
    [
        SeriesBatch(SeriesKey.of("x"), V.DOUBLE, _ts(1, 2), np.array([1.0])),
        SeriesBatch(SeriesKey.of("x"), V.DOUBLE, _ts(1), np.array(["a"])),
        SeriesBatch(SeriesKey.of("x"), V.INT64, _ts(1), np.array([1.5])),
        SeriesBatch(SeriesKey.of("x"), V.UINT64, _ts(1), np.array([-1])),
        SeriesBatch(SeriesKey.of("x"), V.INT64, _ts(1, 2), np.array([1])),
        SeriesBatch(SeriesKey.of("x"), V.STRING, _ts(1, 2), ["a", None]),
        SeriesBatch(SeriesKey.of("x"), V.STRING, _ts(1), ["\ud800"]),
        SeriesBatch(SeriesKey.of("x"), V.STRUCT, _ts(1, 2), ["{}"]),
        SeriesBatch(SeriesKey.of("x"), V.STRING_ARRAY, _ts(1), ["ab"]),
        SeriesBatch(SeriesKey.of("x"), V.STRING_ARRAY, _ts(1, 2), [["a"], ["b", "\udc80"]]),
        SeriesBatch(SeriesKey.of("x"), V.DOUBLE_ARRAY, _ts(1), [np.array(["a"])]),
        SeriesBatch(SeriesKey.of("x"), V.DOUBLE_ARRAY, _ts(1), np.zeros((2, 3))),
        SeriesBatch(SeriesKey.of("x"), V.DOUBLE, np.array([1.5]), np.array([1.0])),
        SeriesBatch(SeriesKey.of("x"), V.DOUBLE, np.zeros((1, 1), dtype=np.int64), np.array([1.0])),
        SeriesBatch(SeriesKey.of("x"), "float", _ts(1), np.array([1.0])),  # type: ignore[arg-type]
        SeriesBatch(SeriesKey.of("x", {"k": "\udc80"}), V.DOUBLE, _ts(1), np.array([1.0])),
        SeriesBatch(SeriesKey("\ud800"), V.DOUBLE, _ts(1), np.array([1.0])),
    ],
)
def test_encoder_rejects_bad_batches_as_the_column_encoder_does(batch: SeriesBatch) -> None:
    good = SeriesBatch(SeriesKey.of("fine"), V.DOUBLE, _ts(1), np.array([1.0]))
    with pytest.raises((TypeError, ValueError)) as column:
        encode_request("r", [good, batch])
    with pytest.raises(type(column.value)) as row:
        encode_write_nominal([good, batch])
    assert str(row.value) == str(column.value)
    assert "batches[1] (series " in str(row.value)


# ---------------------------------------------------------------------------------------------
# The vector path for canonical (prost/upb) doubles
# ---------------------------------------------------------------------------------------------


def test_canonical_doubles_decode_without_upb(no_fallback: None) -> None:
    rng = np.random.default_rng(11)
    batches = []
    for j in range(40):
        n = int(rng.integers(0, 300))
        ts = np.sort(rng.integers(0, 2**62, n))
        ts[::3] = ts[::3] // 10**9 * 10**9  # zero nanos: omitted
        ts[:: 11] = ts[::11] % 10**9  # zero seconds: omitted
        values = rng.standard_normal(n)
        values[::4] = 0.0  # omitted
        if j == 0 and n:
            ts[0], values[0] = 0, 0.0  # the epoch with 0.0: an empty point
        batches.append(SeriesBatch(SeriesKey.of(f"c{j}", {"k": str(j % 2)}), V.DOUBLE, ts, values))
    data = reference_row.encode(batches)
    assert_body_equal(batches, decode_write_nominal(data, RID), None)
    # Each series alone, too (a body with one series decodes it without joining).
    assert_body_equal(batches[:1], decode_write_nominal(reference_row.encode(batches[:1]), RID), None)


def test_small_canonical_double_arrays_decode_without_upb(no_fallback: None) -> None:
    rng = np.random.default_rng(14)
    ts = np.sort(rng.integers(0, 2**62, 200))
    batches = [
        SeriesBatch(SeriesKey.of("xyz"), V.DOUBLE_ARRAY, ts, list(rng.standard_normal((200, 3)))),
        SeriesBatch(SeriesKey.of("ragged"), V.DOUBLE_ARRAY, ts, [rng.standard_normal(k % 6) for k in range(200)]),
        SeriesBatch(SeriesKey.of("empty"), V.DOUBLE_ARRAY, ts[:10], [np.empty(0)] * 10),
    ]
    for want in (batches, batches[1:2]):
        assert_body_equal(want, decode_write_nominal(reference_row.encode(want), RID), None)


# Widths around the points' 128-byte boundary (a one- to a two-byte length: 13 doubles and a
# timestamp fit in 127 bytes), nominal-streaming's array benchmarks' (64, 512), and around the
# 16384-byte boundary (three length bytes, which upb reads).
_WIDTHS = st.sampled_from([0, 1, 13, 14, 15, 16, 17, 64, 512, 2045, 2048])


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, 2**62), _WIDTHS), max_size=12),
            # Doubles of bytes that look like point starts, 2-byte lengths and continuation bits.
            st.lists(st.sampled_from([0x0A, 0x12, 0x80, 0x81, 0x01, 0x08, 0x10, 0x7F, 0x00]), min_size=8,
                     max_size=8),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_long_canonical_double_arrays_decode_like_upb(series: list[tuple[list[tuple[int, int]], list[int]]]) -> None:
    """Prost's and upb's encoding of rows of any width decodes to upb's values, and without upb
    up to 16383-byte points."""
    rng = np.random.default_rng(len(series))
    batches = []
    for j, (points, tricky) in enumerate(series):
        ts = np.array([t for t, _ in points], dtype=np.int64)
        rows = []
        for _, w in points:
            row = rng.standard_normal(w)
            row[::3] = np.frombuffer(bytes(tricky), dtype="<f8")[0]
            rows.append(row)
        batches.append(SeriesBatch(SeriesKey.of(f"a{j}"), V.DOUBLE_ARRAY, ts, rows))
    # The generated classes' serialization: upb's canonical encoding, as prost's.
    data = nw.WriteRequestNominal(series=[reference_row.to_proto([b]).series[0] for b in batches]).SerializeToString()
    want = _oracle(data)
    assert isinstance(want, DecodedRequest)
    assert_body_equal(batches, want, None)  # the oracle is right about its own encoding
    fell_back = []
    slow = wn._upb_series

    def counted(*args: Any) -> SeriesBatch:
        fell_back.append(args[-1])
        return slow(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wn, "_upb_series", counted)
        assert_body_equal(want.batches, decode_write_nominal(data, RID), None)
    too_long = [j for j, (points, _) in enumerate(series) if any(w > 2045 for _, w in points)]
    assert set(fell_back) <= set(too_long)
    if not too_long:
        assert fell_back == []


def test_nominal_streaming_wide_arrays_decode_without_upb(no_fallback: None) -> None:
    """benchmarks/bench_http.py's float_array_64 and _512 bodies, as prost writes them; the rows
    of several series joined, and one series alone."""
    rng = np.random.default_rng(21)
    ts = 1_700_000_000_000_000_000 + np.arange(300, dtype=np.int64) * 1_000_003
    batches = [
        SeriesBatch(SeriesKey.of(f"w{w}", {"run": "1"}), V.DOUBLE_ARRAY, ts, list(rng.standard_normal((300, w))))
        for w in (64, 512, 64)
    ]
    batches.append(SeriesBatch(SeriesKey.of("mixed"), V.DOUBLE_ARRAY, ts[:40], [rng.standard_normal(k) for k in
                                                                                range(0, 400, 10)]))
    for want in (batches, batches[1:2]):
        assert_body_equal(want, decode_write_nominal(reference_row.encode(want), RID), None)


@pytest.mark.parametrize("vt", [V.STRING, V.STRUCT])
def test_long_strings_decode_without_upb(no_fallback: None, vt: ValueType) -> None:
    # Text that looks like 2-byte point heads (0a 80 01 0a ...) and lengths at the 128 boundary.
    words = ["", "a", "x" * 110, "x" * 111, "x" * 125, "x" * 126, "\n\x80\x01\n\x0c\x08" * 40, "é" * 3000, "z" * 16360]
    rng = np.random.default_rng(13)
    batches = []
    for j in range(6):
        n = int(rng.integers(1, 60))
        ts = np.sort(rng.integers(0, 2**62, n))
        batches.append(SeriesBatch(SeriesKey.of(f"s{j}"), vt, ts, [words[k] for k in rng.integers(0, len(words), n)]))
    for want in (batches, batches[2:3]):
        assert_body_equal(want, decode_write_nominal(reference_row.encode(want), RID), None)


@pytest.mark.parametrize(
    "point",
    [
        b"\x0a\x85\x00" + _stamp(3, 1)[:5],  # a 2-byte length that is not minimal (5)
        b"\x0a\x80\x80\x01" + b"\x00" * 16384,  # a 3-byte length
        _ld(1, _stamp(3, 0) + b"\x12\x81\x00" + b"\x00" * 8),  # the value's 2-byte length not minimal
        _ld(1, _stamp(3, 0) + b"\x12\x80\x01" + b"\x00" * 127),  # 128 bytes, not whole doubles
        _ld(1, _stamp(3, 0) + _ld(2, b"\x00" * 160) + _ld(2, b"\x00" * 8)),  # two packed runs
        _ld(1, _stamp(3, 0) + _ld(2, b"\x00" * 160) + b"\x18\x01"),  # an unknown field after it
        _ld(1, _stamp(3, 0) + _ld(2, b"\x00" * 160))[:-1],  # one byte short
    ],
)
def test_odd_long_array_points_between_canonical_ones_decode_like_upb(point: bytes) -> None:
    plain = _ld(1, _stamp(1_700_000_000, 5) + _ld(2, np.arange(20.0).tobytes()))
    points = plain * 3 + point + plain * 2
    data = _series(_channel(b"a"), _ld(3, _ld(4, _ld(1, points)))) * 2
    _assert_agrees_with_upb(data)


@pytest.mark.parametrize("vt", [V.STRING, V.STRUCT])
def test_short_strings_decode_without_upb(no_fallback: None, vt: ValueType) -> None:
    rng = np.random.default_rng(12)
    # Newlines make 0a bytes, so text that looks like point starts; empty strings are omitted.
    words = ["", "OK", "\n\n\n", "a\nb\nc", "héllo wörld", "日本語 🚀", "x" * 90, "\x00", "\n\x05\n"]
    batches = []
    for j in range(12):
        n = int(rng.integers(0, 200))
        ts = np.sort(rng.integers(0, 2**62, n))
        ts[::5] = 0
        values = [words[k] for k in rng.integers(0, len(words), n)]
        batches.append(SeriesBatch(SeriesKey.of(f"s{j}"), vt, ts, values))
    for data in (reference_row.encode(batches, "x"), encode_write_nominal(batches, "x")):
        assert_body_equal(batches, decode_write_nominal(data, RID), "x")
        assert_body_equal(batches[1:2], decode_write_nominal(reference_row.encode(batches[1:2], "x"), RID), "x")


def test_invalid_utf8_in_a_string_point_is_a_decode_error() -> None:
    points = _ld(1, _stamp(1, 0) + _ld(2, b"ok")) + _ld(1, _stamp(2, 0) + _ld(2, b"\xff\xfe"))
    data = _series(_channel(b"s"), _ld(3, _ld(2, points)))
    assert _oracle(data) is DecodeError
    with pytest.raises(DecodeError):
        decode_write_nominal(data, RID)


# Bytes that make doubles look like point starts (0a L 0a ...) or hide them.
_TRICKY = st.lists(st.sampled_from([0x0A, 0x11, 0x00, 0x09, 0x08, 0x10, 0x0C, 0x80, 0xFF]), min_size=8, max_size=8)


@PROPS
@given(st.lists(st.tuples(st.integers(0, 2**62), _TRICKY), max_size=60), st.integers(1, 4))
def test_values_that_look_like_point_starts(points: list[tuple[int, list[int]]], n_series: int) -> None:
    ts = np.array([t for t, _ in points], dtype=np.int64)
    values = np.frombuffer(bytes(b for _, v in points for b in v), dtype="<f8").copy()
    cuts = np.linspace(0, len(points), n_series + 1).astype(int)
    batches = [
        SeriesBatch(SeriesKey.of(f"s{k}"), V.DOUBLE, ts[cuts[k] : cuts[k + 1]], values[cuts[k] : cuts[k + 1]])
        for k in range(n_series)
    ]
    for data in (reference_row.encode(batches), encode_write_nominal(batches)):
        assert_body_equal(batches, decode_write_nominal(data, RID), None)


def test_series_that_only_join_into_valid_points_are_refused_as_upb_does() -> None:
    point = _double_point(_stamp(1, 2), _f64(1.0))
    more = _double_point(_stamp(3, 4), _f64(2.0))
    # The first series' points end inside a point that the second series' points complete.
    first = _series(_channel(b"a"), _ld(3, _ld(1, point + more[:5])))
    second = _series(_channel(b"b"), _ld(3, _ld(1, more[5:] + point)))
    data = first + second
    assert _oracle(data) is DecodeError
    with pytest.raises(DecodeError):
        decode_write_nominal(data, RID)


@pytest.mark.parametrize(("vt", "values"), [(V.DOUBLE, np.array([1.5, 2.5, 3.5])), (V.INT64, np.array([7, -8, 9]))])
@pytest.mark.parametrize("key", [0x19, 0x18, 0x08, 0x11, 0x10])
def test_fixed_layout_with_another_value_field_agrees_with_upb(vt: ValueType, values: np.ndarray, key: int) -> None:
    """A point of our layout whose value field key is another field's: upb keeps it as unknown."""
    batch = SeriesBatch(SeriesKey.of("x"), vt, _ts(1, 2, 3), values)
    data = bytearray(encode_write_nominal([batch, batch]))
    at = data.index(b"\x0a\x0c\x08") + TIMESTAMP_BYTES  # the first point's value key
    assert data[at] in (0x11, 0x10)
    data[at] = key
    _assert_agrees_with_upb(bytes(data))


@pytest.mark.parametrize("key", [0x19, 0x11, 0x1A, 0x12])
@pytest.mark.parametrize("offset", [0, 1])
def test_uniform_double_rows_with_another_inner_field_agree_with_upb(key: int, offset: int) -> None:
    batch = SeriesBatch(SeriesKey.of("a"), V.DOUBLE_ARRAY, _ts(1, 2, 3), np.arange(6.0).reshape(3, 2))
    data = bytearray(encode_write_nominal([batch]))
    stride = 2 + TIMESTAMP_BYTES + 2 + 16
    at = data.index(b"\x0a\x0c\x08") + TIMESTAMP_BYTES + stride + offset  # the second row's inner head
    assert data[at - offset] == 0x12
    data[at] = key if offset == 0 else 0x08  # another field, or a shorter packed field
    _assert_agrees_with_upb(bytes(data))


@pytest.mark.parametrize(
    "fields",
    [
        _ld(2, b"a") + _ld(2, b"b"),  # the value twice: the last wins
        _ld(2, b"a") + b"\x18\x01",  # an unknown field after it
        b"\x18\x01" + _ld(2, b"a"),  # and before it
        _ld(2, b"a") + _stamp(4, 0),  # the timestamp after the value
        _ld(2, b""),  # an empty string written out
        _ld(2, b"\n\x02\n\x00"),  # text that looks like points
    ],
)
def test_odd_string_points_between_canonical_ones_decode_like_upb(fields: bytes) -> None:
    plain = _ld(1, _stamp(1_700_000_000, 5) + _ld(2, b"ok"))
    points = plain * 3 + _ld(1, _stamp(3, 0) + fields) + plain * 2
    data = _series(_channel(b"s"), _ld(3, _ld(2, points))) * 2
    _assert_agrees_with_upb(data)


@pytest.mark.parametrize("vt", [V.INT64, V.UINT64])
def test_canonical_counters_decode_without_upb(no_fallback: None, vt: ValueType) -> None:
    rng = np.random.default_rng(13)
    batches = []
    for j in range(6):
        n = int(rng.integers(0, 300))
        ts = np.sort(rng.integers(0, 2**62, n))
        values = rng.integers(0, 2 ** (7 * (j + 1)), n).astype(vt.numpy_dtype)
        values[::3] = 0  # omitted
        batches.append(SeriesBatch(SeriesKey.of(f"n{j}"), vt, ts, values))
    assert_body_equal(batches, decode_write_nominal(reference_row.encode(batches), RID), None)
    assert_body_equal(batches[2:3], decode_write_nominal(reference_row.encode(batches[2:3]), RID), None)


@pytest.mark.parametrize("member", [3, 6])
@pytest.mark.parametrize(
    "fields",
    [b"\x10\x05\x10\x07", b"\x10\x05\x18\x01", b"\x18\x01\x10\x05", b"\x10\x05" + _stamp(4, 0), b"\x10\x80\x00", b""],
)
def test_odd_integer_points_between_canonical_ones_decode_like_upb(member: int, fields: bytes) -> None:
    plain = _ld(1, _stamp(1_700_000_000, 5) + b"\x10\x2a")
    points = plain * 3 + _ld(1, _stamp(3, 0) + fields) + plain * 2
    data = _series(_channel(b"n"), _ld(3, _ld(member, points))) * 2
    _assert_agrees_with_upb(data)


@pytest.mark.parametrize(
    "fields",
    [
        _ld(2, struct.pack("<2d", 1.0, 2.0)) + _ld(2, struct.pack("<d", 3.0)),  # two packed runs: concatenated
        _f64(1.0) + _f64(2.0),  # unpacked
        _ld(2, b"\x00" * 7),  # not a whole double
        _ld(2, b""),  # an empty packed field written out
        _ld(2, struct.pack("<d", 1.0)) + b"\x18\x01",  # an unknown field after it
    ],
)
def test_odd_array_points_between_canonical_ones_decode_like_upb(fields: bytes) -> None:
    plain = _ld(1, _stamp(1_700_000_000, 5) + _ld(2, struct.pack("<3d", 1.0, 2.0, 3.0)))
    points = plain * 3 + _ld(1, _stamp(3, 0) + fields) + plain * 2
    data = _series(_channel(b"a"), _ld(3, _ld(4, _ld(1, points)))) * 2
    _assert_agrees_with_upb(data)


# ---------------------------------------------------------------------------------------------
# String-array rows: the fast paths of both directions against upb and the general encoder
# ---------------------------------------------------------------------------------------------

# Short and long (>= 128 bytes: a two-byte length), ASCII and not, NULs and 01 bytes (the
# stand-ins of the fast paths), empty strings.
_SA_TEXT = st.one_of(
    st.sampled_from(["", "a", "OK", "héllo", "a\0b", "\1", "\x12", "x" * 127, "é" * 64, "y" * 200]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6),
)
_SA_ROWS = st.lists(st.lists(_SA_TEXT, max_size=40), max_size=12)
_SA_TS = st.sampled_from([0, 1, T, 2**63 - 1, -1, -(2**63)]) | st.integers(-(2**63), 2**63 - 1)


def _general_string_array_points(rows: list[list[str]], ns: np.ndarray, tsw: int) -> bytes:
    """Today's general path of the encoder (entries by ``_string_entries``), byte for byte."""
    flat = [s for r in rows for s in r]
    body, sizes = wn._string_entries(flat, 0x12)
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    return bytes(wn._ragged_points(ns, tsw, body, wn._segment_sums(sizes, counts))[0])


@PROPS
@given(_SA_ROWS, st.data())
def test_string_array_points_match_the_general_encoder_byte_for_byte(rows: list[list[str]], data: Any) -> None:
    ns = np.array(data.draw(st.lists(_SA_TS, min_size=len(rows), max_size=len(rows))), dtype=np.int64)
    tsw = wn.timestamp_width(ns)
    batch = SeriesBatch(SeriesKey.of("sa"), V.STRING_ARRAY, ns, rows)
    got = bytes(wn._string_array_points(0, batch, ns, tsw))
    assert got == _general_string_array_points(rows, ns, tsw)
    want = reference_row.decode(encode_write_nominal([batch]), RID)
    assert_body_equal([batch], want, None)


@PROPS
@given(st.lists(st.tuples(_SA_ROWS, st.sampled_from([0, T, -T, 2**62])), min_size=1, max_size=4))
def test_string_array_bodies_decode_like_upb(series: list[tuple[list[list[str]], int]]) -> None:
    batches = [
        SeriesBatch(SeriesKey.of(f"sa{j}"), V.STRING_ARRAY, t0 + np.arange(len(rows), dtype=np.int64), rows)
        for j, (rows, t0) in enumerate(series)
    ]
    for data in (encode_write_nominal(batches), reference_row.encode(batches)):
        want = reference_row.decode(data, RID)
        got = decode_write_nominal(data, RID)
        assert_body_equal(want.batches, got, None)
        for b in got.batches:
            assert all(type(r) is list for r in b.values)


def test_short_string_arrays_decode_without_upb(no_fallback: None) -> None:
    rng = np.random.default_rng(5)
    # (Text holding many 12 bytes, the entries' key, is left to upb: tested above.)
    words = np.array(["OK", "", "FAULT-12", "héllo", "a\nb", "z" * 100, "\0", "\1", "y" * 200, "é" * 70])
    n = 3000
    rows = [words[rng.integers(0, len(words), k % 40)].tolist() for k in range(n)]
    same = [["s1", "s2"]] * 500  # repeated rows: each read is a list of its own
    batches = [
        SeriesBatch(SeriesKey.of("w", {"rig": "a"}), V.STRING_ARRAY, np.arange(T, T + n, dtype=np.int64), rows),
        SeriesBatch(SeriesKey.of("s"), V.STRING_ARRAY, np.arange(500, dtype=np.int64) * 10**9 + 7, same),
        SeriesBatch(SeriesKey.of("e"), V.STRING_ARRAY, np.arange(3, dtype=np.int64), [[], [""], []]),
    ]
    for data in (encode_write_nominal(batches), reference_row.encode(batches)):
        got = decode_write_nominal(data, RID)
        assert_body_equal(batches, got, None)
        # Columns, not a str per string (what the local server hands to Arrow).
        assert [type(b.values) for b in got.batches] == [StringRows] * 3
        s = got.batches[1].values
        assert s[0] is not s[1]
        s[0].append("x")  # a row read is the reader's own list: the rows stay as decoded
        assert s[0] == s[1] == ["s1", "s2"]


def test_invalid_utf8_in_a_string_array_is_a_decode_error() -> None:
    rows = [["ok", "ab"], ["cd"]] * 50
    data = encode_write_nominal([SeriesBatch(SeriesKey.of("sa"), V.STRING_ARRAY, _ts(*range(100)), rows)])
    at = data.rindex(b"cd")
    for bad in (b"\xff\xfe", b"\xc3("):  # not UTF-8; a lead byte before ASCII
        broken = data[:at] + bad + data[at + 2 :]
        with pytest.raises(DecodeError):
            reference_row.decode(broken, RID)
        with pytest.raises(DecodeError):
            decode_write_nominal(broken, RID)


def test_string_array_strings_split_across_points_are_refused_as_upb_does() -> None:
    # A point whose last entry's length runs into the next point: the joined entries would parse.
    one = b"\x0a\x05\x12\x01a\x12\x03"
    two = b"\x0a\x03\x12\x01x"
    data = _ld(1, _ld(1, _ld(1, b"sa")) + _ld(3, _ld(4, _ld(2, one + two))))
    assert list(nw.StringArrayPoint.FromString(one[2:] + two[2:]).value) == ["a", "\x12\x01x"]
    with pytest.raises(DecodeError):
        reference_row.decode(data, RID)
    with pytest.raises(DecodeError):
        decode_write_nominal(data, RID)


# ---------------------------------------------------------------------------------------------
# Many series in one request: the grouped encode (all series of a kind in one set of passes)
# ---------------------------------------------------------------------------------------------


_NEAR_LIMITS = st.sampled_from([-(2**63), -(2**63) + 1, 2**63 - 2, 2**63 - 1, -1, 0])


@st.composite
def many_series(draw: Any) -> list[SeriesBatch]:
    """Up to 40 series: all doubles of plain columns (the bulk intake) or mixed types, some with
    no points, tags, shared timestamp columns, and timestamps at the int64 limits."""
    doubles_only = draw(st.booleans())
    batches: list[SeriesBatch] = []
    for _ in range(draw(st.integers(0, 40))):
        b = draw(series_batch(V.DOUBLE if doubles_only else None, nonneg=draw(st.booleans())))
        if b.timestamps.shape[0] and draw(st.booleans()):
            ts = b.timestamps.copy()
            ts[draw(st.integers(0, ts.shape[0] - 1))] = draw(_NEAR_LIMITS)
            b = SeriesBatch(b.key, b.value_type, ts, b.values)
        if batches and draw(st.integers(0, 4)) == 0 and len(batches[-1]) == len(b):
            b = SeriesBatch(b.key, b.value_type, batches[-1].timestamps, b.values)  # one wide block
        batches.append(b)
    return batches


@PROPS
@given(many_series(), st.none() | st.text(max_size=4))
def test_many_series_encode_as_their_single_series_bodies_joined(
    batches: list[SeriesBatch], session: str | None
) -> None:
    data = encode_write_nominal(batches, session)
    assert_body_equal(batches, reference_row.decode(data, RID), session)
    alone = b"".join(encode_write_nominal([b]) for b in batches)
    assert data == alone + (encode_write_nominal([], session) if session is not None else b"")


# -- point matrices from the thread's scratch buffers (_Matrices) ------------------------------


def _large_request(seed: int) -> list[SeriesBatch]:
    """Doubles, int64s and a double-array series, each over _Matrices.MIN_BYTES of points: three
    large matrices in one encode, one more than the reused slots."""
    rng = np.random.default_rng(seed)
    n = 40_000
    ts = np.arange(1_700_000_000_000_000_000, 1_700_000_000_000_000_000 + n, dtype=np.int64) + seed
    return [
        SeriesBatch(SeriesKey.of("d"), ValueType.DOUBLE, ts, rng.random(n)),
        SeriesBatch(SeriesKey.of("i"), ValueType.INT64, ts, rng.integers(-(2**62), 2**62, n)),
        SeriesBatch(SeriesKey.of("a"), ValueType.DOUBLE_ARRAY, ts, rng.random((n, 3))),
    ]


def _assert_stores(body: bytes, batches: list[SeriesBatch]) -> None:
    got = reference_row.decode(body, "ri.x")
    assert len(got.batches) == len(batches)
    for k, (want, have) in enumerate(zip(batches, got.batches, strict=True)):
        assert_batch_equal(want, have, f"batch {k}")


def test_large_matrices_come_from_scratch_and_each_body_stays_intact() -> None:
    assert wn._Matrices.MIN_BYTES <= 40_000 * 19  # the smallest of the three matrices is large
    first_batches, second_batches = _large_request(1), _large_request(2)
    first = encode_write_nominal(first_batches)
    # A body of its own, not a view of the scratch matrices the next encode writes over.
    assert type(first) is bytes
    second = encode_write_nominal(second_batches)  # reuses the first encode's matrices
    _assert_stores(first, first_batches)
    _assert_stores(second, second_batches)
    # The same bytes as with every matrix fresh (slots off).
    slots = wn._Matrices.SLOTS
    wn._Matrices.SLOTS = 0
    try:
        assert encode_write_nominal(second_batches) == second
    finally:
        wn._Matrices.SLOTS = slots


def test_threads_encoding_at_once_each_get_their_own_matrices() -> None:
    requests = [_large_request(seed) for seed in range(4)]
    want = [encode_write_nominal(b) for b in requests]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(k: int) -> None:
        try:
            start.wait(timeout=30)
            for _ in range(5):
                assert encode_write_nominal(requests[k]) == want[k]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    for body, batches in zip(want, requests, strict=True):
        _assert_stores(body, batches)
