"""The decoder's whole-request fast path (``_fixed_layout_batches``) against upb and the general path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from beam_nominal._wire import decode as dec
from beam_nominal._wire import fields, reference
from beam_nominal._wire._varint import varint_bytes
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal._wire.decode import decode_request
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType

T = 1_700_000_000_000_000_000


def numeric_batches() -> list[SeriesBatch]:
    ts = T + np.arange(5, dtype=np.int64) * 7
    return [
        SeriesBatch(SeriesKey.of("d", {"rig": "a", "unit": "m"}), ValueType.DOUBLE, ts, np.linspace(-1, 1, 5)),
        SeriesBatch(SeriesKey.of("i"), ValueType.INT64, ts[:3], np.array([-(2**63), 0, 2**62], dtype=np.int64)),
        SeriesBatch(SeriesKey.of("u", {"k": ""}), ValueType.UINT64, ts[:2], np.array([2**64 - 1, 300], np.uint64)),
        # Bytes 1a 0c (a timestamp field's key and length) inside the channel and a tag value.
        SeriesBatch(SeriesKey.of("x\x1a\x0cy", {"t": "\x1a\x0c"}), ValueType.DOUBLE, ts[:1], np.array([2.5])),
        SeriesBatch(SeriesKey.of("d", {"rig": "a", "unit": "m"}), ValueType.DOUBLE, ts[:2], np.array([3.0, 4.0])),
    ]


def same(a: DecodedRequest, b: DecodedRequest) -> None:
    assert (a.dataset_rid, a.source_name, len(a.batches)) == (b.dataset_rid, b.source_name, len(b.batches))
    for x, y in zip(a.batches, b.batches, strict=True):
        assert (x.key, x.value_type) == (y.key, y.value_type)
        assert x.timestamps.dtype == np.int64 and x.timestamps.tolist() == y.timestamps.tolist()
        assert np.asarray(x.values).dtype == np.asarray(y.values).dtype
        assert np.asarray(x.values).tobytes() == np.asarray(y.values).tobytes()


@pytest.fixture
def fast_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records whether each request went through the fast path (True) or fell back (False)."""
    calls: list[bool] = []
    real = dec._fixed_layout_batches

    def spy(*args: Any) -> Any:
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(dec, "_fixed_layout_batches", spy)
    return calls


def test_numeric_request_takes_the_fast_path_and_agrees_with_upb(fast_calls: list[bool]) -> None:
    body = encode_request("ri.r", numeric_batches(), source_name="src")
    for _ in range(2):  # the second time from the key cache
        same(dec.decode_request(body), reference.decode(body))
    assert fast_calls == [True, True]
    out = dec.decode_request(body).batches
    assert all(b.timestamps.flags.writeable and np.asarray(b.values).flags.writeable for b in out)


def test_string_batch_sends_the_request_to_the_general_path(fast_calls: list[bool]) -> None:
    batches = [*numeric_batches(), SeriesBatch(SeriesKey.of("s"), ValueType.STRING, np.array([T]), ["a"])]
    body = encode_request("ri.r", batches)
    out = dec.decode_request(body)
    assert fast_calls == [False]
    assert out.batches[-1].values == ["a"]
    same(DecodedRequest(out.dataset_rid, None, out.batches[:-1]), DecodedRequest("ri.r", None, numeric_batches()))


@pytest.mark.parametrize("which", [1, 0], ids=["int64", "double"])
def test_count_mismatch_in_the_fast_layout_is_named_as_before(fast_calls: list[bool], which: int) -> None:
    # Splice a batch to carry one value fewer than timestamps: the timestamps of the whole
    # batch, the value field of the batch without its last point.
    one = numeric_batches()[which]
    n = len(one)
    full = encode_request("ri.r", [one])
    short = encode_request("ri.r", [SeriesBatch(one.key, one.value_type, one.timestamps[:-1], one.values[:-1])])
    # Each request: rid field (6 bytes), 12 <length>, then the batch: names, timestamps, values.
    names_end = full.index(b"\x1a\x0c")  # no 1a 0c in these names
    timestamps = full[names_end : names_end + 14 * n]
    values = short[short.index(b"\x1a\x0c") + 14 * (n - 1) :]
    _length, start = fields.read_small_varint(full, 7, len(full), "request")
    batch = full[start:names_end] + timestamps + values
    body = b"\x0a\x04ri.r" + b"\x12" + varint_bytes(len(batch)) + batch
    with pytest.raises(MalformedBatchError) as info:
        dec.decode_request(body)
    assert (info.value.index, info.value.channel) == (0, one.key.channel)
    assert f"{n} timestamps but {n - 1} values" in str(info.value)
    assert fast_calls == [False]


def test_timestamp_beyond_int64_nanoseconds_falls_back_and_is_rejected(fast_calls: list[bool]) -> None:
    from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw

    body = encode_request("ri.r", numeric_batches()[:1])
    req = cw.WriteColumnBatchesRequest.FromString(body)
    # 2**34 s fits the 5-byte seconds of the fixed form but not int64 nanoseconds.
    fixed = bytearray(body)
    at = body.index(b"\x1a\x0c\x08")
    seconds = 2**34
    for k in range(5):
        fixed[at + 3 + k] = ((seconds >> (7 * k)) & 0x7F) | (0x80 if k < 4 else 0)
    with pytest.raises(MalformedBatchError, match="outside the int64 nanosecond range"):
        dec.decode_request(bytes(fixed))
    assert fast_calls == [False]
    assert req.batches[0].channel == "d"


@pytest.mark.parametrize("form", ["grpc", "row", "columnar"])
def test_a_tag_padded_past_five_bytes_is_refused_as_upb_refuses_it(form: str) -> None:
    from beam_nominal._wire import reference_columnar, reference_row
    from beam_nominal._wire.write_batches_v2 import decode_write_batches_v2, encode_write_batches_v2
    from beam_nominal._wire.write_nominal import decode_write_nominal, encode_write_nominal

    b = [SeriesBatch(SeriesKey("c", ()), ValueType.DOUBLE, np.array([1], dtype=np.int64), np.array([2.0]))]
    # An unknown varint field 31 whose tag is written in 7 bytes, then its value 1.
    junk = bytes([0xF8, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01])
    codecs: dict[str, tuple[Any, Any, Any]] = {
        "grpc": (lambda: encode_request("ri.x", b), decode_request, reference.decode),
        "row": (lambda: encode_write_nominal(b), lambda x: decode_write_nominal(x, "ri.x"),
                lambda x: reference_row.decode(x, "ri.x")),
        "columnar": (lambda: encode_write_batches_v2("ri.x", b), decode_write_batches_v2, reference_columnar.decode),
    }
    encode, fast, slow = codecs[form]
    body = encode() + junk
    with pytest.raises(DecodeError):
        slow(body)
    with pytest.raises(DecodeError, match="tag of 7 bytes"):
        fast(body)
