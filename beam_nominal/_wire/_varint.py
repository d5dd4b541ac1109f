"""Vectorised protobuf varints: whole columns at once with numpy, no per-value Python work."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

_SEVEN = np.uint64(7)
_LOW7 = np.uint64(0x7F)


def varint_lengths(v: U64) -> I64:
    """Bytes of the canonical varint of each value (1..10)."""
    n = np.ones(v.shape, dtype=np.int64)
    rest = v >> _SEVEN
    # Stops as soon as no value needs another byte: small ints cost one pass.
    while True:
        more = rest != 0
        if not more.any():
            return n
        n += more
        rest = rest >> _SEVEN


def encode_varints(v: U64) -> tuple[U8, I64]:
    """Canonical varints of ``v`` concatenated, and each value's byte length.

    Builds a (n, width) byte matrix, one column per 7-bit group up to the widest value, then keeps
    the leading ``length`` bytes of each row with a boolean mask (row-major, so order is kept).
    """
    lens = varint_lengths(v)
    n = v.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.uint8), lens
    width = int(lens.max())
    if width == 1:
        return v.astype(np.uint8), lens
    mat = np.empty((n, width), dtype=np.uint8)
    last = lens - 1
    for k in range(width):
        group = ((v >> np.uint64(7 * k)) & _LOW7).astype(np.uint8)
        # The continuation bit is set on every byte but a value's last.
        mat[:, k] = group | ((last > k).astype(np.uint8) << 7)
    keep = np.arange(width) < lens[:, None]
    return mat[keep], lens


def padded_varints(v: U64, width: int) -> U8:
    """Each value as a non-minimal varint of exactly ``width`` bytes, as an (n, width) matrix.

    The caller guarantees every value fits in ``7 * width`` bits (or ``width == 10``).
    """
    n = v.shape[0]
    mat = np.empty((n, width), dtype=np.uint8)
    for k in range(width):
        group = ((v >> np.uint64(7 * k)) & _LOW7).astype(np.uint8)
        mat[:, k] = group | 0x80 if k < width - 1 else group
    return mat


def varint_bytes(value: int) -> bytes:
    """The canonical varint of one non-negative int below 2**64 (for headers and lengths)."""
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes([i]) for i in range(0x80)]


def decode_varints(buf: U8, what: str) -> U64:
    """Decode a region that holds only varints (a packed int64/uint64 field) into uint64 values.

    Raises:
        DecodeError: the region ends inside a varint, or a varint is longer than 10 bytes.
    """
    n = buf.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    ends = buf < 0x80
    if not ends[-1]:
        raise DecodeError(f"{what}: truncated varint at the end of the packed field")
    end_idx = np.flatnonzero(ends)
    starts = np.empty_like(end_idx)
    starts[0] = 0
    starts[1:] = end_idx[:-1] + 1
    lens = end_idx - starts + 1
    if lens.max() > 10:
        raise DecodeError(f"{what}: varint longer than 10 bytes")
    if lens.max() == 1:
        return buf.astype(np.uint64)
    # Position of each byte inside its varint; 7 * pos is that byte's shift.
    pos = np.arange(n, dtype=np.int64) - np.repeat(starts, lens)
    parts = (buf & 0x7F).astype(np.uint64) << (pos.astype(np.uint64) * _SEVEN)
    # Groups never overlap, so a sum is an OR; bits past 64 wrap away as protobuf specifies.
    return np.add.reduceat(parts, starts)
