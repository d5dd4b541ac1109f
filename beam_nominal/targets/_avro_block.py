"""Avro binary encoding of ``io.nominal.ingest.AvroStream`` records, a whole request at a time.

The cost of a block is per byte, not per series: timestamps and long values of every record in
a request are zigzag-varint encoded together, in cache-sized blocks with reused scratch arrays
(fresh request-sized temporaries cost more in first-touch page faults than the arithmetic), and
double values are written through strided views. Records are then laid out by copying slices of
those streams and small per-record byte strings into one reused buffer, so a request of 1,000
short series costs little more than one of a single long series. The output is byte for byte
what fastavro's writer produces for the same records (the tests compare).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal._wire import runs
from beam_nominal._wire.batch import DoubleBatches, SeriesBatch
from beam_nominal._wire.scratch import Scratch
from beam_nominal.model import KeyTuple, ValueType

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

_INT64_MAX = 2**63 - 1
_EXACT_DOUBLE = 2**53
_BLOCK = 16_384

# Union branch indexes as their one-byte zigzag longs, in the schema's union order.
B_DOUBLE, B_STRING, B_LONG, B_DOUBLE_ARRAY, B_STRING_ARRAY, B_STRUCT = range(0, 12, 2)


class NotRepresentable(ValueError):
    """A value Avro cannot hold exactly; ``code`` is the TargetError code to report."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class BatchError(Exception):
    """Wraps the error of one batch with its index, for the caller's message."""

    def __init__(self, index: int, batch: SeriesBatch, cause: Exception) -> None:
        super().__init__(str(cause))
        self.index = index
        self.batch = batch
        self.cause = cause


# ---------------------------------------------------------------------------------------------
# Scalars
# ---------------------------------------------------------------------------------------------


def long_bytes(n: int) -> bytes:
    """One Avro long: zigzag, then little-endian base-128 varint."""
    if 0 <= n < len(_SMALL_LONGS):
        return _SMALL_LONGS[n]
    return _long(n)


def _long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Counts and string lengths are mostly small: their encodings are looked up.
_SMALL_LONGS = [_long(i) for i in range(8192)]


def string_bytes(s: str) -> bytes:
    b = s.encode("utf-8")
    return long_bytes(len(b)) + b


# ---------------------------------------------------------------------------------------------
# Varint streams
# ---------------------------------------------------------------------------------------------

# Continuation bits of a value's first eight bytes, by its varint length (index 0 unused).
_CONT = np.array(
    [0] + [sum(0x80 << (8 * k) for k in range(min(n - 1, 8))) for n in range(1, 11)], dtype=np.uint64
)


