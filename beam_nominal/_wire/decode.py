"""Decode request bytes into columns, vectorised: the server's side of :mod:`encode`.

A ``WriteColumnBatchesRequest`` is walked field by field with byte offsets: a short Python loop
per request and per ``ColumnBatch``, never per point. Columns are read with numpy:

* timestamps in the fixed-width form our encoder writes are recognised and verified as a whole
  (two 64-bit word compares per point) and decoded with shifts and masks;
* packed doubles are one ``np.frombuffer``; packed int64/uint64 one vectorised varint decode;
* strings go through upb, which builds the ``str`` objects in C.

Anything else that is still valid protobuf (canonical timestamps from the generated classes or
another client, unpacked repeated scalars, a field split into several occurrences) makes that one
batch fall back to the upb parse of :mod:`reference`, so every valid encoding decodes to the same
values, only slower. Unknown fields are skipped everywhere (forward compatibility).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from beam_nominal._wire import reference
from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_channel_writer_common_pb2 as common,
)
from beam_nominal._wire._varint import I64, U8, U64, decode_varints
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType

__all__ = ["decode_request", "decode_write_batches"]

_NS = 1_000_000_000
# |seconds| up to this bound cannot overflow int64 nanoseconds even with an int32 nanos field.
_SAFE_SECONDS = 9_223_372_034
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_U = np.uint64
# Fixed-width timestamp rows, checked as little-endian words under a mask (see encode.py):
# bytes 0..7 = 1a 0c 08 s0 s1 s2 s3 s4, bytes 6..13 = s3 s4 10 n0 n1 n2 n3 n4.
_LO_MASK = _U(0x80_80_80_80_80_FF_FF_FF)
_LO_WANT = _U(0x00_80_80_80_80_08_0C_1A)
_HI_MASK = _U(0x80_80_80_80_80_FF_00_00)
_HI_WANT = _U(0x00_80_80_80_80_10_00_00)


class _Fallback(Exception):
    """A batch uses a valid encoding the fast path does not handle; decode it with upb."""


# ---------------------------------------------------------------------------------------------
# Field walking
# ---------------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    if pos >= end:
        raise DecodeError(f"{where}: truncated (varint expected at byte {pos})")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= end:
            raise DecodeError(f"{where}: truncated varint at byte {pos}")
        if shift > 63:
            raise DecodeError(f"{where}: varint longer than 10 bytes at byte {pos}")
        b = buf[pos]
        result |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return result & 0xFFFF_FFFF_FFFF_FFFF, pos
        shift += 7


def _tag(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int, int]:
    """(field number, wire type, next position)."""
    key, pos = _varint(buf, pos, end, where)
    field = key >> 3
    if field == 0 or field > 0x1FFF_FFFF:
        raise DecodeError(f"{where}: invalid field number {field}")
    return field, key & 7, pos


def _length(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    """(start, stop) of a length-delimited field whose length varint is at ``pos``."""
    n, pos = _varint(buf, pos, end, where)
    stop = pos + n
    if stop > end:
        raise DecodeError(f"{where}: field of {n} bytes runs past the end of its message")
    return pos, stop


def _skip(buf: bytes, pos: int, end: int, field: int, wire_type: int, where: str) -> int:
    """Skip one field's value (the tag already read) and return the next position."""
    if wire_type == 0:
        return _varint(buf, pos, end, where)[1]
    if wire_type == 1:
        pos += 8
    elif wire_type == 5:
        pos += 4
    elif wire_type == 2:
        return _length(buf, pos, end, where)[1]
    elif wire_type == 3:
        while True:
            inner, wt, pos = _tag(buf, pos, end, where)
            if wt == 4:
                if inner != field:
                    raise DecodeError(f"{where}: group {field} closed by end-group {inner}")
                return pos
            pos = _skip(buf, pos, end, inner, wt, where)
    else:
        raise DecodeError(f"{where}: invalid wire type {wire_type} for field {field}")
    if pos > end:
        raise DecodeError(f"{where}: truncated fixed-width field {field}")
    return pos


def _text(buf: bytes, start: int, stop: int, where: str) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{where}: string is not valid UTF-8 ({exc.reason})") from None


