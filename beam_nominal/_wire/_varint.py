"""Vectorised protobuf varints: whole columns at once with numpy, no per-value Python work."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

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

    Each value's bytes are gathered by position (value start + k for its k-th byte), in blocks,
    so the work is a few passes per byte of the widest value, not per byte of the region.

    Raises:
        DecodeError: the region ends inside a varint, or a varint is longer than 10 bytes.
    """
    n = buf.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    if buf[-1] >= 0x80:
        raise DecodeError(f"{what}: truncated varint at the end of the packed field")
    end_idx = np.flatnonzero(buf < 0x80)
    count = end_idx.shape[0]
    if count == n:
        return buf.astype(np.uint64)
    out = np.empty(count, dtype=np.uint64)
    for first in range(0, count, _BLOCK):
        last = min(first + _BLOCK, count)
        ends = end_idx[first:last]
        starts = np.empty_like(ends)
        starts[0] = end_idx[first - 1] + 1 if first else 0
        starts[1:] = ends[:-1] + 1
        lens = ends - starts + 1
        width = int(lens.max())
        if width > 10:
            raise DecodeError(f"{what}: varint longer than 10 bytes")
        acc = out[first:last]
        acc[:] = buf[starts] & 0x7F
        for k in range(1, width):
            # Bytes past a value's end belong to the next value: mask them out.
            idx = np.minimum(starts + k, ends)
            part = (buf[idx] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            part[lens <= k] = 0
            acc |= part
    return out
