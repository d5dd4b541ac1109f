"""Encode ``WriteColumnBatchesRequest`` wire bytes straight from numpy columns.

No protobuf objects are built per point: every column is turned into bytes with whole-array numpy
operations, and a request is one ``b"".join`` of per-batch pieces. Work that is per point is done
once per request, not once per batch (timestamps, integer varints and strings of all batches are
encoded together and then sliced), so a request of 1,000 small series costs little more than one
long series.

Timestamps use a fixed-width form: each ``google.protobuf.Timestamp`` is
``1a 0c 08 <seconds: 5-byte varint> 10 <nanos: 5-byte varint>`` (14 bytes), with padded
(non-minimal) varints. Every conforming protobuf parser reads padded varints; fixed width lets a
whole column be written with a few vector operations, and lets a decoder read it back the same way.
A series with a timestamp before 1970 gets 10-byte seconds (two's complement, 19 bytes per point).
Both fields are always present, even when zero.

The output is deterministic (the same batches give the same bytes), which the idempotency key
relies on. It is *not* byte-identical to upb's canonical output, only value-identical.

One implementation serves both columnar request forms: a :class:`ColumnLayout` says where a form
puts the dataset, the batches, the timestamps and the value member. :data:`COLUMN_BATCHES` is the
gRPC ``WriteColumnBatchesRequest``; :mod:`write_batches_v2` describes Nominal's HTTP
``direct_channel_writer.v2.WriteBatchesRequest`` with one. :mod:`decode` reads the same layouts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal._wire import runs
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_channel_writer_common_pb2 as common,
)
from beam_nominal._wire._varint import I64, U8, U64, encode_varints, varint_bytes, varint_lengths
from beam_nominal._wire.batch import DoubleBatches, SeriesBatch
from beam_nominal._wire.scratch import thread_scratch
from beam_nominal.model import SeriesKey, ValueType

__all__ = [
    "COLUMN_BATCHES",
    "TIMESTAMP_BYTES",
    "TIMESTAMP_BYTES_NEGATIVE",
    "ColumnLayout",
    "encode_columns",
    "encode_request",
]

#: Wire bytes of one timestamp at or after 1970-01-01 (seconds in [0, 2**35)).
TIMESTAMP_BYTES = 14
#: Wire bytes of one timestamp in a series that has any timestamp before 1970.
TIMESTAMP_BYTES_NEGATIVE = 19

_NS = 1_000_000_000

# Tag bytes: (field number << 3) | wire type; 2 = length-delimited.
_T1 = b"\x0a"
_T2 = b"\x12"


def _key(number: int) -> bytes:
    """The one-byte key of length-delimited field ``number`` (1..15)."""
    if not 1 <= number <= 15:
        raise ValueError(f"field {number}: layout fields must have one-byte keys (1..15)")
    return bytes([number << 3 | 2])


@dataclass(frozen=True, eq=False)
class ColumnLayout:
    """Where one columnar request form puts each part: what the encoder and decoder are given.

    Every form holds a repeated batch message, one per series, whose ``channel`` is field 1 and
    ``tags`` (a string map) field 2 (true of both forms; the bytes of a key are cached across
    forms), a repeated Timestamp (``seconds`` = 1, ``nanos`` = 2, varints) and one value member,
    a message of direct_channel_writer.v2 (``DoublePoints`` ... ``ArrayPoints``). Every field
    named here is length-delimited with a number in 1..15 (a one-byte key).
    """

    name: str
    rid_field: int
    batches_field: int
    #: ``optional string source_name`` of the request; None: the form has none.
    source_field: int | None
    #: Batch field of a message holding the timestamps and the member (v2 ``Points``); None: both
    #: are fields of the batch.
    points_field: int | None
    #: The repeated Timestamp: a field of the points message, else of the batch.
    timestamps_field: int
    #: Batch field of a message holding only the member (gRPC ``ColumnValues``); None: the member
    #: sits beside the timestamps.
    values_field: int | None
    #: Member field of each value type (the two array types share ``ArrayPoints``).
    members: Mapping[ValueType, int]
    #: Members beside the timestamps that the decoder refuses, with the reason (v2 log points).
    refused: Mapping[int, str] = field(default_factory=dict)
    #: Batch string fields read (so checked as UTF-8) and dropped (v2 ``unit``).
    dropped_strings: tuple[int, ...] = ()
    #: nanos is int64 (nominal.types.time.Timestamp) rather than int32 (google.protobuf.Timestamp).
    nanos_int64: bool = False
    #: nanos outside [0, 1e9) make a batch malformed instead of being added to the seconds.
    nanos_checked: bool = False
    #: The reason given for a batch without a value member.
    unset_reason: str = "value type not set"

    # Derived key bytes.
    rid_key: bytes = field(init=False, repr=False)
    batch_key: bytes = field(init=False, repr=False)
    source_key: bytes | None = field(init=False, repr=False)
    points_key: bytes | None = field(init=False, repr=False)
    values_key: bytes | None = field(init=False, repr=False)
    #: The key byte of each timestamp entry.
    timestamp_tag: int = field(init=False, repr=False)
    member_keys: Mapping[ValueType, bytes] = field(init=False, repr=False)
    # Framing depends only on (value type, payload bytes, non-empty); series of equal length repeat it.
    framing_cache: dict[tuple[ValueType, int, bool], bytes] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.points_field is None) == (self.values_field is None):
            raise ValueError(f"{self.name}: exactly one of points_field and values_field")
        if self.refused and self.values_field is not None:
            raise ValueError(f"{self.name}: refused members are read beside the timestamps only")
        if set(self.members) != set(ValueType):
            raise ValueError(f"{self.name}: a member field for every value type")
        derived = {
            "rid_key": _key(self.rid_field),
            "batch_key": _key(self.batches_field),
            "source_key": None if self.source_field is None else _key(self.source_field),
            "points_key": None if self.points_field is None else _key(self.points_field),
            "values_key": None if self.values_field is None else _key(self.values_field),
            "timestamp_tag": _key(self.timestamps_field)[0],
            "member_keys": {vt: _key(number) for vt, number in self.members.items()},
            "framing_cache": {},
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


#: The gRPC ``nominal.channel_writer.v1.WriteColumnBatchesRequest``.
COLUMN_BATCHES = ColumnLayout(
    name="WriteColumnBatchesRequest",
    rid_field=1,
    batches_field=2,
    source_field=3,
    points_field=None,
    timestamps_field=3,
    values_field=4,
    members={
        ValueType.DOUBLE: 1,
        ValueType.STRING: 2,
        ValueType.INT64: 3,
        ValueType.UINT64: 4,
        ValueType.DOUBLE_ARRAY: 5,
        ValueType.STRING_ARRAY: 5,
        ValueType.STRUCT: 6,
    },
)
_STRINGISH = (ValueType.STRING, ValueType.STRUCT)
_INTEGER = (ValueType.INT64, ValueType.UINT64)
_INT64_MAX = np.iinfo(np.int64).max
_F8 = np.dtype("<f8")
_I8 = np.dtype(np.int64)
_STRIDE8 = (8,)


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


def _interleave(hdr: U8, hlens: I64, pay: U8, plens: I64) -> U8:
    """``hdr[0] pay[0] hdr[1] pay[1] ...`` from flattened headers and payloads and their lengths."""
    n = hlens.shape[0]
    total = hdr.shape[0] + pay.shape[0]
    out = np.empty(total, dtype=np.uint8)
    if n == 0:
        return out
    if pay.shape[0] == 0:
        out[:] = hdr
        return out
    item = hlens + plens
    starts = np.cumsum(item) - item
    # +1 where a header starts, -1 where it ends; a header that ends where the next one starts
    # (empty payload) nets to 0, so the running sum is 1 exactly on header bytes.
    mark = np.zeros(total + 1, dtype=np.int8)
    mark[starts] = 1
    mark[starts + hlens] -= 1
    is_hdr = np.cumsum(mark[:-1], dtype=np.int8).view(np.bool_)
    out[is_hdr] = hdr
    out[~is_hdr] = pay
    return out


def _headers(tag: int, lengths: I64) -> tuple[U8, I64]:
    """``tag`` + varint(length) for every length, flattened, and the bytes of each header."""
    n = lengths.shape[0]
    if n and int(lengths.max()) < 0x80:
        out = np.empty((n, 2), dtype=np.uint8)
        out[:, 0] = tag
        out[:, 1] = lengths
        return out.reshape(-1), np.full(n, 2, dtype=np.int64)
    vb, vlens = encode_varints(lengths.view(np.uint64))
    tags = np.full(n, tag, dtype=np.uint8)
    return _interleave(tags, np.ones(n, dtype=np.int64), vb, vlens), vlens + 1


def _segment_sums(sizes: I64, counts: I64) -> I64:
    """Sum of ``sizes`` over consecutive segments of ``counts`` items (empty segments give 0)."""
    cs = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=cs[1:])
    ends = np.cumsum(counts)
    result: I64 = cs[ends] - cs[ends - counts]
    return result


def _utf8(strs: list[Any]) -> tuple[bytes, I64]:
    """All strings as UTF-8, concatenated, and each one's byte length.

    One ``join`` and one ``encode`` for the whole column; only non-ASCII text pays for a
    per-string encode to learn byte lengths.
    """
    text = "".join(strs)
    raw = text.encode("utf-8")
    n = len(strs)
    if len(raw) == len(text):
        return raw, np.fromiter(map(len, strs), dtype=np.int64, count=n)
    return raw, np.fromiter((len(s.encode("utf-8")) for s in strs), dtype=np.int64, count=n)


def _string_entries(strs: list[Any], tag: int = 0x0A) -> tuple[U8, I64]:
    """Repeated string entries (``tag`` len utf-8; field 1 by default) concatenated, and each
    entry's size.

    Fast path: join with a two-NUL separator before every string and encode once. Where no
    string holds a NUL, the NUL pairs are exactly the separators, their positions give every
    string's UTF-8 length, and, for strings shorter than 128 bytes, each pair is overwritten in
    place by the two-byte header (tag, length): no per-string Python work beyond the join.
    Longer strings go through upb's serialiser, which is faster for them, with sizes from the
    lengths.
    """
    n = len(strs)
    blens: I64 | None = None
    if n:
        raw_sep = ("\0\0" + "\0\0".join(strs)).encode("utf-8")
        buf = np.frombuffer(raw_sep, dtype=np.uint8)
        nul = np.flatnonzero(buf == 0)
        if nul.shape[0] == 2 * n:
            starts = nul[0::2]
            blens = np.empty(n, dtype=np.int64)
            blens[:-1] = starts[1:] - starts[:-1] - 2
            blens[-1] = buf.shape[0] - starts[-1] - 2
            if int(blens.max()) < 0x80:
                out = buf.copy()
                out[starts] = tag
                out[starts + 1] = blens
                return out, blens + 2
    if blens is None:
        blens = _utf8(strs)[1]
    points = common.StringPoints()
    points.points.extend(strs)
    body = np.frombuffer(points.SerializeToString(deterministic=True), dtype=np.uint8)
    sizes = blens + 1 + varint_lengths(blens.view(np.uint64))
    if tag != 0x0A:
        body = body.copy()
        body[np.cumsum(sizes) - sizes] = tag
    return body, sizes


def _spread5(x: U64, out: U64, tmp: U64) -> U64:
    """Values below 2**35 as padded 5-byte varints in the low 40 bits of little-endian words.

    Works in two caller-provided buffers: fresh temporaries cost more than the arithmetic here
    (first-touch page faults), so none are made.
    """
    np.bitwise_and(x, np.uint64(0x7F), out=out)
    for k in range(1, 5):
        np.left_shift(x, np.uint64(k), out=tmp)
        tmp &= np.uint64(0x7F << (8 * k))
        out |= tmp
    out |= np.uint64(0x80808080)
    return out


def _timestamps_5(ns: I64, tag: int = 0x1A) -> U8:
    """Fixed-width 14-byte Timestamp entries (field key ``tag``) for ``ns`` whose seconds are all
    in [0, 2**35), concatenated."""
    n = ns.shape[0]
    buf = np.empty(n * TIMESTAMP_BYTES + 2, dtype=np.uint8)
    put_timestamps_5(ns, buf, 0, TIMESTAMP_BYTES, tag)
    return buf[: n * TIMESTAMP_BYTES]


def put_timestamps_5(ns: I64, buf: U8, offset: int, stride: int, tag: int) -> None:
    """Write 14-byte Timestamp entries for ``ns`` into ``buf`` at ``offset + k * stride``.

    Each row is written as two little-endian 64-bit words through unaligned strided views: bytes
    0..7 are ``tag 0c 08`` + seconds, bytes 8..15 are ``10`` + nanos and spill two bytes past the
    entry, which the caller overwrites afterwards (or leaves as spare bytes at the end: ``buf``
    must hold ``offset + (n - 1) * stride + 16`` bytes). Work goes in blocks with small reused
    scratch arrays: request-sized temporaries would cost more in first-touch page faults than
    the arithmetic itself, and blocks stay in cache.
    """
    n = ns.shape[0]
    if n == 0:
        return
    lo = np.ndarray((n,), dtype="<u8", buffer=buf, offset=offset, strides=(stride,))
    hi = np.ndarray((n,), dtype="<u8", buffer=buf, offset=offset + 8, strides=(stride,))
    size = min(n, _BLOCK)
    sec_b = np.empty(size, dtype=np.int64)
    nanos_b = np.empty(size, dtype=np.int64)
    word_b = np.empty(size, dtype=np.uint64)
    tmp_b = np.empty(size, dtype=np.uint64)
    head = np.uint64(0x08_0C_00 | tag)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        m = stop - start
        sec, nanos, word, tmp = sec_b[:m], nanos_b[:m], word_b[:m], tmp_b[:m]
        np.floor_divide(ns[start:stop], _NS, out=sec)
        np.multiply(sec, _NS, out=nanos)
        np.subtract(ns[start:stop], nanos, out=nanos)
        _spread5(nanos.view(np.uint64), word, tmp)
        word <<= np.uint64(8)
        word |= np.uint64(0x10)
        hi[start:stop] = word
        _spread5(sec.view(np.uint64), word, tmp)
        word <<= np.uint64(24)
        word |= head
        lo[start:stop] = word


_BLOCK = 16_384


def _timestamps_10(ns: I64, tag: int = 0x1A) -> U8:
    """Fixed-width 19-byte Timestamp entries with 10-byte (two's complement) seconds."""
    out = np.empty((ns.shape[0], TIMESTAMP_BYTES_NEGATIVE), dtype=np.uint8)
    put_timestamps_10(ns, out, tag)
    return out.reshape(-1)


def put_timestamps_10(ns: I64, out: U8, tag: int) -> None:
    """Write 19-byte Timestamp entries for ``ns`` into the rows of the (n, 19) view ``out``."""
    n = ns.shape[0]
    sec, nanos = np.divmod(ns, _NS)
    out[:, 0] = tag
    out[:, 1] = TIMESTAMP_BYTES_NEGATIVE - 2
    out[:, 2] = 0x08
    s = sec.view(np.uint64)
    for k in range(10):
        group = ((s >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[:, 3 + k] = group | 0x80 if k < 9 else group
    out[:, 13] = 0x10
    spread = _spread5(nanos.view(np.uint64), np.empty(n, np.uint64), np.empty(n, np.uint64))
    out[:, 14:] = spread.astype("<u8").view(np.uint8).reshape(n, 8)[:, :5]


def timestamp_width(ns: I64) -> int:
    """Bytes of each fixed-width Timestamp entry of a column: 19 if any is before 1970, else 14."""
    if ns.shape[0] == 0 or int(ns.min()) >= 0:
        return TIMESTAMP_BYTES
    return TIMESTAMP_BYTES_NEGATIVE


def _encode_timestamps(ns: I64, tag: int = 0x1A) -> U8:
    return _timestamps_5(ns, tag) if timestamp_width(ns) == TIMESTAMP_BYTES else _timestamps_10(ns, tag)


def _len_field(tag: bytes, body_len: int) -> bytes:
    return tag + varint_bytes(body_len)


def _string_field(tag: bytes, text: str) -> bytes:
    # The text itself, as the layouts from columns join it: a str subclass's own encode is not
    # asked (nor, through the key cache, would it be for a key equal to one seen before).
    raw = str.encode(text, "utf-8")
    return tag + varint_bytes(len(raw)) + raw


def _key_bytes(
    batch: SeriesBatch, cache: dict[SeriesKey, bytes] | None = None, encoder: Callable[[SeriesKey], bytes] | None = None
) -> bytes:
    """The encoded key of ``batch`` (``ColumnBatch`` channel and tags unless another ``encoder``
    and its ``cache`` are given), from the cache where possible."""
    if cache is None:
        cache = _KEY_CACHE
    if encoder is None:
        encoder = _encode_key
    key = batch.key
    try:
        return cache[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable stand-in for SeriesKey: encode, do not cache
        return encoder(key)
    encoded = encoder(key)
    if len(cache) >= _KEY_CACHE_SIZE:
        cache.clear()
    cache[key] = encoded
    return encoded


def _checked_key_bytes(
    i: int, batch: SeriesBatch, cache: dict[SeriesKey, bytes] | None = None,
    encoder: Callable[[SeriesKey], bytes] | None = None,
) -> bytes:
    """:func:`_key_bytes`, with a bad key reported as an error naming the batch."""
    try:
        return _key_bytes(batch, cache, encoder)
    except UnicodeEncodeError as exc:
        raise ValueError(f"{_where(i, batch)}: channel or tag is not valid Unicode: {exc.reason}") from None
    except (AttributeError, TypeError, ValueError) as exc:
        raise TypeError(f"{_where(i, batch)}: key must be a SeriesKey of str channel and tags: {exc}") from None


# Series keys repeat from request to request; their bytes are cached (bounded, cleared when full;
# a racing clear from another thread only costs a re-encode).
_KEY_CACHE: dict[SeriesKey, bytes] = {}
_KEY_CACHE_SIZE = 100_000


def _encode_key(key: SeriesKey) -> bytes:
    """Channel (field 1) and tags (field 2 map entries, sorted) of one ColumnBatch."""
    return _string_field(_T1, key.channel) + _encode_tags(key)


def _encode_tags(key: SeriesKey) -> bytes:
    """Tags as field 2 map entries, sorted (``ColumnBatch`` and ``Series`` both use field 2)."""
    parts = []
    # Sorted here too, so bytes stay deterministic even for a key built without SeriesKey.of.
    for k, v in sorted(key.tags):
        entry = _string_field(_T1, k) + _string_field(_T2, v)
        parts.append(_len_field(_T2, len(entry)) + entry)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# Input checks: one clear error naming the batch, before any bytes are built
# ---------------------------------------------------------------------------------------------


def _where(i: int, batch: Any) -> str:
    key: Any = getattr(batch, "key", None)
    name = key.describe() if hasattr(key, "describe") else repr(key)
    return f"batches[{i}] (series {name:.200})"


def _checked_timestamps(i: int, batch: SeriesBatch) -> I64:
    ts = batch.timestamps
    if not isinstance(ts, np.ndarray):
        ts = np.asarray(ts)
    if ts.ndim != 1:
        raise ValueError(f"{_where(i, batch)}: timestamps must be 1-D, got shape {ts.shape}")
    if ts.dtype == np.int64:
        return ts
    if ts.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    if ts.dtype.kind == "i":
        return ts.astype(np.int64)
    if ts.dtype.kind == "u" and int(ts.max()) <= _INT64_MAX:
        return ts.astype(np.int64)
    raise TypeError(f"{_where(i, batch)}: timestamps must be int64 nanoseconds, got dtype {ts.dtype}")


def _checked_numeric(i: int, batch: SeriesBatch, n: int) -> npt.NDArray[Any]:
    vt = ValueType(batch.value_type)
    vals = batch.values
    arr = vals if isinstance(vals, np.ndarray) else np.asarray(vals)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{_where(i, batch)}: {n} timestamps but values of shape {arr.shape}")
    kind = arr.dtype.kind
    if vt is ValueType.DOUBLE:
        if kind not in "fiub":
            raise TypeError(f"{_where(i, batch)}: double values must be numeric, got dtype {arr.dtype}")
        return arr.astype("<f8", copy=False)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    if vt is ValueType.INT64:
        if kind in "ib" or (kind == "u" and int(arr.max()) <= _INT64_MAX):
            return arr.astype(np.int64, copy=False).view(np.uint64)
        raise TypeError(
            f"{_where(i, batch)}: int64 values must be integers within int64, got dtype {arr.dtype}"
        )
    if kind == "u" or (kind in "ib" and int(arr.min()) >= 0):
        return arr.astype(np.uint64, copy=False)
    raise TypeError(f"{_where(i, batch)}: uint64 values must be non-negative integers, got dtype {arr.dtype}")


def _checked_len(i: int, batch: SeriesBatch, n: int) -> None:
    try:
        got = len(batch.values)
    except TypeError:
        raise TypeError(
            f"{_where(i, batch)}: {batch.value_type.value} values must be a sequence, "
            f"got {type(batch.values).__name__}"
        ) from None
    if got != n:
        raise ValueError(f"{_where(i, batch)}: {n} timestamps but {got} values")


def _check_strings(i: int, batch: SeriesBatch, strs: Any, what: str) -> None:
    """Find the first offending string after a bulk encode failed, for a precise message."""
    for j, s in enumerate(strs):
        if not isinstance(s, str):
            raise TypeError(f"{_where(i, batch)}: {what}[{j}] must be str, got {type(s).__name__}")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{_where(i, batch)}: {what}[{j}] is not valid Unicode: {exc.reason}") from None


# ---------------------------------------------------------------------------------------------
# Array columns (encoded one batch at a time: array rows are already wide)
# ---------------------------------------------------------------------------------------------


def _checked_double_rows(i: int, batch: SeriesBatch, n: int) -> tuple[npt.NDArray[Any], I64 | None, int]:
    """A double-array column as (all values as one float64 column, each row's length, width):
    rows of one width give ``(flat, None, width)``, ragged rows ``(flat, counts, -1)``."""
    rows = batch.values
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        if rows.shape[0] != n:
            raise ValueError(f"{_where(i, batch)}: {n} timestamps but {rows.shape[0]} array rows")
        if rows.dtype.kind not in "fiub":
            raise TypeError(f"{_where(i, batch)}: double array rows must hold numbers, got dtype {rows.dtype}")
        return np.ascontiguousarray(rows, dtype="<f8").reshape(-1), None, rows.shape[1]
    _checked_len(i, batch, n)
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    flat = _flat_doubles(i, batch, rows, n)
    if flat.shape[0] != int(counts.sum()):
        raise ValueError(f"{_where(i, batch)}: double array rows must be 1-D")
    if n and int(counts.min()) == int(counts.max()):
        return flat, None, int(counts[0])
    return flat, counts, -1


def _double_array_points(i: int, batch: SeriesBatch, n: int) -> U8:
    flat, counts, width = _checked_double_rows(i, batch, n)
    if counts is None:
        return _uniform_double_rows(flat, n, width)
    nbytes = counts * 8
    # DoubleArrayPoint { packed double value = 2 }: an empty row is an empty message.
    inner_hdr, inner_hlens = _headers(0x12, nbytes)
    nonempty = counts > 0
    if not nonempty.all():
        inner_hdr = inner_hdr[np.repeat(nonempty, inner_hlens)]
        inner_hlens = np.where(nonempty, inner_hlens, 0)
    point_len = inner_hlens + nbytes
    outer_hdr, outer_hlens = _headers(0x0A, point_len)
    hdr = _interleave(outer_hdr, outer_hlens, inner_hdr, inner_hlens)
    return _interleave(hdr, outer_hlens + inner_hlens, flat.view(np.uint8), nbytes)


def _flat_doubles(i: int, batch: SeriesBatch, rows: Any, n: int) -> npt.NDArray[Any]:
    """All rows' values as one float64 column (one C-level concatenate where rows allow)."""
    if n == 0:
        return np.empty(0, dtype="<f8")
    try:
        flat = np.concatenate(rows)
        if flat.ndim == 1 and flat.dtype.kind in "fiub":
            return flat.astype("<f8", copy=False)
    except (TypeError, ValueError):
        pass
    try:
        return np.concatenate([np.asarray(r, dtype="<f8").reshape(-1) for r in rows])
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{_where(i, batch)}: double array rows must hold numbers: {exc}") from None


def _uniform_double_rows(flat: npt.NDArray[Any], n: int, width: int) -> U8:
    """Rows of one width share one header: a 2-D copy, no per-row work."""
    if width == 0:
        return np.tile(np.frombuffer(b"\x0a\x00", dtype=np.uint8), n)
    inner = b"\x12" + varint_bytes(8 * width)
    point = b"\x0a" + varint_bytes(len(inner) + 8 * width) + inner
    h = len(point)
    out = np.empty((n, h + 8 * width), dtype=np.uint8)
    out[:, :h] = np.frombuffer(point, dtype=np.uint8)
    out[:, h:] = flat.view(np.uint8).reshape(n, 8 * width)
    return out.reshape(-1)


def _checked_string_rows(i: int, batch: SeriesBatch, n: int) -> Any:
    """The rows of a string-array column, each checked to be a sequence (its strings are checked
    where they are encoded)."""
    rows = batch.values
    _checked_len(i, batch, n)
    for j, r in enumerate(rows):
        if isinstance(r, (str, bytes)) or not hasattr(r, "__len__"):
            raise TypeError(f"{_where(i, batch)}: values[{j}] must be a list of str, got {type(r).__name__}")
    return rows


def _string_array_points(i: int, batch: SeriesBatch, n: int) -> U8:
    """StringArrayPoints body, built by upb.

    upb's C ``extend`` and serialiser beat a numpy layout here, and its deterministic bytes are
    the same.
    """
    rows = _checked_string_rows(i, batch, n)
    sap = common.StringArrayPoints()
    points = sap.points
    try:
        for r in rows:
            points.add().value.extend(r)
    except (TypeError, ValueError):
        for j, r in enumerate(rows):
            _check_strings(i, batch, r, f"values[{j}]")
        raise
    return np.frombuffer(sap.SerializeToString(deterministic=True), dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------


def _values_body(vt: ValueType, payload_len: int, n: int, layout: ColumnLayout = COLUMN_BATCHES) -> bytes:
    """The framing between the timestamps and a value payload: the member's tag and length
    (wrapped in the ``ColumnValues`` tag and length where the layout has one) and its inner
    headers."""
    if vt is ValueType.DOUBLE or vt in _INTEGER:
        # DoublePoints/IntPoints/Uint64Points { packed field 1 }; an empty packed field is omitted.
        inner = _T1 + varint_bytes(payload_len) if n else b""
    elif vt in _STRINGISH:
        inner = b""
    else:
        # ArrayPoints { double_array_points = 1 | string_array_points = 2 { repeated points = 1 } }
        inner = (_T1 if vt is ValueType.DOUBLE_ARRAY else _T2) + varint_bytes(payload_len)
    member = layout.member_keys[vt] + varint_bytes(len(inner) + payload_len) + inner
    if layout.values_key is None:
        return member
    return layout.values_key + varint_bytes(len(member) + payload_len) + member


def encode_request(dataset_rid: str, batches: Sequence[SeriesBatch], source_name: str | None = None) -> bytes:
    """Serialise a ``WriteColumnBatchesRequest`` carrying ``batches`` for ``dataset_rid``.

    Args:
        dataset_rid: the dataset (``data_source_rid``, field 1); omitted from the bytes when empty,
            as proto3 does.
        batches: one :class:`SeriesBatch` per series; each becomes one ``ColumnBatch`` in order.
        source_name: ``source_name`` (field 3), written only when not None.

    Returns:
        The request's wire bytes; deterministic for equal input.

    Raises:
        ValueError: a batch whose value count differs from its timestamp count, or bad shapes.
        TypeError: values or timestamps of the wrong type for the batch's value type. Both name
            the batch index and its series.
    """
    return encode_columns(COLUMN_BATCHES, dataset_rid, batches, source_name)


def encode_columns(
    layout: ColumnLayout, dataset_rid: str, batches: Sequence[SeriesBatch], source_name: str | None = None
) -> bytes:
    """Serialise ``batches`` for ``dataset_rid`` in the request form ``layout`` describes.

    The rid comes first (omitted when empty, as proto3 does), then one batch message per
    :class:`SeriesBatch` in order, then the source name when given; errors as
    :func:`encode_request`'s.
    """
    if source_name is not None and layout.source_key is None:
        raise ValueError(f"{layout.name} has no source name field")
    tag = layout.timestamp_tag
    if isinstance(batches, DoubleBatches) and batches.points and runs.short(batches.points, len(batches)):
        laid = _double_columns(layout, batches)
        if laid is not None:
            return b"".join(
                [
                    _string_field(layout.rid_key, dataset_rid) if dataset_rid else b"",
                    laid,
                    b"" if source_name is None else _string_field(layout.source_key or b"", source_name),
                ]
            )
    batches = list(batches)
    nb = len(batches)
    vts: list[ValueType] = [ValueType.DOUBLE] * nb
    # Timestamp columns, each once: batches cut from one wide block share one array, which is
    # then encoded once. ts_of[i] indexes batch i's column in uniq.
    uniq: list[Any] = []
    ts_of = [0] * nb
    counts = [0] * nb
    payloads: list[Any] = [None] * nb
    plens = [0] * nb
    ints: list[int] = []
    strs: list[int] = []
    last_ts: Any = None
    n = 0
    # One pass: check shapes and types, and take double columns as they are where possible
    # (a C-contiguous float64 array is its own packed payload).
    for i, b in enumerate(batches):
        vt = b.value_type
        if type(vt) is not ValueType:
            vt = _checked_type(i, b)
        vts[i] = vt
        ts = b.timestamps
        if ts is not last_ts:
            last_ts = ts
            if type(ts) is not np.ndarray or ts.dtype != _I8 or ts.ndim != 1:
                ts = _checked_timestamps(i, b)
            n = ts.shape[0]
            # Equal columns that are not one array (a table's, each cut from several hand-overs)
            # are encoded once too.
            if not uniq or ts.shape != uniq[-1].shape or not np.array_equal(ts, uniq[-1]):
                uniq.append(ts)
        ts_of[i] = len(uniq) - 1
        counts[i] = n
        if vt is ValueType.DOUBLE:
            vals = b.values
            if not (type(vals) is np.ndarray and vals.dtype == _F8 and vals.shape[0] == n
                    and vals.strides == _STRIDE8):
                vals = np.ascontiguousarray(_checked_numeric(i, b, n))
            payloads[i] = vals
            plens[i] = 8 * n
        elif vt is ValueType.INT64 or vt is ValueType.UINT64:
            ints.append(i)
        elif vt is ValueType.STRING or vt is ValueType.STRUCT:
            strs.append(i)
        else:
            arr = _double_array_points(i, b, n) if vt is ValueType.DOUBLE_ARRAY else _string_array_points(i, b, n)
            payloads[i] = arr
            plens[i] = arr.shape[0]

    # Timestamps of all columns in one pass when none is before 1970 (the usual case).
    ts_parts: list[Any] = []
    if nb:
        all_ts = np.concatenate(uniq) if len(uniq) > 1 else uniq[0]
        if all_ts.shape[0] == 0 or int(all_ts.min()) >= 0:
            mv = _timestamps_5(all_ts, tag).data
            off = 0
            for col in uniq:
                end = off + col.shape[0] * TIMESTAMP_BYTES
                ts_parts.append(mv[off:end])
                off = end
        else:
            ts_parts = [_encode_timestamps(col, tag).data for col in uniq]
        ts_parts = [ts_parts[k] for k in ts_of]

    # Integers and strings of all batches are encoded together, then sliced per batch.
    if ints:
        cols = [_checked_numeric(i, batches[i], counts[i]) for i in ints]
        enc, lens = encode_varints(np.concatenate(cols) if len(cols) > 1 else cols[0])
        sizes = _segment_sums(lens, np.array([counts[i] for i in ints], dtype=np.int64))
        _slice_into(payloads, plens, ints, enc, sizes)
    if strs:
        for i in strs:
            _checked_len(i, batches[i], counts[i])
        flat = list(itertools.chain.from_iterable(batches[i].values for i in strs))
        try:
            enc, sizes_per = _string_entries(flat)
        except (TypeError, UnicodeEncodeError):
            for i in strs:
                _check_strings(i, batches[i], batches[i].values, "values")
            raise
        sizes = _segment_sums(sizes_per, np.array([counts[i] for i in strs], dtype=np.int64))
        _slice_into(payloads, plens, strs, enc, sizes)

    parts: list[Any] = []
    if dataset_rid:
        parts.append(_string_field(layout.rid_key, dataset_rid))
    key_cache = _KEY_CACHE
    framing_cache = layout.framing_cache
    batch_key = layout.batch_key
    points_key = layout.points_key
    # Consecutive batches mostly repeat the framing (same type and length): the last one is
    # kept, as hashing a ValueType for the cache is a Python-level call.
    f_vt: Any = None
    f_plen = f_n = -1
    framing = b""
    for i, b in enumerate(batches):
        try:
            head = key_cache.get(b.key)
        except (AttributeError, TypeError):
            head = None
        if head is None:
            head = _checked_key_bytes(i, b)
        vt = vts[i]
        plen = plens[i]
        n = counts[i]
        if vt is not f_vt or plen != f_plen or n != f_n:
            f_vt, f_plen, f_n = vt, plen, n
            fkey = (vt, plen, n > 0)
            cached = framing_cache.get(fkey)
            if cached is None:
                cached = _values_body(vt, plen, n, layout)
                if len(framing_cache) >= _KEY_CACHE_SIZE:
                    framing_cache.clear()
                framing_cache[fkey] = cached
            framing = cached
        ts_part = ts_parts[i]
        columns_len = ts_part.nbytes + len(framing) + plen
        if points_key is None:
            parts += (batch_key + varint_bytes(len(head) + columns_len), head, ts_part, framing, payloads[i])
        else:
            # Timestamps and member inside the points message, after the key fields.
            wrap = points_key + varint_bytes(columns_len)
            body_len = len(head) + len(wrap) + columns_len
            parts += (batch_key + varint_bytes(body_len), head, wrap, ts_part, framing, payloads[i])
    if source_name is not None:
        assert layout.source_key is not None
        parts.append(_string_field(layout.source_key, source_name))
    return b"".join(parts)


def _double_columns(layout: ColumnLayout, batches: DoubleBatches) -> memoryview | None:
    """The batch messages of many double series laid out from their columns
    (``runs.lay_out``), as the series-by-series path writes them. None, having made nothing,
    where a key has tags or a channel that is not ASCII, a column is not an int64 or float64
    array, or a timestamp is before 1970: that path takes those."""
    heads = runs.double_heads(batches, _encode_key)
    if heads is None:
        return None
    ts, vals, counts = batches.timestamps, batches.values, batches.counts
    head_columns, head_lens = heads
    framings, framing_lens, framing_at = runs.by_value(
        counts, lambda n: _values_body(ValueType.DOUBLE, 8 * n, n, layout)
    )
    columns_lens = counts * (TIMESTAMP_BYTES + 8) + framing_lens
    values = np.ascontiguousarray(vals, dtype="<f8")
    # Each batch: its field key and length, channel (and no tags), [points field key and
    # length,] timestamps, values framing, values.
    body_lens = head_lens + columns_lens
    wrap: list[runs.Column] = []
    if layout.points_key is not None:
        wrap_lens, wrap_len_sizes = encode_varints(columns_lens.astype(np.uint64))
        wrap = [(layout.points_key, len(layout.points_key), 0), (wrap_lens, wrap_len_sizes, None)]
        body_lens = body_lens + len(layout.points_key) + wrap_len_sizes
    batch_lens, batch_len_sizes = encode_varints(body_lens.astype(np.uint64))
    return runs.lay_out(
        [
            (layout.batch_key, len(layout.batch_key), 0),
            (batch_lens, batch_len_sizes, None),
            *head_columns,
            *wrap,
            (_timestamps_5(ts, layout.timestamp_tag), counts * TIMESTAMP_BYTES, None),
            (framings, framing_lens, framing_at),
            (values, counts * 8, None),
        ],
        len(counts),
        thread_scratch(),  # joined into the request at once
    )


def _checked_type(i: int, batch: SeriesBatch) -> ValueType:
    try:
        return ValueType(batch.value_type)
    except ValueError:
        raise TypeError(f"{_where(i, batch)}: value_type must be a ValueType, got {batch.value_type!r}") from None


def _slice_into(payloads: list[Any], plens: list[int], idx: list[int], enc: U8, sizes: I64) -> None:
    mv = enc.data
    off = 0
    for i, size in zip(idx, sizes.tolist(), strict=True):
        payloads[i] = mv[off : off + size]
        plens[i] = size
        off += size
