"""Protobuf fields read straight from request bytes: what every hand decoder of the server shares.

Varints, tags, lengths, skipping unknown fields, UTF-8 text, map entries, a message's one oneof
member, the top level of a write request, and runs of Timestamp entries in the fixed 14- and
19-byte forms our encoders write (verified and decoded as whole columns). Errors are upb's:
``DecodeError`` for bytes upb would refuse; :class:`UpbFallback` where the bytes are valid but in
a form these readers do not take, so the caller hands them to upb.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from beam_nominal._wire._varint import I64, U64

__all__ = [
    "NS",
    "UpbFallback",
    "decode_fixed_14",
    "decode_fixed_19",
    "first_out_of_range",
    "fixed_14_ns",
    "map_entry",
    "read_length",
    "read_small_varint",
    "read_tag",
    "read_text",
    "read_varint",
    "request_fields",
    "single_member",
    "skip_field",
    "unspread5",
]

_U = np.uint64

NS = 1_000_000_000
# |seconds| up to this bound cannot overflow int64 nanoseconds even with an int32 nanos field.
_SAFE_SECONDS = 9_223_372_034
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


# Fixed-width timestamp rows, checked as little-endian words under a mask (see encode.py):
# bytes 0..7 = 1a 0c 08 s0 s1 s2 s3 s4, bytes 6..13 = s3 s4 10 n0 n1 n2 n3 n4.
_LO_MASK = _U(0x80_80_80_80_80_FF_FF_FF)
_LO_WANT = _U(0x00_80_80_80_80_08_0C_1A)
_HI_MASK = _U(0x80_80_80_80_80_FF_00_00)
_HI_WANT = _U(0x00_80_80_80_80_10_00_00)


class UpbFallback(Exception):
    """A batch uses a valid encoding the fast path does not handle; decode it with upb."""


def read_varint(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
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


def read_tag(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int, int]:
    """(field number, wire type, next position)."""
    key, after = read_varint(buf, pos, end, where)
    field = key >> 3
    if field == 0 or field > 0x1FFF_FFFF:
        raise DecodeError(f"{where}: invalid field number {field}")
    if after - pos > 5:
        # upb refuses a tag padded past 5 bytes; a fast path must not store what upb rejects.
        raise DecodeError(f"{where}: field tag of {after - pos} bytes (at most 5)")
    return field, key & 7, after


def read_length(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    """(start, stop) of a length-delimited field whose length varint is at ``pos``."""
    n, pos = read_varint(buf, pos, end, where)
    stop = pos + n
    if stop > end:
        raise DecodeError(f"{where}: field of {n} bytes runs past the end of its message")
    return pos, stop


# upb's default nesting limit; deeper unknown groups are refused rather than recursed into.
_MAX_DEPTH = 100


def skip_field(buf: bytes, pos: int, end: int, field: int, wire_type: int, where: str, depth: int = 0) -> int:
    """Skip one field's value (the tag already read) and return the next position."""
    if wire_type == 0:
        return read_varint(buf, pos, end, where)[1]
    if wire_type == 1:
        pos += 8
    elif wire_type == 5:
        pos += 4
    elif wire_type == 2:
        return read_length(buf, pos, end, where)[1]
    elif wire_type == 3:
        if depth >= _MAX_DEPTH:
            raise DecodeError(f"{where}: groups nested deeper than {_MAX_DEPTH}")
        while True:
            inner, wt, pos = read_tag(buf, pos, end, where)
            if wt == 4:
                if inner != field:
                    raise DecodeError(f"{where}: group {field} closed by end-group {inner}")
                return pos
            pos = skip_field(buf, pos, end, inner, wt, where, depth + 1)
    else:
        raise DecodeError(f"{where}: invalid wire type {wire_type} for field {field}")
    if pos > end:
        raise DecodeError(f"{where}: truncated fixed-width field {field}")
    return pos


def read_text(buf: bytes, start: int, stop: int, where: str) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{where}: string is not valid UTF-8 ({exc.reason})") from None


def unspread5(w: U64) -> U64:
    """Inverse of the encoder's ``_spread5``: 5 varint bytes in the low 40 bits -> value."""
    v = w & _U(0x7F)
    v |= (w >> _U(1)) & _U(0x3F80)
    v |= (w >> _U(2)) & _U(0x1FC000)
    v |= (w >> _U(3)) & _U(0xFE00000)
    v |= (w >> _U(4)) & _U(0x7F0000000)
    return v