# ---------------------------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------------------------


def _unspread5(w: U64) -> U64:
    """Inverse of the encoder's ``_spread5``: 5 varint bytes in the low 40 bits -> value."""
    v = w & _U(0x7F)
    v |= (w >> _U(1)) & _U(0x3F80)
    v |= (w >> _U(2)) & _U(0x1FC000)
    v |= (w >> _U(3)) & _U(0xFE00000)
    v |= (w >> _U(4)) & _U(0x7F0000000)
    return v


def _words(buf: bytes, offset: int, n: int, stride: int) -> U64:
    return np.ndarray((n,), dtype="<u8", buffer=buf, offset=offset, strides=(stride,)).astype(np.uint64)


def _fixed_timestamps(buf: bytes, arr: U8, pos: int, stop: int, index: int, channel: str) -> tuple[I64, int]:
    """Decode a run of fixed-width 14-byte Timestamp entries starting at ``pos``.

    The run is every consecutive entry whose tag and length bytes match, which is exactly what a
    sequential parser would read as entries; each is then verified byte by byte (as words).

    Raises:
        _Fallback: the entry at ``pos`` is not in the fixed-width form, or a run entry's inner
            bytes are not the exact fixed-width layout.
    """
    if pos + 2 > stop:
        raise _Fallback
    width = 14 if buf[pos + 1] == 12 else 19 if buf[pos + 1] == 17 else 0
    m = (stop - pos) // width if width else 0
    if m == 0:
        raise _Fallback
    rows = arr[pos : pos + m * width].reshape(m, width)
    heads = (rows[:, 0] == 0x1A) & (rows[:, 1] == width - 2)
    k = m if heads.all() else int(np.argmin(heads))
    if k == 0:
        # e.g. a non-minimal tag varint: valid, but not our layout.
        raise _Fallback
    if width == 19:
        return _fixed_timestamps_10(buf, rows[:k], index, channel), pos + k * width
    lo = _words(buf, pos, k, width)
    hi = _words(buf, pos + 6, k, width)
    if not (((lo & _LO_MASK) == _LO_WANT).all() and ((hi & _HI_MASK) == _HI_WANT).all()):
        raise _Fallback
    sec = _unspread5(lo >> _U(24)).view(np.int64)
    # nanos is an int32 field: a wider varint keeps its low 32 bits, as every parser does.
    nanos = (_unspread5(hi >> _U(24)) & _U(0xFFFF_FFFF)).astype(np.uint32).view(np.int32)
    return _combine(sec, nanos.astype(np.int64), index, channel), pos + k * width


def _fixed_timestamps_10(buf: bytes, rows: U8, index: int, channel: str) -> I64:
    """19-byte entries: ``1a 11 08 <seconds: 10-byte varint> 10 <nanos: 5-byte varint>``."""
    cont = rows[:, 3:12].min(axis=1) >= 0x80
    cont &= rows[:, 14:18].min(axis=1) >= 0x80
    ok = cont & (rows[:, 2] == 0x08) & (rows[:, 12] <= 1) & (rows[:, 13] == 0x10) & (rows[:, 18] < 0x80)
    if not ok.all():
        raise _Fallback
    sec = np.zeros(rows.shape[0], dtype=np.uint64)
    for k in range(10):
        sec |= (rows[:, 3 + k] & 0x7F).astype(np.uint64) << _U(7 * k)
    nanos = np.zeros(rows.shape[0], dtype=np.uint64)
    for k in range(5):
        nanos |= (rows[:, 14 + k] & 0x7F).astype(np.uint64) << _U(7 * k)
    nanos32 = (nanos & _U(0xFFFF_FFFF)).astype(np.uint32).view(np.int32)
    return _combine(sec.view(np.int64), nanos32.astype(np.int64), index, channel)


def _combine(sec: I64, nanos: I64, index: int, channel: str) -> I64:
    """seconds * 1e9 + nanos, refusing values outside int64 nanoseconds instead of wrapping."""
    if sec.shape[0] and (int(sec.max()) > _SAFE_SECONDS or int(sec.min()) < -_SAFE_SECONDS):
        for j, (s, n) in enumerate(zip(sec.tolist(), nanos.tolist(), strict=True)):
            if not _INT64_MIN <= s * _NS + n <= _INT64_MAX:
                raise MalformedBatchError(
                    index, channel, f"timestamps[{j}] ({s} s, {n} ns) is outside the int64 nanosecond range"
                )
    out: I64 = sec * _NS + nanos
    return out


