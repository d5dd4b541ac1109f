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
    n = v.shape[0]
    lens = np.ones(n, dtype=np.int64)
    ge_b = np.empty(min(n, _BLOCK), dtype=np.bool_)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        block, out, ge = v[start:stop], lens[start:stop], ge_b[: stop - start]
        for k in range(1, 10):
            np.greater_equal(block, np.uint64(1 << (7 * k)), out=ge)
            # Stops as soon as no value needs another byte: small ints cost one pass.
            if not ge.any():
                break
            out += ge
    return lens


def encode_varints(v: U64) -> tuple[U8, I64]:
    """Canonical varints of ``v`` concatenated, and each value's byte length.

    Per block: a (n, width) byte matrix, one column per 7-bit group up to the widest value, of
    which the leading ``length`` bytes of each row are kept with a boolean mask (row-major, so
    order is kept). Blocks keep the temporaries small, cached and free of page faults.
    """
    lens = varint_lengths(v)
    n = v.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.uint8), lens
    width = int(lens.max())
    if width == 1:
        return v.astype(np.uint8), lens
    out = np.empty(int(lens.sum()), dtype=np.uint8)
    size = min(n, _BLOCK)
    mat_b = np.empty((size, width), dtype=np.uint8)
    tmp_b = np.empty(size, dtype=np.uint64)
    cont_b = np.empty(size, dtype=np.uint8)
    cols = np.arange(width)
    off = 0
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        m = stop - start
        mat, tmp, cont = mat_b[:m], tmp_b[:m], cont_b[:m]
        block, blens = v[start:stop], lens[start:stop]
        for k in range(width):
            np.right_shift(block, np.uint64(7 * k), out=tmp)
            tmp &= _LOW7
            # The continuation bit is set on every byte but a value's last.
            np.greater(blens, k + 1, out=cont.view(np.bool_))
            cont <<= 7
            np.bitwise_or(tmp, cont, out=mat[:, k], casting="unsafe")
        chunk = mat[cols < blens[:, None]]
        out[off : off + chunk.shape[0]] = chunk
        off += chunk.shape[0]
    return out, lens


_BLOCK = 16_384


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
    if value < 0x4000:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Every length below 16 KiB, precomputed: one list lookup per header on the per-batch path.
_SMALL = [bytes([i]) if i < 0x80 else bytes([(i & 0x7F) | 0x80, i >> 7]) for i in range(0x4000)]


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