def _nanos_field(raw: U64, int64: bool) -> I64:
    """The nanos field from its varints: all 64 bits for an int64 field; for an int32 field the
    low 32 bits, as every parser keeps of a wider varint."""
    if int64:
        return raw.view(np.int64)
    out: I64 = (raw & _U(0xFFFF_FFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    return out


def decode_fixed_14(region: Any, n: int, tag: int = 0x1A, nanos_int64: bool = False) -> tuple[Any, I64, I64]:
    """Verify and decode ``n`` 14-byte entries with field key ``tag``: (row ok mask, seconds, nanos)."""
    lo = np.ndarray((n,), dtype="<u8", buffer=region, offset=0, strides=(14,)).astype(np.uint64)
    hi = np.ndarray((n,), dtype="<u8", buffer=region, offset=6, strides=(14,)).astype(np.uint64)
    ok = ((lo & _LO_MASK) == _lo_want(tag)) & ((hi & _HI_MASK) == _HI_WANT)
    sec = unspread5(lo >> _U(24)).view(np.int64)
    return ok, sec, _nanos_field(unspread5(hi >> _U(24)), nanos_int64)


def _lo_want(tag: int) -> np.uint64:
    """The masked low word of a fixed-width entry whose field key is ``tag``."""
    return _U((int(_LO_WANT) & ~0xFF) | tag)


def decode_fixed_19(
    region: Any, n: int, offset: int = 0, stride: int = 19, tag: int = 0x1A, nanos_int64: bool = False
) -> tuple[Any, I64, I64]:
    """Verify and decode ``n`` 19-byte entries (10-byte two's complement seconds), the k-th at
    ``offset + k * stride`` with field key ``tag``."""
    rows = np.ndarray((n, 19), dtype=np.uint8, buffer=region, offset=offset, strides=(stride, 1))
    ok = (rows[:, 3:12].min(axis=1) >= 0x80) & (rows[:, 14:18].min(axis=1) >= 0x80)
    ok &= (rows[:, 0] == tag) & (rows[:, 1] == 17) & (rows[:, 2] == 0x08)
    ok &= (rows[:, 12] <= 1) & (rows[:, 13] == 0x10) & (rows[:, 18] < 0x80)
    sec = np.zeros(n, dtype=np.uint64)
    for k in range(10):
        sec |= (rows[:, 3 + k] & 0x7F).astype(np.uint64) << _U(7 * k)
    nanos = np.zeros(n, dtype=np.uint64)
    for k in range(5):
        nanos |= (rows[:, 14 + k] & 0x7F).astype(np.uint64) << _U(7 * k)
    return ok, sec.view(np.int64), _nanos_field(nanos, nanos_int64)


def first_out_of_range(sec: I64, nanos: I64) -> int | None:
    """Index of the first timestamp outside int64 nanoseconds, or None."""
    if sec.shape[0] == 0 or (int(sec.max()) <= _SAFE_SECONDS and int(sec.min()) >= -_SAFE_SECONDS):
        return None
    for j in np.flatnonzero((sec > _SAFE_SECONDS) | (sec < -_SAFE_SECONDS)).tolist():
        if not _INT64_MIN <= int(sec[j]) * NS + int(nanos[j]) <= _INT64_MAX:
            return int(j)
    return None


# Fields of the oneof members of ColumnValues (and, as before, what is looked for in ArrayPoints).
_MEMBER_FIELDS = range(1, 7)


def single_member(
    buf: bytes, spans: list[tuple[int, int]], where: str, fields: Container[int] = _MEMBER_FIELDS
) -> tuple[int, int, int] | None:
    """The one oneof member (of ``fields``) set in a message: (field, start, stop); None when none is.

    Repeated occurrences merge under protobuf rules; rather than re-implement merging, they make
    the batch fall back to upb.
    """
    found: tuple[int, int, int] | None = None
    for start, stop in spans:
        pos = start
        while pos < stop:
            field, wt, pos = read_tag(buf, pos, stop, where)
            if wt == 2 and field in fields:
                s, pos = read_length(buf, pos, stop, where)
                if found is not None:
                    raise UpbFallback
                found = (field, s, pos)
            else:
                pos = skip_field(buf, pos, stop, field, wt, where)
    return found


def map_entry(buf: bytes, start: int, stop: int, where: str) -> tuple[str, str] | None:
    """A tags entry's (key, value); None for an entry holding unknown fields.

    upb keeps such an entry as an unknown field of the batch rather than as a tag; doing the
    same keeps every decoder of ours agreeing with the generated classes.
    """
    key = value = ""
    unknown = False
    pos = start
    while pos < stop:
        field, wt, pos = read_tag(buf, pos, stop, where)
        if wt == 2 and field in (1, 2):
            s, pos = read_length(buf, pos, stop, where)
            if field == 1:
                key = read_text(buf, s, pos, where)
            else:
                value = read_text(buf, s, pos, where)
        else:
            pos = skip_field(buf, pos, stop, field, wt, where)
            unknown = True
    return None if unknown else (key, value)


def read_small_varint(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    """A varint known to have two bytes available at ``pos``: one- and two-byte forms inline."""
    b0 = buf[pos]
    if b0 < 0x80:
        return b0, pos + 1
    b1 = buf[pos + 1]
    if b1 < 0x80:
        return (b0 & 0x7F) | (b1 << 7), pos + 2
    return read_varint(buf, pos, end, where)


# Rows per block of the bulk timestamp decode: temporaries of 64 KiB stay in malloc's heap (the
# default mmap threshold is 128 KiB), so blocks reuse memory instead of faulting in fresh pages.
_TS_BLOCK = 8192


def fixed_14_ns(
    region: Any, n: int, offset: int = 0, stride: int = 14, tag: int = 0x1A, nanos_checked: bool = False
) -> I64 | None:
    """Nanoseconds of ``n`` 14-byte entries (the k-th at ``offset + k * stride``, field key
    ``tag``), block by block; None if any entry is not in the fixed form or not plainly inside
    int64 nanoseconds, or (``nanos_checked``) has nanos of 1e9 or more (the general path then
    decides)."""
    out = np.empty(n, dtype=np.int64)
    lo_all = np.ndarray((n,), dtype="<u8", buffer=region, offset=offset, strides=(stride,))
    hi_all = np.ndarray((n,), dtype="<u8", buffer=region, offset=offset + 6, strides=(stride,))
    lo_want = _lo_want(tag)
    for start in range(0, n, _TS_BLOCK):
        stop = min(start + _TS_BLOCK, n)
        lo = lo_all[start:stop].astype(np.uint64)
        hi = hi_all[start:stop].astype(np.uint64)
        if not (((lo & _LO_MASK) == lo_want) & ((hi & _HI_MASK) == _HI_WANT)).all():
            return None
        sec = unspread5(lo >> _U(24))
        # Seconds are 5-byte varints (< 2**35): only the upper bound can be crossed.
        if int(sec.max()) > _SAFE_SECONDS:
            return None
        raw = unspread5(hi >> _U(24))
        # Below 1e9 (checked or not), an int64 field's value is its int32 view too.
        if nanos_checked and int(raw.max()) >= NS:
            return None
        nanos = (raw & _U(0xFFFF_FFFF)).astype(np.uint32).view(np.int32)
        np.multiply(sec.view(np.int64), NS, out=out[start:stop])
        out[start:stop] += nanos
    return out


def request_fields(
    buf: bytes, batch_key: int, batches_field: int, text_fields: Mapping[int, str]
) -> tuple[list[tuple[int, int]], dict[int, str]]:
    """The top level of a write request: the (start, stop) of every repeated batch message
    (``batches_field``, whose one-byte key is ``batch_key``), and the text of each of
    ``text_fields`` (field number -> name for errors; the last occurrence wins, as in protobuf).
    Other fields are skipped.

    Raises:
        DecodeError: bytes that are not a valid message at this level.
    """
    end = len(buf)
    spans: list[tuple[int, int]] = []
    texts: dict[int, str] = {}
    pos = 0
    while pos < end:
        if buf[pos] == batch_key and pos + 3 < end:
            # A batch (the usual field), its length inline.
            n, s = read_small_varint(buf, pos + 1, end, "request")
            pos = s + n
            if pos > end:
                raise DecodeError(f"request: field of {n} bytes runs past the end of its message")
            spans.append((s, pos))
            continue
        field, wt, pos = read_tag(buf, pos, end, "request")
        if wt != 2 or (field != batches_field and field not in text_fields):
            pos = skip_field(buf, pos, end, field, wt, "request")
            continue
        s, pos = read_length(buf, pos, end, "request")
        if field == batches_field:
            spans.append((s, pos))
        else:
            texts[field] = read_text(buf, s, pos, text_fields[field])
    return spans, texts