def _packed_field(buf: bytes, start: int, stop: int, where: str) -> list[tuple[int, int]]:
    """Spans of every packed occurrence of field 1 in a points message; unpacked -> fallback."""
    spans: list[tuple[int, int]] = []
    pos = start
    while pos < stop:
        field, wt, pos = _tag(buf, pos, stop, where)
        if field == 1:
            if wt != 2:
                raise _Fallback
            s, pos = _length(buf, pos, stop, where)
            spans.append((s, pos))
        else:
            pos = _skip(buf, pos, stop, field, wt, where)
    return spans


def _doubles(buf: bytes, spans: list[tuple[int, int]], where: str) -> Any:
    chunks = []
    for s, e in spans:
        if (e - s) % 8:
            raise DecodeError(f"{where}: packed doubles of {e - s} bytes, not a multiple of 8")
        chunks.append(np.frombuffer(buf, dtype="<f8", count=(e - s) // 8, offset=s))
    if not chunks:
        return np.empty(0, dtype=np.float64)
    return np.concatenate(chunks).astype(np.float64) if len(chunks) > 1 else chunks[0].astype(np.float64)


def _integers(arr: U8, spans: list[tuple[int, int]], where: str) -> U64:
    chunks = [decode_varints(arr[s:e], where) for s, e in spans]
    if not chunks:
        return np.empty(0, dtype=np.uint64)
    return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]


def _double_rows(buf: bytes, start: int, stop: int, where: str) -> list[Any]:
    rows: list[Any] = []
    pos = start
    while pos < stop:
        field, wt, pos = _tag(buf, pos, stop, where)
        if field != 1 or wt != 2:
            pos = _skip(buf, pos, stop, field, wt, where)
            continue
        s, pos = _length(buf, pos, stop, where)
        # DoubleArrayPoint { packed double value = 2 }
        spans: list[tuple[int, int]] = []
        p = s
        while p < pos:
            f, w, p = _tag(buf, p, pos, where)
            if f == 2:
                if w != 2:
                    raise _Fallback
                a, p = _length(buf, p, pos, where)
                spans.append((a, p))
            else:
                p = _skip(buf, p, pos, f, w, where)
        rows.append(_doubles(buf, spans, where))
    return rows


def _single_member(buf: bytes, spans: list[tuple[int, int]], where: str) -> tuple[int, int, int] | None:
    """The one oneof member set in a message: (field, start, stop); None when none is.

    Repeated occurrences merge under protobuf rules; rather than re-implement merging, they make
    the batch fall back to upb.
    """
    found: tuple[int, int, int] | None = None
    for start, stop in spans:
        pos = start
        while pos < stop:
            field, wt, pos = _tag(buf, pos, stop, where)
            if wt == 2 and 1 <= field <= 6:
                s, pos = _length(buf, pos, stop, where)
                if found is not None:
                    raise _Fallback
                found = (field, s, pos)
            else:
                pos = _skip(buf, pos, stop, field, wt, where)
    return found


def _values(
    buf: bytes, arr: U8, spans: list[tuple[int, int]], index: int, channel: str
) -> tuple[ValueType, Any]:
    where = f"batches[{index}].values"
    member = _single_member(buf, spans, where)
    if member is None:
        raise MalformedBatchError(index, channel, "value type not set")
    field, s, e = member
    if field == 1:
        return ValueType.DOUBLE, _doubles(buf, _packed_field(buf, s, e, where), where)
    if field == 3:
        return ValueType.INT64, _integers(arr, _packed_field(buf, s, e, where), where).view(np.int64)
    if field == 4:
        return ValueType.UINT64, _integers(arr, _packed_field(buf, s, e, where), where)
    if field in (2, 6):
        msg = common.StringPoints.FromString(buf[s:e])
        return (ValueType.STRING if field == 2 else ValueType.STRUCT), list(msg.points)
    if field == 5:
        kind = _single_member(buf, [(s, e)], where)
        if kind is None or kind[0] > 2:
            raise MalformedBatchError(index, channel, "array value type not set")
        if kind[0] == 1:
            return ValueType.DOUBLE_ARRAY, _double_rows(buf, kind[1], kind[2], where)
        sap = common.StringArrayPoints.FromString(buf[kind[1] : kind[2]])
        return ValueType.STRING_ARRAY, [list(p.value) for p in sap.points]
    raise AssertionError(field)  # pragma: no cover - _single_member returns fields 1..6 only


def _batch(buf: bytes, arr: U8, start: int, stop: int, index: int) -> SeriesBatch:
    where = f"batches[{index}]"
    channel = ""
    tags: dict[str, str] = {}
    ts_chunks: list[I64] = []
    value_spans: list[tuple[int, int]] = []
    pos = start
    while pos < stop:
        field_pos = pos
        field, wt, pos = _tag(buf, pos, stop, where)
        if wt != 2 or field > 4:
            pos = _skip(buf, pos, stop, field, wt, where)
            continue
        if field == 3:
            ts, pos = _fixed_timestamps(buf, arr, field_pos, stop, index, channel)
            ts_chunks.append(ts)
            continue
        s, pos = _length(buf, pos, stop, where)
        if field == 1:
            channel = _text(buf, s, pos, f"{where}.channel")
        elif field == 2:
            entry = _map_entry(buf, s, pos, f"{where}.tags")
            if entry is not None:
                tags[entry[0]] = entry[1]
        else:
            value_spans.append((s, pos))
    if not ts_chunks:
        ts = np.empty(0, dtype=np.int64)
    else:
        ts = ts_chunks[0] if len(ts_chunks) == 1 else np.concatenate(ts_chunks)
    vt, values = _values(buf, arr, value_spans, index, channel)
    if len(values) != ts.shape[0]:
        raise MalformedBatchError(index, channel, f"{ts.shape[0]} timestamps but {len(values)} values")
    return SeriesBatch(SeriesKey(channel, tuple(sorted(tags.items()))), vt, ts, values)


def _map_entry(buf: bytes, start: int, stop: int, where: str) -> tuple[str, str] | None:
    """A tags entry's (key, value); None for an entry holding unknown fields.

    upb keeps such an entry as an unknown field of the batch rather than as a tag; doing the
    same keeps every decoder of ours agreeing with the generated classes.
    """
    key = value = ""
    unknown = False
    pos = start
    while pos < stop:
        field, wt, pos = _tag(buf, pos, stop, where)
        if wt == 2 and field in (1, 2):
            s, pos = _length(buf, pos, stop, where)
            if field == 1:
                key = _text(buf, s, pos, where)
            else:
                value = _text(buf, s, pos, where)
        else:
            pos = _skip(buf, pos, stop, field, wt, where)
            unknown = True
    return None if unknown else (key, value)


def _slow_batch(buf: bytes, start: int, stop: int, index: int) -> SeriesBatch:
    """Decode one ColumnBatch with upb and the reference converter."""
    req = cw.WriteColumnBatchesRequest()
    req.batches.add().MergeFromString(buf[start:stop])
    try:
        return reference.from_proto(req).batches[0]
    except MalformedBatchError as exc:
        raise MalformedBatchError(index, exc.channel, exc.reason) from None
    except OverflowError:
        raise MalformedBatchError(
            index, req.batches[0].channel, "a timestamp is outside the int64 nanosecond range"
        ) from None


def decode_request(data: bytes | bytearray | memoryview) -> DecodedRequest:
    """Parse ``WriteColumnBatchesRequest`` bytes into columns.

    Args:
        data: the request's wire bytes, in any valid protobuf encoding.

    Returns:
        The dataset rid, source name (None when absent) and one :class:`SeriesBatch` per
        ``ColumnBatch``, in order. Numeric columns are fresh writable arrays.

    Raises:
        MalformedBatchError: a batch without a value type, whose counts disagree, or with a
            timestamp outside int64 nanoseconds; it names the batch index and channel.
        google.protobuf.message.DecodeError: bytes that are not a valid request (truncated,
            garbage, invalid UTF-8).
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    arr = np.frombuffer(buf, dtype=np.uint8)
    end = len(buf)
    rid = ""
    source: str | None = None
    batches: list[SeriesBatch] = []
    # A bad batch is reported only after the whole request proved to be valid protobuf, so that
    # broken bytes are always a DecodeError, as with upb.
    malformed: MalformedBatchError | None = None
    pos = 0
    while pos < end:
        field, wt, pos = _tag(buf, pos, end, "request")
        if wt != 2 or field > 3:
            pos = _skip(buf, pos, end, field, wt, "request")
            continue
        s, pos = _length(buf, pos, end, "request")
        if field == 1:
            rid = _text(buf, s, pos, "data_source_rid")
        elif field == 3:
            source = _text(buf, s, pos, "source_name")
        else:
            index = len(batches)
            try:
                try:
                    batch = _batch(buf, arr, s, pos, index)
                except _Fallback:
                    batch = _slow_batch(buf, s, pos, index)
            except MalformedBatchError as exc:
                cw.ColumnBatch.FromString(buf[s:pos])  # broken bytes win: DecodeError, as upb
                malformed = malformed or exc
                batch = SeriesBatch(SeriesKey(""), ValueType.DOUBLE, np.empty(0, np.int64), np.empty(0))
            batches.append(batch)
    if malformed is not None:
        raise malformed
    return DecodedRequest(rid, source, batches)


# ---------------------------------------------------------------------------------------------
# Row-oriented WriteBatchesRequest (for completeness; generated classes are fast enough here)
# ---------------------------------------------------------------------------------------------

_ROW_TYPES = {
    "double_points": ValueType.DOUBLE,
    "string_points": ValueType.STRING,
    "int64_points": ValueType.INT64,
    "uint64_points": ValueType.UINT64,
    "struct_points": ValueType.STRUCT,
}


def decode_write_batches(data: bytes | bytearray | memoryview) -> DecodedRequest:
    """Parse a row-oriented ``WriteBatchesRequest`` into the same columns as :func:`decode_request`.

    Each ``RowBatch`` becomes one :class:`SeriesBatch` (its ``unit`` is not kept).

    Raises:
        MalformedBatchError: a batch whose points (or array points) type is not set, or with a
            timestamp outside int64 nanoseconds.
        google.protobuf.message.DecodeError: bytes that are not a valid request.
    """
    req = cw.WriteBatchesRequest.FromString(bytes(data))
    out: list[SeriesBatch] = []
    for i, rb in enumerate(req.batches):
        which = rb.points.WhichOneof("points")
        values: Any
        if which is None:
            raise MalformedBatchError(i, rb.channel, "points type not set")
        if which == "array_points":
            arrays = rb.points.array_points
            kind = arrays.WhichOneof("array_points")
            if kind == "double_array_points":
                vt = ValueType.DOUBLE_ARRAY
                points: Any = arrays.double_array_points.points
                values = [np.array(p.values, dtype=np.float64) for p in points]
            elif kind == "string_array_points":
                vt = ValueType.STRING_ARRAY
                points = arrays.string_array_points.points
                values = [list(p.values) for p in points]
            else:
                raise MalformedBatchError(i, rb.channel, "array points type not set")
        else:
            vt = _ROW_TYPES[which]
            points = getattr(rb.points, which).points
            if vt is ValueType.STRUCT:
                values = [p.json for p in points]
            elif vt is ValueType.STRING:
                values = [p.value for p in points]
            else:
                dtype = vt.numpy_dtype
                values = np.fromiter((p.value for p in points), dtype=dtype, count=len(points))
        n = len(points)
        sec = np.fromiter((p.timestamp.seconds for p in points), dtype=np.int64, count=n)
        nanos = np.fromiter((p.timestamp.nanos for p in points), dtype=np.int64, count=n)
        ts = _combine(sec, nanos, i, rb.channel)
        out.append(SeriesBatch(SeriesKey(rb.channel, tuple(sorted(rb.tags.items()))), vt, ts, values))
    return DecodedRequest(req.data_source_rid, req.source_name if req.HasField("source_name") else None, out)