def _varint_len(z: int) -> int:
    return max(1, (z.bit_length() + 6) // 7)


def _zigzag(x: I64, out: U64, tmp: U64) -> U64:
    # int64 shifts wrap exactly as Avro's zigzag expects.
    np.left_shift(x, 1, out=out.view(np.int64))
    np.right_shift(x, 63, out=tmp.view(np.int64))
    out ^= tmp
    return out


def _spread56(z: U64, out: U64, tmp: U64) -> U64:
    """The low 56 bits of ``z`` as eight 7-bit groups, one per byte (a vectorised pdep)."""
    np.bitwise_and(z, np.uint64((1 << 28) - 1), out=out)
    np.left_shift(z, np.uint64(4), out=tmp)
    tmp &= np.uint64(((1 << 28) - 1) << 32)
    out |= tmp
    np.left_shift(out, np.uint64(2), out=tmp)
    tmp &= np.uint64(0x3FFF0000_3FFF0000)
    out &= np.uint64(0x00003FFF_00003FFF)
    out |= tmp
    np.left_shift(out, np.uint64(1), out=tmp)
    tmp &= np.uint64(0x7F007F00_7F007F00)
    out &= np.uint64(0x007F007F_007F007F)
    out |= tmp
    return out


def _zigzag_bounds(x: I64) -> tuple[int, int] | None:
    """Smallest and largest zigzag value of ``x``, or None when signs are mixed (unknown min)."""
    lo, hi = int(x.min()), int(x.max())
    if lo >= 0:
        return 2 * lo, 2 * hi
    if hi < 0:
        return -2 * hi - 1, -2 * lo - 1
    return None


def long_varints(x: I64, prefix: int | None = None, scratch: Scratch | None = None) -> tuple[U8, I64 | int]:
    """Avro longs of ``x`` concatenated, each optionally preceded by one ``prefix`` byte.

    Returns the bytes and either the common size of every item (prefix included), when all
    values have varint encodings of one length (timestamps nearly always: nine bytes from 1972
    to 2116), or each item's size. The low eight bytes of each varint are one "spread" 64-bit
    word (7-bit groups, continuation bits from a table by length).
    """
    n = x.shape[0]
    lead = 0 if prefix is None else 1
    if n == 0:
        return np.empty(0, dtype=np.uint8), lead
    bounds = _zigzag_bounds(x)
    if bounds is not None and _varint_len(bounds[0]) == _varint_len(bounds[1]) >= 8:
        return _fixed_rows(x, lead, prefix, _varint_len(bounds[1]), scratch), lead + _varint_len(bounds[1])
    hi_z = max(2 * int(x.max()), -2 * int(x.min()) - 1)
    return _packed_rows(x, lead, prefix, _varint_len(hi_z), scratch)


def _fixed_rows(x: I64, lead: int, prefix: int | None, width: int, scratch: Scratch | None) -> U8:
    """Items all ``lead + width`` bytes, ``width >= 8``: rows are written straight into the output.

    Each row's first eight varint bytes go in as one word through an unaligned strided view.
    """
    n = x.shape[0]
    row = lead + width
    out = np.empty(n * row, dtype=np.uint8) if scratch is None else scratch.get(f"long{lead}", n * row)
    size = min(n, _BLOCK)
    z_b = np.empty(size, dtype=np.uint64)
    w_b = np.empty(size, dtype=np.uint64)
    t_b = np.empty(size, dtype=np.uint64)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        m = stop - start
        mat = out[start * row : stop * row].reshape(m, row)
        z, w, t = z_b[:m], w_b[:m], t_b[:m]
        _zigzag(x[start:stop], z, t)
        _spread56(z, w, t)
        w |= _CONT[width]
        if prefix is not None:
            mat[:, 0] = prefix
        np.ndarray((m,), dtype="<u8", buffer=out, offset=start * row + lead, strides=(row,))[:] = w
        if width >= 9:
            np.right_shift(z, np.uint64(56), out=t)
            if width == 10:
                t |= np.uint64(0x80)
                mat[:, lead + 9] = 1  # bit 63 of a 10-byte zigzag value is always set
            mat[:, lead + 8] = t
    return out


# Masks of an item's first ``length`` bytes as little-endian integers, by length (0..11).
_MASKS = {
    p: np.array([sum(1 << (8 * k) for k in range(min(n, p))) for n in range(12)], dtype=f"<u{p}") for p in (2, 4, 8)
}
# Continuation bits by item size (prefix byte included), for items with and without a prefix.
_CONT_BY_SIZE = {lead: np.concatenate([np.zeros(lead, dtype=np.uint64), _CONT])[:12] for lead in (0, 1)}
_MASK_HI = np.array([sum(1 << (8 * k) for k in range(max(n - 8, 0))) for n in range(12)], dtype="<u8")


def _packed_rows(x: I64, lead: int, prefix: int | None, width: int, scratch: Scratch | None) -> tuple[U8, I64]:
    """Items of mixed lengths: rows padded to a power of two, compacted with a byte mask.

    Power-of-two rows let each row be written, and its mask be looked up, as one integer, where
    a (count, width) boolean broadcast would cost five times more than the compaction itself.
    """
    n = x.shape[0]
    row = lead + width
    pad = 2 if row <= 2 else 4 if row <= 4 else 8 if row <= 8 else 16
    out = np.empty(n * row, dtype=np.uint8) if scratch is None else scratch.get(f"long{lead}", n * row)
    size = min(n, _BLOCK)
    z_b = np.empty(size, dtype=np.uint64)
    w_b = np.empty(size, dtype=np.uint64)
    t_b = np.empty(size, dtype=np.uint64)
    mat_b = np.zeros(size * pad, dtype=np.uint8)
    mask_b = np.empty(size * pad, dtype=np.uint8)
    ge_b = np.empty(size, dtype=np.bool_)
    sizes = np.empty(n, dtype=np.int64)
    cont = _CONT_BY_SIZE[lead]
    off = 0
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        m = stop - start
        mat, flat_mask, ge = mat_b[: m * pad], mask_b[: m * pad], ge_b[:m]
        z, w, t = z_b[:m], w_b[:m], t_b[:m]
        lens = sizes[start:stop]
        _zigzag(x[start:stop], z, t)
        _spread56(z, w, t)
        # Item sizes (prefix included), counting the 7-bit thresholds up to the known width.
        lens.fill(1 + lead)
        for k in range(1, width):
            np.greater_equal(z, np.uint64(1 << (7 * k)), out=ge)
            lens += ge
        np.take(cont, lens, out=t)
        w |= t
        if pad <= 8:
            if prefix is not None:
                w <<= np.uint64(8)
                w |= np.uint64(prefix)
            # Assigning to the narrower little-endian view keeps each word's low bytes.
            mat.view(f"<u{pad}")[:] = w
            np.take(_MASKS[pad], lens, out=flat_mask.view(f"<u{pad}"))
        else:
            rows = mat.reshape(m, pad)
            if prefix is not None:
                rows[:, 0] = prefix
            np.ndarray((m,), dtype="<u8", buffer=mat_b, offset=lead, strides=(pad,))[:] = w
            np.right_shift(z, np.uint64(56), out=t)
            t &= np.uint64(0x7F)
            t |= (lens > lead + 9).astype(np.uint64) << np.uint64(7)
            rows[:, lead + 8] = t
            if width == 10:
                rows[:, lead + 9] = z >> np.uint64(63)
            halves = flat_mask.view("<u8").reshape(m, 2)
            halves[:, 0] = _MASKS[8][lens]
            halves[:, 1] = _MASK_HI[lens]
        chunk = mat[flat_mask.view(np.bool_)]
        out[off : off + chunk.shape[0]] = chunk
        off += chunk.shape[0]
    return out[:off], sizes


def double_items(values: npt.NDArray[Any], prefix: int | None, scratch: Scratch | None = None) -> U8:
    """Avro doubles (little-endian IEEE 754), each optionally preceded by one ``prefix`` byte."""
    n = values.shape[0]
    if prefix is None:
        return np.ascontiguousarray(values, dtype="<f8").view(np.uint8)
    out = np.empty(n * 9, dtype=np.uint8) if scratch is None else scratch.get("doubles", n * 9)
    out[0::9] = prefix
    np.ndarray((n,), dtype="<f8", buffer=out, offset=1, strides=(9,))[:] = values
    return out


# ---------------------------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------------------------


def _utf8_small(strs: Sequence[Any], branch: int) -> bytes | None:
    """``branch, len, utf-8`` items for strings all shorter than 64 bytes and free of NUL, or None.

    One join with a two-NUL separator before each string and one encode: the NUL pairs are then
    exactly the separators, their positions give every UTF-8 length, and each pair is overwritten
    in place by the two-byte item header (a zigzag length below 64 is one byte).
    """
    n = len(strs)
    raw = ("\0\0" + "\0\0".join(strs)).encode("utf-8")
    buf = np.frombuffer(raw, dtype=np.uint8)
    nul = np.flatnonzero(buf == 0)
    # UTF-8 has a zero byte only for U+0000: any NUL inside a string adds to the count.
    if nul.shape[0] != 2 * n:
        return None
    starts = nul[0::2]
    blens = np.empty(n, dtype=np.int64)
    blens[:-1] = starts[1:] - starts[:-1] - 2
    blens[-1] = buf.shape[0] - starts[-1] - 2
    if int(blens.max()) >= 64:
        return None
    out = buf.copy()
    out[starts] = branch
    out[starts + 1] = blens << 1
    return out.tobytes()


def string_items(strs: Sequence[Any], branch: int | None) -> bytes:
    """Avro strings, each optionally preceded by one ``branch`` byte."""
    if not strs:
        return b""
    if branch is not None:
        fast = _utf8_small(strs, branch)
        if fast is not None:
            return fast
        head = bytes([branch])
        return b"".join([head + string_bytes(s) for s in strs])
    return b"".join([string_bytes(s) for s in strs])


def _array_block(n: int, items: bytes) -> bytes:
    return long_bytes(n) + items + b"\x00" if n else b"\x00"


def _values_bytes(vt: ValueType, vals: Any) -> bytes:
    """The items of a values array of strings, structs or arrays (the per-item types)."""
    if vt is ValueType.STRING:
        return string_items(vals, B_STRING)
    if vt is ValueType.STRUCT:
        return string_items(vals, B_STRUCT)
    if vt is ValueType.DOUBLE_ARRAY:
        return _double_arrays(vals)
    if vt is ValueType.STRING_ARRAY:
        return _string_arrays(vals)
    raise ValueError(f"value type {vt!r} has no Avro form")


def _double_arrays(rows: Sequence[Any]) -> bytes:
    """``DoubleArray`` items; rows of one common width are one (rows, item bytes) matrix."""
    n = len(rows)
    # A spilled tail of same-width rows arrives as one matrix: no per-row objects at all.
    widths = {rows.shape[1]} if isinstance(rows, np.ndarray) and rows.ndim == 2 else {len(a) for a in rows}
    if len(widths) == 1 and (width := widths.pop()) > 0:
        mat = np.asarray(rows, dtype="<f8")
        if mat.shape != (n, width):
            raise ValueError(f"double array rows of shape {mat.shape}")
        lead = np.frombuffer(bytes([B_DOUBLE_ARRAY]) + long_bytes(width), dtype=np.uint8)
        h = lead.shape[0]
        out = np.empty((n, h + 8 * width + 1), dtype=np.uint8)
        out[:, :h] = lead
        out[:, h:-1] = mat.view(np.uint8).reshape(n, 8 * width)
        out[:, -1] = 0
        return out.tobytes()
    head = bytes([B_DOUBLE_ARRAY])
    return b"".join(
        [head + _array_block(len(a), double_items(np.asarray(a, dtype=np.float64), None).tobytes()) for a in rows]
    )


def _string_arrays(rows: Sequence[Any]) -> bytes:
    """``StringArray`` items: every string of every row encoded at once, rows framed by a join.

    With one NUL before each string, a NUL-free text of strings all under 64 UTF-8 bytes has
    exactly one NUL per string, which becomes that string's one-byte length in place.
    """
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = list(itertools.chain.from_iterable(rows))
    m = len(flat)
    if m == 0:
        return bytes([B_STRING_ARRAY, 0]) * len(rows)
    buf = np.frombuffer(("\0" + "\0".join(flat)).encode("utf-8"), dtype=np.uint8)
    nul = np.flatnonzero(buf == 0)
    if nul.shape[0] != m:
        return _string_arrays_slow(rows)
    blens = np.empty(m, dtype=np.int64)
    blens[:-1] = nul[1:] - nul[:-1] - 1
    blens[-1] = buf.shape[0] - nul[-1] - 1
    if int(blens.max()) >= 64:
        return _string_arrays_slow(rows)
    items = buf.copy()
    items[nul] = blens << 1
    # Byte offset where each row's strings end in ``items``.
    ends = np.cumsum(blens + 1)
    stops = np.cumsum(counts)
    row_ends = np.where(stops > 0, ends[np.maximum(stops - 1, 0)], 0).tolist()
    mv = items.data
    pieces: list[Any] = []
    at = 0
    branch = bytes([B_STRING_ARRAY])
    for count, end in zip(counts.tolist(), row_ends, strict=True):
        if count:
            pieces.append(branch + long_bytes(count))
            pieces.append(mv[at:end])
            pieces.append(b"\x00")
            at = end
        else:
            pieces.append(branch + b"\x00")
    return b"".join(pieces)


def _string_arrays_slow(rows: Sequence[Any]) -> bytes:
    head = bytes([B_STRING_ARRAY])
    return b"".join([head + _array_block(len(a), string_items(a, None)) for a in rows])


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------

_KEY_CACHE: dict[KeyTuple, tuple[bytes, bytes]] = {}
_KEY_CACHE_SIZE = 100_000


def _key_parts(key: KeyTuple) -> tuple[bytes, bytes]:
    """The record's ``channel`` bytes and its ``tags`` map bytes (the record's last field)."""
    parts = _KEY_CACHE.get(key)
    if parts is None:
        channel, pairs = key
        tags = (
            long_bytes(len(pairs)) + b"".join(string_bytes(k) + string_bytes(v) for k, v in pairs) + b"\x00"
            if pairs
            else b"\x00"
        )
        parts = (string_bytes(channel), tags)
        if len(_KEY_CACHE) >= _KEY_CACHE_SIZE:
            _KEY_CACHE.clear()
        _KEY_CACHE[key] = parts
    return parts


_I8 = np.dtype(np.int64)
_F8 = np.dtype("<f8")


def _integer_column(batch: SeriesBatch, integers: str) -> npt.NDArray[Any]:
    """int64 values to write as long, or float64 values when ``integers == "double"``."""
    col = np.asarray(batch.values)
    if batch.value_type is ValueType.UINT64 or col.dtype.kind == "u":
        col = col.astype(np.uint64, copy=False)
        if col.size and int(col.max()) > _INT64_MAX:
            bad = int(col[int(np.argmax(col > np.uint64(_INT64_MAX)))])
            raise NotRepresentable(
                f"uint64 value {bad} is above 2**63 - 1 and cannot be an Avro long; it is not "
                "written as a double because that would round it",
                "uint64_out_of_range",
            )
    if col.dtype.kind not in "iubO":
        raise TypeError(f"integer values must be an integer array, got dtype {col.dtype}")
    col = col.astype(np.int64, copy=False)
    if integers == "double":
        if col.size and (int(col.max()) > _EXACT_DOUBLE or int(col.min()) < -_EXACT_DOUBLE):
            inexact = (col > _EXACT_DOUBLE) | (col < -_EXACT_DOUBLE)
            bad = int(col[int(np.argmax(inexact))])
            raise NotRepresentable(
                f"integer {bad} is beyond 2**53 and would be rounded as a double "
                "(integers='double'); use integers='long' to keep it exact",
                "integer_not_exact",
            )
        return col.astype(np.float64)
    return col


def _column(values: Any, n: int, dtype: str) -> npt.NDArray[Any]:
    col = np.asarray(values)
    if col.ndim != 1 or col.shape[0] != n:
        raise ValueError(f"{n} timestamps but values of shape {col.shape}")
    return np.ascontiguousarray(col, dtype=dtype)


def encode_records(
    batches: Iterable[SeriesBatch], integers: str, scratch: Scratch | None = None
) -> tuple[memoryview, int, int]:
    """The data of one block: a record per non-empty batch, concatenated.

    Returns:
        The bytes (in ``scratch`` when given: valid until its next use), the number of records
        and the number of points.

    Raises:
        BatchError: wrapping NotRepresentable (a value Avro cannot hold), ValueError, TypeError
            or UnicodeEncodeError (a malformed batch), with the batch's index.
    """
    if (
        isinstance(batches, DoubleBatches) and batches.points and runs.pays(batches.points, len(batches))
        and runs.plain(batches.timestamps, batches.values) and batches.counts.all()
    ):
        # The layout writes a record for every key, from int64 and float64 columns: an empty
        # series (no record) or other columns are the record-by-record path's to write or refuse.
        done = _double_layout(batches.keys, batches.counts, batches.timestamps, batches.values, scratch)
        if done is not None:
            return done
    if not isinstance(batches, list):
        batches = list(batches)
    if len(batches) >= _MANY_RECORDS:
        done = _double_records(batches, scratch)
        if done is not None:
            return done
    keys: list[tuple[bytes, bytes]] = []
    counts: list[int] = []
    # Timestamp columns, each once: batches cut from one wide block share one array, which is
    # then encoded once. ts_of[r] indexes record r's column in stamps.
    stamps: list[I64] = []
    ts_of: list[int] = []
    last_ts: Any = None
    # Per record: a float64 column, an int64 column, or the finished items.
    values: list[Any] = []
    kinds: list[int] = []  # 0 double, 1 long, 2 bytes
    points = 0
    for i, b in enumerate(batches):
        ts = b.timestamps
        try:
            if ts is not last_ts:
                last_ts = ts
                n = len(ts)
                if n == 0:
                    continue
                if type(ts) is not np.ndarray or ts.dtype != _I8 or ts.ndim != 1:
                    ts = np.ascontiguousarray(ts, dtype=np.int64)
                    if ts.ndim != 1:
                        raise ValueError(f"timestamps of shape {ts.shape}")
                # Equal columns of timestamps that are not one array (a table's columns, each
                # cut from several hand-overs) are encoded once too.
                if not stamps or ts.shape != stamps[-1].shape or not np.array_equal(ts, stamps[-1]):
                    stamps.append(ts)
            elif n == 0:
                continue
            vt = b.value_type
            v = b.values
            # Columns already in the contract's form (the stream's always are) skip every check.
            # (Compared by identity: hashing a ValueType is a Python-level call.)
            if vt is ValueType.DOUBLE:
                native: Any = _F8
            elif vt is ValueType.INT64 and integers == "long":
                native = _I8
            else:
                native = None
            if native is not None and type(v) is np.ndarray and v.dtype == native and v.shape == (n,):
                values.append(v)
                kinds.append(0 if native is _F8 else 1)
            elif vt is ValueType.DOUBLE:
                values.append(_column(v, n, "<f8"))
                kinds.append(0)
            elif vt is ValueType.INT64 or vt is ValueType.UINT64:
                col = _integer_column(b, integers)
                if col.ndim != 1 or col.shape[0] != n:
                    raise ValueError(f"{n} timestamps but values of shape {col.shape}")
                values.append(col)
                kinds.append(0 if col.dtype.kind == "f" else 1)
            else:
                if len(b.values) != n:
                    raise ValueError(f"{n} timestamps but {len(b.values)} values")
                values.append(_values_bytes(vt, b.values))
                kinds.append(2)
            key = b.key
            parts = _KEY_CACHE.get(key)
            keys.append(parts if parts is not None else _key_parts(key))
        except (ValueError, TypeError, AttributeError, UnicodeEncodeError) as exc:
            raise BatchError(i, b, exc) from None
        ts_of.append(len(stamps) - 1)
        counts.append(n)
        points += n
    if not counts:
        return memoryview(b""), 0, 0

    ts_all = _concat(stamps, np.int64, scratch, "stamps")
    ts_bytes, ts_sizes = long_varints(ts_all, None, scratch)
    ts_mv = ts_bytes.data
    ts_pieces = []
    at = 0
    for end in _ends([s.shape[0] for s in stamps], ts_sizes):
        ts_pieces.append(ts_mv[at:end])
        at = end

    dbl = [v for v, k in zip(values, kinds, strict=True) if k == 0]
    dbl_bytes = (
        double_items(_concat(dbl, np.float64, scratch, "f8"), B_DOUBLE, scratch)
        if dbl
        else np.empty(0, np.uint8)
    )
    lng = [v for v, k in zip(values, kinds, strict=True) if k == 1]
    lng_bytes, lng_sizes = (
        long_varints(_concat(lng, np.int64, scratch, "i8"), B_LONG, scratch) if lng else (None, 0)
    )
    lng_ends = _ends([len(v) for v in lng], lng_sizes) if lng else []

    dbl_mv = dbl_bytes.data
    lng_mv = lng_bytes.data if lng_bytes is not None else dbl_mv
    pieces: list[Any] = []
    small = b""
    dbl_at = lng_at = 0
    li = 0
    last_n = -1
    count = values_head = b""
    for (channel, tags), n, kind, vals, t in zip(keys, counts, kinds, values, ts_of, strict=True):
        if n != last_n:  # records cut from one wide block repeat their count
            last_n = n
            count = long_bytes(n)
            values_head = b"\x00" + count
        pieces += (small + channel + count, ts_pieces[t], values_head)
        if kind == 0:
            end = dbl_at + 9 * n
            pieces.append(dbl_mv[dbl_at:end])
            dbl_at = end
        elif kind == 1:
            end = lng_ends[li]
            li += 1
            pieces.append(lng_mv[lng_at:end])
            lng_at = end
        else:
            pieces.append(vals)
        small = b"\x00" + tags
    pieces.append(small)
    total = sum(map(len, pieces))
    if total < _JOIN_BELOW * len(pieces):
        # Short pieces (records of a few points): one C-level join beats a Python-level copy per
        # piece, even with the page faults of a fresh buffer; longer ones are cheaper copied.
        return memoryview(b"".join(pieces)), len(counts), points
    out = (np.empty(total, dtype=np.uint8) if scratch is None else scratch.get("block", total)).data
    at = 0
    for p in pieces:
        end = at + len(p)
        out[at:end] = p
        at = end
    return out, len(counts), points


#: Mean piece size (bytes) below which a block is assembled with ``bytes.join`` rather than in
#: the scratch buffer (wide records: ~120; 100-point series: ~600).
_JOIN_BELOW = 256


#: Records in a block from which one of double series is laid out by :func:`_double_records`,
#: and the most points a record may hold on average there (the gather copies byte by byte,
#: where the general path copies a record's timestamps and values as whole slices).
_MANY_RECORDS = 64
_DOUBLE = ValueType.DOUBLE
_VALUE_TYPE, _TIMESTAMPS, _VALUES, _KEY = (attrgetter(f) for f in ("value_type", "timestamps", "values", "key"))
_NAME, _TAGS = itemgetter(0), itemgetter(1)


def _double_records(batches: list[SeriesBatch], scratch: Scratch | None = None) -> tuple[memoryview, int, int] | None:
    """:func:`encode_records` of many batches of double series each with timestamps of its own
    (the packer's cut of single points over many series), a few points each, laid out with no Python work per
    record but reading its batch: every part of every record (name, counts, timestamps, values,
    tags) is a run of one of a few byte streams each encoded whole, and one gather copies the
    runs into place. None, having written nothing, where a batch is anything else (another type,
    values not one float per timestamp, timestamps shared between batches, tags that are not
    text): the general path then encodes it or names the batch at fault."""
    # Every pass over the batches is a map in C (attrgetter, len): no Python code a record.
    if set(map(id, map(_VALUE_TYPE, batches))) != {id(_DOUBLE)}:
        return None  # (by identity, as everywhere: a str equal to a member is not one)
    stamps = list(map(_TIMESTAMPS, batches))
    try:
        if sum(map(len, stamps)) > runs.FEW_POINTS * len(stamps):
            return None  # long records: the general path copies each as a few slices
    except TypeError:
        return None
    if len(set(map(id, stamps))) != len(stamps):
        return None  # wide records' shared timestamps: the general path encodes each once
    try:
        columns = list(map(_VALUES, batches))
        ts = np.concatenate(stamps).astype(np.int64, casting="safe", copy=False)
        vals = np.concatenate(columns).astype("<f8", casting="same_kind", copy=False)
        counts = np.fromiter(map(len, stamps), np.int64, len(stamps))
        if ts.ndim != 1 or vals.shape != ts.shape or not counts.all():
            return None
        if not np.array_equal(np.fromiter(map(len, columns), np.int64, len(columns)), counts):
            return None
        keys = list(map(_KEY, batches))
    except (TypeError, ValueError, AttributeError):
        return None
    return _double_layout(keys, counts, ts, vals, scratch)


def _double_layout(
    keys: list[KeyTuple], counts: I64, ts: I64, vals: Any, scratch: Scratch | None = None
) -> tuple[memoryview, int, int] | None:
    """The records of double series laid out from columns (:func:`_double_records`): each
    series' key and point count, and every series' timestamps and values back to back. None,
    having written nothing, for a name that is not ASCII or tags that are not text."""
    try:
        names = list(map(_NAME, keys))
        joined = "".join(names)
        if not joined.isascii():
            return None
        name_bytes = np.frombuffer(joined.encode(), np.uint8)
        # str.__len__, not len: the lengths of the text joined above, whatever a str subclass's
        # __len__ says (its name is written as its text, as the record-by-record path writes it).
        name_lens = np.fromiter(map(str.__len__, names), np.int64, len(names))
        if any(map(_TAGS, keys)):
            tags = b"".join([b"\x00\x00" if not k[1] else b"\x00" + _key_parts(k)[1] for k in keys])
        else:
            tags = b"\x00\x00" * len(keys)
    except (TypeError, ValueError, AttributeError, IndexError, UnicodeEncodeError):
        return None
    tag_lens = (
        np.full(len(keys), 2, np.int64)
        if len(tags) == 2 * len(keys)
        else np.fromiter((1 + len(_key_parts(k)[1]) if k[1] else 2 for k in keys), np.int64, len(keys))
    )
    len_bytes, len_sizes = long_varints(name_lens)
    cnt_bytes, cnt_sizes = long_varints(counts)
    ts_bytes, ts_sizes = long_varints(ts, scratch=scratch)
    ts_lens = counts * ts_sizes if isinstance(ts_sizes, int) else np.add.reduceat(ts_sizes, np.cumsum(counts) - counts)
    val_bytes = double_items(vals, B_DOUBLE, scratch)
    n = len(keys)
    # Each record: name length, name, count, timestamps, 0 (end of the timestamps array),
    # count, values, 0 (end of the values array), tags map (0 for an empty one).
    laid = runs.lay_out(
        [
            (len_bytes, len_sizes, None),
            (name_bytes, name_lens, None),
            (cnt_bytes, cnt_sizes, None),
            (ts_bytes, ts_lens, None),
            (b"\x00", 1, 0),
            (cnt_bytes, cnt_sizes, None),
            (val_bytes, counts * 9, None),
            (tags, tag_lens, None),
        ],
        n,
        scratch,
    )
    return laid, n, int(counts.sum())


def _concat(arrays: list[Any], dtype: type, scratch: Scratch | None, name: str) -> npt.NDArray[Any]:
    if len(arrays) == 1:
        return arrays[0]  # type: ignore[no-any-return]
    total = sum(a.shape[0] for a in arrays)
    if scratch is None:
        return np.concatenate(arrays)
    out: npt.NDArray[Any] = scratch.get(name, total * 8).view(dtype)
    np.concatenate(arrays, out=out)
    return out


def _ends(counts: list[int], sizes: I64 | int) -> list[int]:
    """Byte offsets where each record's items end in a stream of items of ``sizes``."""
    count_arr = np.array(counts, dtype=np.int64)
    item_ends = np.cumsum(count_arr)
    if isinstance(sizes, int):
        return (item_ends * sizes).tolist()  # type: ignore[no-any-return]
    # Counts are positive (empty batches have no record), so every segment is non-empty.
    starts = item_ends - count_arr
    return np.cumsum(np.add.reduceat(sizes, starts)).tolist()  # type: ignore[no-any-return]
