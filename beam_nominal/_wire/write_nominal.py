"""Nominal's row-oriented HTTP write body, ``WriteRequestNominal``, straight from numpy columns and back.

Nominal's clients POST ``io.nominal.scout.api.proto.WriteRequestNominal`` to
``{base}/storage/writer/v1/nominal/{dataset_rid}``: one ``Series`` (channel, tags, points) per
series, and unlike the column form of :mod:`encode` every point is its own submessage
``XPoint { Timestamp timestamp = 1; value = 2; }``.

Encoder: every point has a size known from counts, so a column becomes a (points, stride) byte
matrix written with whole-column numpy operations. A point is ``0a L`` + the Timestamp in the
fixed 14-byte form of :mod:`encode` (field key ``0a``; 19 bytes with 10-byte seconds for a series
with a pre-1970 point) + the value: ``11`` + 8 bytes for a double, ``10`` + a varint padded to the
widest value of its series for int64/uint64, ``12`` len bytes for text, ``12`` len packed doubles
for a double array (present even when empty), ``12`` len bytes per string for a string array.
Deterministic; value-identical to upb's output, not byte-identical.

Decoder: reads any valid encoding. Each ``Series`` is walked in Python (fields in any order,
unknown fields skipped; its key cached by the bytes of its channel and tags fields); the points of
all series of one type are then decoded together, as one region of their joined bytes (each
series' share checked to start on a point), with numpy:

* in our layout (constant stride: every row's fixed bytes verified, values read through strided
  views): doubles, int64/uint64, double-array rows of one width;
* as prost and upb write them (minimal varints, zero fields omitted) for doubles, integers below
  2**49, and strings, structs and double arrays with points under 16384 bytes (lengths of one
  or two varint bytes: rows of up to 2,000 doubles): point starts are found among likely offsets
  and the chain of lengths is verified exactly (:func:`_point_chain`), then every point's fields
  are checked to fill it exactly and read, a varint from one 8-byte word, text and packed
  doubles cut out with one mask;
* string arrays with strings and points under 16384 bytes (:func:`_string_array_rows`): the
  bytes after every timestamp cut out, their entries chained as points are.

Anything else (pre-1970 seconds in minimal varints, repeated or reordered fields, longer points)
is parsed by upb for that one ``Series`` (:mod:`reference_row`), so every valid
body decodes to the same values, and broken bytes raise ``DecodeError`` as upb does.
"""

from __future__ import annotations

import codecs
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from beam_nominal._wire import reference_row, runs, scratch
from beam_nominal._wire._proto.nominal.write import nominal_write_pb2 as nw
from beam_nominal._wire._varint import I64, U8, U64, encode_varints, varint_bytes, varint_lengths
from beam_nominal._wire.batch import DecodedRequest, DoubleBatches, MalformedBatchError, SeriesBatch, StringRows
from beam_nominal._wire.encode import (
    TIMESTAMP_BYTES,
    TIMESTAMP_BYTES_NEGATIVE,
    _check_strings,
    _checked_double_rows,
    _checked_key_bytes,
    _checked_len,
    _checked_numeric,
    _checked_string_rows,
    _checked_timestamps,
    _checked_type,
    _encode_tags,
    _encode_timestamps,
    _headers,
    _interleave,
    _len_field,
    _segment_sums,
    _string_entries,
    _string_field,
    put_timestamps_5,
    put_timestamps_10,
    timestamp_width,
)
from beam_nominal._wire.fields import (
    UpbFallback,
    decode_fixed_19,
    first_out_of_range,
    fixed_14_ns,
    map_entry,
    read_length,
    read_small_varint,
    read_tag,
    read_text,
    read_varint,
    request_fields,
    single_member,
    skip_field,
    unspread5,
)
from beam_nominal._wire.scratch import thread_scratch
from beam_nominal.model import SeriesKey, ValueType

__all__ = [
    "decode_write_nominal",
    "encode_write_nominal",
]

_T1 = b"\x0a"
_T2 = b"\x12"
_T3 = b"\x1a"

# Points oneof member (field number) of each value type; arrays are ArrayPoints (4) holding
# double_array_points (1) or string_array_points (2).
_MEMBER = {
    ValueType.DOUBLE: 1,
    ValueType.STRING: 2,
    ValueType.INT64: 3,
    ValueType.DOUBLE_ARRAY: 4,
    ValueType.STRING_ARRAY: 4,
    ValueType.STRUCT: 5,
    ValueType.UINT64: 6,
}
_ARRAY_MEMBER = {ValueType.DOUBLE_ARRAY: 1, ValueType.STRING_ARRAY: 2}
_INTEGER = (ValueType.INT64, ValueType.UINT64)
_STRINGISH = (ValueType.STRING, ValueType.STRUCT)
# Point bytes besides the timestamp: the point's tag and length, and a double's tag and 8 bytes.
_DOUBLE_EXTRA = 2 + 9
# A double point with a timestamp >= 1970, as _double_points and _fastpath.join_into write it.
_DOUBLE_STRIDE = TIMESTAMP_BYTES + _DOUBLE_EXTRA
_NS = 1_000_000_000


# ---------------------------------------------------------------------------------------------
# Encoder: points
# ---------------------------------------------------------------------------------------------


class _Matrices:
    """Where one encode's point matrices live: the first few large ones in this thread's scratch
    buffers, reused from request to request (a fresh request-sized matrix costs more in page
    faults than filling it: see ``scratch.py``), the rest made fresh. The body is joined from
    them before the encode returns, so they are free again for the thread's next encode."""

    __slots__ = ("_scratch", "_taken")

    #: Matrices smaller than this come from malloc's heap without faults.
    MIN_BYTES = 256 << 10
    #: Large matrices per encode from scratch (a request has one per value kind, nearly always).
    SLOTS = 2

    def __init__(self) -> None:
        self._scratch = thread_scratch()
        self._taken = 0

    def empty(self, size: int) -> U8:
        if size < self.MIN_BYTES or self._taken >= self.SLOTS:
            return np.empty(size, dtype=np.uint8)
        self._taken += 1
        return self._scratch.get(f"write-nominal-{self._taken}", size)


def _point_matrix(ns: I64, tsw: int, value_bytes: int, matrices: _Matrices | None = None) -> tuple[U8, Any]:
    """A (points, stride) matrix with each row's ``0a L`` and timestamp written, and the view of
    its value bytes (the ``value_bytes`` >= 2 after the timestamp) for the caller to fill; in
    ``matrices`` if given (valid until its encode ends), else fresh."""
    n = ns.shape[0]
    head = b"\x0a" + varint_bytes(tsw + value_bytes)
    h = len(head)
    stride = h + tsw + value_bytes
    buf = np.empty(n * stride, dtype=np.uint8) if matrices is None else matrices.empty(n * stride)
    mat = buf.reshape(n, stride)
    if n == 0:
        return buf, mat[:, h + tsw :]
    if h == 2:
        np.ndarray((n,), dtype="<u2", buffer=buf, strides=(stride,))[:] = 0x0A | (tsw + value_bytes) << 8
    else:
        mat[:, :h] = np.frombuffer(head, dtype=np.uint8)
    if tsw == TIMESTAMP_BYTES:
        # Spills two bytes into the value, which the caller writes afterwards.
        put_timestamps_5(ns, buf, h, stride, 0x0A)
    else:
        put_timestamps_10(ns, mat[:, h : h + tsw], 0x0A)
    return buf, mat[:, h + tsw :]


def _double_points(ns: I64, tsw: int, values: npt.NDArray[Any], matrices: _Matrices) -> U8:
    buf, tail = _point_matrix(ns, tsw, 9, matrices)
    tail[:, 0] = 0x11
    stride = tsw + _DOUBLE_EXTRA
    if ns.shape[0]:
        np.ndarray((ns.shape[0],), dtype="<f8", buffer=buf, offset=stride - 8, strides=(stride,))[:] = values
    return buf


def _integer_points(ns: I64, tsw: int, values: U64, width: int, matrices: _Matrices) -> U8:
    """Points whose varint values are all padded to ``width`` bytes (the widest of the series)."""
    buf, tail = _point_matrix(ns, tsw, 1 + width, matrices)
    tail[:, 0] = 0x10
    for k in range(width):
        group = (values >> np.uint64(7 * k)) & np.uint64(0x7F)
        if k < width - 1:
            group |= np.uint64(0x80)
        tail[:, 1 + k] = group
    return buf


def _ragged_points(ns: I64, tsw: int, body: U8, sizes: I64) -> tuple[U8, I64]:
    """Points of ``0a L`` + timestamp + each point's ``sizes[k]`` bytes of ``body``, and each
    point's size."""
    n = ns.shape[0]
    lengths = tsw + sizes
    hdr, hlens = _headers(0x0A, lengths)
    head = _interleave(hdr, hlens, _encode_timestamps(ns, 0x0A), np.full(n, tsw, dtype=np.int64))
    return _interleave(head, hlens + tsw, body, sizes), hlens + lengths


def _short_string_points(strs: list[Any], ns: I64, tsw: int) -> tuple[U8, I64] | None:
    """String points ``0a L`` + timestamp + ``12 len`` + UTF-8, and each point's size, where
    every point is under 128 bytes (None otherwise: the general path writes them).

    The text is joined with a run before every string as long as the point's fixed bytes, and
    encoded once; the runs are then overwritten in place. Each run holds one NUL: where no
    string holds one, the NULs' offsets are the points' (else the strings' UTF-8 lengths are
    taken one by one). No per-string work but the join.

    Raises:
        TypeError, UnicodeEncodeError: a value that is not a str, or not valid Unicode.
    """
    n = len(strs)
    if n == 0:
        return None
    head = 2 + tsw + 2
    sep = "\0" + "\1" * (head - 1)
    out = np.frombuffer(bytearray(sep.join(["", *strs]), "utf-8"), dtype=np.uint8)
    starts = np.flatnonzero(out == 0)
    if starts.shape[0] == n:
        sizes = np.empty(n, dtype=np.int64)
        sizes[:-1] = starts[1:] - starts[:-1]
        sizes[-1] = out.shape[0] - starts[-1]
        blens = sizes - head
    else:
        blens = np.fromiter((len(s.encode("utf-8")) for s in strs), dtype=np.int64, count=n)
        sizes = blens + head
        starts = np.cumsum(sizes)
        starts -= sizes
    if int(blens.max()) > 0x7F - tsw - 2:
        return None
    out[starts] = 0x0A
    out[starts + 1] = tsw + 2 + blens
    _put_timestamps_at(out, starts + 2, ns, tsw)
    out[starts + (2 + tsw)] = 0x12
    out[starts + (3 + tsw)] = blens
    return out, sizes


def _put_timestamps_at(out: U8, at: I64, ns: I64, tsw: int) -> None:
    """Write the Timestamp entries (field key ``0a``, ``tsw`` bytes) of ``ns`` at the offsets ``at``
    of ``out``, as words at the offsets that cover each entry's bytes and no byte beyond it."""
    entries = _encode_timestamps(ns, 0x0A)
    words = np.ndarray((out.shape[0] - 7,), dtype="<u8", buffer=out, strides=(1,))
    for off in (0, 6) if tsw == TIMESTAMP_BYTES else (0, 8, 11):
        words[at + off] = np.ndarray((ns.shape[0],), dtype="<u8", buffer=entries, offset=off, strides=(tsw,))


def _double_array_points(i: int, batch: SeriesBatch, ns: I64, tsw: int, matrices: _Matrices | None = None) -> U8:
    n = ns.shape[0]
    flat, counts, width = _checked_double_rows(i, batch, n)
    if counts is None:
        # Rows of one width share one layout: one matrix, no per-row work.
        inner = b"\x12" + varint_bytes(8 * width)
        h = len(inner)
        buf, tail = _point_matrix(ns, tsw, h + 8 * width, matrices)
        tail[:, :h] = np.frombuffer(inner, dtype=np.uint8)
        tail[:, h:] = flat.view(np.uint8).reshape(n, 8 * width)
        return buf
    nbytes = counts * 8
    inner_hdr, inner_hlens = _headers(0x12, nbytes)
    body = _interleave(inner_hdr, inner_hlens, flat.view(np.uint8), nbytes)
    return _ragged_points(ns, tsw, body, inner_hlens + nbytes)[0]


def _string_array_points(i: int, batch: SeriesBatch, ns: I64, tsw: int) -> U8:
    n = ns.shape[0]
    rows = _string_rows(i, batch, n)
    try:
        short = _short_string_array_points(rows, ns, tsw)
        if short is not None:
            return short
        flat = list(itertools.chain.from_iterable(rows))
        body, sizes = _string_entries(flat, 0x12)
    except (TypeError, UnicodeEncodeError):
        for j, r in enumerate(rows):
            _check_strings(i, batch, r, f"values[{j}]")
        raise
    row_counts = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    return _ragged_points(ns, tsw, body, _segment_sums(sizes, row_counts))[0]


_ROW_TYPES = frozenset({list, tuple})


def _string_rows(i: int, batch: SeriesBatch, n: int) -> Any:
    """The rows of a string-array column: lists and tuples pass at once (a C-level pass over the
    rows' types), anything else gets :func:`encode._checked_string_rows`'s per-row check."""
    rows = batch.values
    if type(rows) in _ROW_TYPES and len(rows) == n and set(map(type, rows)) <= _ROW_TYPES:
        return rows
    return _checked_string_rows(i, batch, n)


# The stand-ins of the fast string-array path, in the text before it is encoded: a point's head
# (``0a L`` + timestamp) and an entry's header (``12 len``), each starting with the only NUL.
_ENTRY_SEP = "\0\1"


def _short_string_array_points(rows: Any, ns: I64, tsw: int) -> U8 | None:
    """``StringArrayPoint`` points as :func:`_ragged_points` writes them, where every string is
    under 128 bytes and every point under 16384 (None otherwise, or where a string holds a NUL:
    the general path then writes them).

    Each row is joined with a two-character stand-in for every entry header, the rows with a
    stand-in for each point's head as long as the head will be, the text encoded once; the NULs
    that start the stand-ins then give every point's and string's byte length, and the stand-ins
    are overwritten in place: no per-string work but the joins. A head's length depends on its
    point's length varint, taken from the row's characters (its bytes where it is ASCII): a row
    whose bytes need a longer varint than its characters (non-ASCII text near 128 bytes) gives
    None.

    Raises:
        TypeError, UnicodeEncodeError: a value that is not a str, or not valid Unicode.
    """
    n = ns.shape[0]
    if n == 0:
        return None
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    texts = list(map(_ENTRY_SEP.join, rows))
    empty = counts == 0
    # The point length if every row is ASCII: the timestamp, the strings, a header per string.
    guess = np.fromiter(map(len, texts), dtype=np.int64, count=n) + (tsw + 2) - 2 * empty
    if int(guess.max()) >= 0x4000:
        return None
    wide = guess >= 0x80
    heads = ["\0" + "\1" * (vlen + tsw) + sep for sep in (_ENTRY_SEP, "") for vlen in (1, 2)]
    kind = wide + 2 * empty
    if int(kind.min()) == int(kind.max()):
        text = heads[kind[0]] + heads[kind[0]].join(texts)
    else:
        by_row = np.array(heads, dtype=object)[kind].tolist()
        text = "".join(itertools.chain.from_iterable(zip(by_row, texts, strict=True)))
    out = np.frombuffer(bytearray(text, "utf-8"), dtype=np.uint8)
    total = out.shape[0]
    nul = np.flatnonzero(out == 0)
    if nul.shape[0] != n + int(counts.sum()):
        return None
    # Each stand-in and the string after it: an entry's size, or a head's.
    sizes = np.empty_like(nul)
    np.subtract(nul[1:], nul[:-1], out=sizes[:-1])
    sizes[-1] = total - nul[-1]
    if int(sizes.max()) >= 2 + 0x80:
        return None
    # An entry header at every NUL; the heads' two bytes are overwritten below.
    out[nul] = 0x12
    sizes -= 2
    out[nul + 1] = sizes
    head_at = nul[np.cumsum(counts + 1) - (counts + 1)]
    lengths = np.empty_like(head_at)
    np.subtract(head_at[1:], head_at[:-1], out=lengths[:-1])
    lengths[-1] = total - head_at[-1]
    lengths -= 2 + wide
    if ((lengths >= 0x80) != wide).any():
        return None
    out[head_at] = 0x0A
    if wide.any():
        out[head_at[wide] + 1] = lengths[wide] & 0x7F | 0x80
        out[head_at[wide] + 2] = lengths[wide] >> 7
        out[head_at[~wide] + 1] = lengths[~wide]
    else:
        out[head_at + 1] = lengths
    _put_timestamps_at(out, head_at + 2 + wide, ns, tsw)
    return out


# ---------------------------------------------------------------------------------------------
# Encoder: series and requests
# ---------------------------------------------------------------------------------------------


def _encode_series_key(key: SeriesKey) -> bytes:
    """``Series`` channel (field 1, a ``Channel { name = 1 }`` message) and tags (field 2)."""
    name = _string_field(_T1, key.channel)
    return _len_field(_T1, len(name)) + name + _encode_tags(key)


_SERIES_KEY_CACHE: dict[SeriesKey, bytes] = {}
# Framing depends only on (value type, points bytes); series of equal length repeat it. Bounded.
_FRAMINGS: dict[tuple[ValueType, int], bytes] = {}
_FRAMINGS_SIZE = 100_000
_KINDS = {
    ValueType.DOUBLE: "double",
    ValueType.INT64: "integer",
    ValueType.UINT64: "integer",
    ValueType.STRING: "string",
    ValueType.STRUCT: "string",
}
_F8 = np.dtype("<f8")
_I8 = np.dtype(np.int64)


def _points_framing(vt: ValueType, payload_len: int) -> bytes:
    """``Points`` field 3, its member and (arrays) the inner member, up to the points bytes."""
    member = bytes([_MEMBER[vt] << 3 | 2])
    if vt.is_array:
        inner = bytes([_ARRAY_MEMBER[vt] << 3 | 2]) + varint_bytes(payload_len)
        arrays_len = len(inner) + payload_len
        body = member + varint_bytes(arrays_len) + inner
        return _T3 + varint_bytes(len(body) + payload_len) + body
    body = member + varint_bytes(payload_len)
    return _T3 + varint_bytes(len(body) + payload_len) + body


def encode_write_nominal(batches: Sequence[SeriesBatch], session_name: str | None = None) -> bytes:
    """Serialise a ``WriteRequestNominal`` carrying ``batches``, one ``Series`` each, in order.

    Args:
        batches: one :class:`SeriesBatch` per series.
        session_name: ``session_name`` (field 2), written only when not None.

    Returns:
        The body's wire bytes; deterministic for equal input.

    Raises:
        ValueError, TypeError: as :func:`encode.encode_request` raises them, for the same bad
            batches, naming the batch index and its series.
    """
    # A copy of the transient body (so any earlier transient body of this thread is gone).
    return bytes(encode_write_nominal_transient(batches, session_name))


def encode_write_nominal_transient(
    batches: Sequence[SeriesBatch], session_name: str | None = None
) -> bytes | memoryview:
    """:func:`encode_write_nominal`'s bytes in this thread's scratch buffer, valid until the
    thread's next call or its end: for the HTTP target, which digests and compresses the body at once and
    keeps only the compressed copy (see :func:`scratch.joined_transient`)."""
    parts, size = _body_parts(batches, session_name)
    return scratch.joined_transient(parts, size, "write-nominal-body")


def _body_parts(batches: Sequence[SeriesBatch], session_name: str | None) -> tuple[list[Any], int]:
    """The body's bytes in order, and their total size: bytes and uint8 arrays (some of them
    views of this thread's point matrices, valid until its next encode) and, with the C
    extension, ``(ns, values)`` pairs of series of doubles after 1970, whose points
    ``_fastpath.join_into`` writes; see :func:`encode_write_nominal`."""
    if isinstance(batches, DoubleBatches) and batches.points and runs.short(batches.points, len(batches)):
        laid = _double_series(batches)
        if laid is not None:
            tail = b"" if session_name is None else _string_field(_T2, session_name)
            return [laid, tail], len(laid) + len(tail)
    batches = list(batches)
    nb = len(batches)
    matrices = _Matrices()
    vts: list[ValueType] = [ValueType.DOUBLE] * nb
    stamps: list[I64] = [np.empty(0, dtype=np.int64)] * nb
    payloads: list[Any] = [None] * nb
    # Checks in the order encode_request makes them: this pass, then integers, then text.
    doubles: dict[int, Any] = {}
    uniq: list[I64] = []  # timestamp columns, each once (batches of one wide block share one)
    last_ts: Any = None
    ts: Any = None
    for i, b in enumerate(batches):
        vt = b.value_type
        if type(vt) is not ValueType:
            vt = _checked_type(i, b)
        vts[i] = vt
        if b.timestamps is not last_ts:
            last_ts = ts = b.timestamps
            # The common column needs no conversion; anything else gets the full check.
            if not (type(ts) is np.ndarray and ts.dtype == _I8 and ts.ndim == 1):
                ts = _checked_timestamps(i, b)
            uniq.append(ts)
        stamps[i] = ts
        n = ts.shape[0]
        if vt is ValueType.DOUBLE:
            vals = b.values
            if not (type(vals) is np.ndarray and vals.dtype == _F8 and vals.ndim == 1 and vals.shape[0] == n):
                vals = _checked_numeric(i, b, n)
            doubles[i] = vals
        elif vt is ValueType.DOUBLE_ARRAY:
            payloads[i] = _double_array_points(i, b, ts, timestamp_width(ts), matrices)
        elif vt is ValueType.STRING_ARRAY:
            payloads[i] = _string_array_points(i, b, ts, timestamp_width(ts))

    # Columns of one kind and timestamp width are encoded together, then sliced per series:
    # (kind, timestamp width) -> batch indexes. Widths from one minimum in the usual case.
    all_ts = _joined(uniq) if uniq else np.empty(0, dtype=np.int64)
    nonneg = all_ts.shape[0] == 0 or int(all_ts.min()) >= 0
    groups: dict[tuple[str, int], list[int]] = {}
    for i, vt in enumerate(vts):
        kind = _KINDS.get(vt)
        if kind is not None:
            tsw = TIMESTAMP_BYTES if nonneg else timestamp_width(stamps[i])
            groups.setdefault((kind, tsw), []).append(i)

    compiled = scratch.join_into is not None
    for (kind, tsw), idx in groups.items():
        if kind == "double" and tsw == TIMESTAMP_BYTES and compiled:
            # The join writes these points itself, from each series' columns (_fastpath.c).
            contiguous = np.ascontiguousarray
            for i in idx:
                payloads[i] = (contiguous(stamps[i]), contiguous(doubles[i]))
        elif kind == "double":
            # A request of doubles only, each series with its own column (the common case), has
            # joined its timestamps already, for their minimum.
            ns = all_ts if len(idx) == nb == len(uniq) else _joined([stamps[i] for i in idx])
            out = _double_points(ns, tsw, _joined([doubles[i] for i in idx]), matrices)
            stride = tsw + _DOUBLE_EXTRA
            _slice_points(payloads, idx, out, [stride * stamps[i].shape[0] for i in idx])
    for (kind, tsw), idx in groups.items():
        if kind == "integer":
            _encode_integers(batches, stamps, payloads, idx, tsw, matrices)
    for (kind, tsw), idx in groups.items():
        if kind == "string":
            _encode_strings(batches, stamps, payloads, idx, tsw)

    parts: list[Any] = []
    size = 0
    framings = _FRAMINGS
    for i, b in enumerate(batches):
        head = _checked_key_bytes(i, b, _SERIES_KEY_CACHE, _encode_series_key)
        payload = payloads[i]
        plen = payload.nbytes if type(payload) is not tuple else _DOUBLE_STRIDE * payload[0].shape[0]
        framing = framings.get((vts[i], plen))
        if framing is None:
            framing = _points_framing(vts[i], plen)
            if len(framings) >= _FRAMINGS_SIZE:
                framings.clear()
            framings[(vts[i], plen)] = framing
        body_len = len(head) + len(framing) + plen
        series_head = _T1 + varint_bytes(body_len)
        parts += (series_head, head, framing, payload)
        size += len(series_head) + body_len
    if session_name is not None:
        parts.append(_string_field(_T2, session_name))
        size += len(parts[-1])
    return parts, size


def _double_series(batches: DoubleBatches) -> memoryview | None:
    """The ``Series`` of many double series laid out from their columns (``runs.lay_out``), as
    the series-by-series path writes them. None, having made nothing, where a key has tags or a
    channel that is not ASCII, a column is not an int64 or float64 array, or a timestamp is
    before 1970: that path takes those."""
    heads = runs.double_heads(batches, _encode_series_key)
    if heads is None:
        return None
    ts, vals, counts = batches.timestamps, batches.values, batches.counts
    head_columns, head_lens = heads
    points = _double_points(ts, TIMESTAMP_BYTES, vals, _Matrices())
    point_lens = counts * _DOUBLE_STRIDE
    framings, framing_lens, framing_at = runs.by_value(point_lens, lambda size: _points_framing(ValueType.DOUBLE, size))
    series_lens, series_len_sizes = encode_varints((head_lens + framing_lens + point_lens).astype(np.uint64))
    # Each Series: its field key and length, channel (and no tags), points framing, points.
    return runs.lay_out(
        [
            (_T1, 1, 0),
            (series_lens, series_len_sizes, None),
            *head_columns,
            (framings, framing_lens, framing_at),
            (points, point_lens, None),
        ],
        len(counts),
        thread_scratch(),  # joined into the body at once
    )


def _joined(columns: list[Any]) -> Any:
    return columns[0] if len(columns) == 1 else np.concatenate(columns)


def _slice_points(payloads: list[Any], idx: list[int], out: U8, sizes: list[int]) -> None:
    mv = out.data
    off = 0
    for i, size in zip(idx, sizes, strict=True):
        payloads[i] = mv[off : off + size]
        off += size


def _encode_integers(
    batches: list[SeriesBatch], stamps: list[I64], payloads: list[Any], idx: list[int], tsw: int, matrices: _Matrices
) -> None:
    """Integer columns of one timestamp width: varints padded per series, grouped by that width."""
    cols = [_checked_numeric(i, batches[i], stamps[i].shape[0]) for i in idx]
    by_width: dict[int, list[int]] = {}
    for i, col in zip(idx, cols, strict=True):
        width = int(varint_lengths(col).max()) if col.shape[0] else 1
        by_width.setdefault(width, []).append(i)
    values = dict(zip(idx, cols, strict=True))
    for width, members in by_width.items():
        ns = _joined([stamps[i] for i in members])
        out = _integer_points(ns, tsw, _joined([values[i] for i in members]), width, matrices)
        stride = 2 + tsw + 1 + width
        _slice_points(payloads, members, out, [stride * stamps[i].shape[0] for i in members])


def _encode_strings(
    batches: list[SeriesBatch], stamps: list[I64], payloads: list[Any], idx: list[int], tsw: int
) -> None:
    for i in idx:
        _checked_len(i, batches[i], stamps[i].shape[0])
    flat = list(itertools.chain.from_iterable(batches[i].values for i in idx))
    ns = _joined([stamps[i] for i in idx])
    try:
        short = _short_string_points(flat, ns, tsw)
        if short is None:
            body, sizes = _string_entries(flat, 0x12)
    except (TypeError, UnicodeEncodeError):
        for i in idx:
            _check_strings(i, batches[i], batches[i].values, "values")
        raise
    out, point_sizes = _ragged_points(ns, tsw, body, sizes) if short is None else short
    counts = np.array([stamps[i].shape[0] for i in idx], dtype=np.int64)
    _slice_points(payloads, idx, out, _segment_sums(point_sizes, counts).tolist())


# ---------------------------------------------------------------------------------------------
# Decoder
# ---------------------------------------------------------------------------------------------


def decode_write_nominal(data: bytes | bytearray | memoryview, dataset_rid: str) -> DecodedRequest:
    """Parse ``WriteRequestNominal`` bytes into one :class:`SeriesBatch` per ``Series``, in order.

    Args:
        data: the body's wire bytes (uncompressed), in any valid protobuf encoding.
        dataset_rid: the dataset, from the URL path (the body does not carry it).

    Returns:
        ``DecodedRequest(dataset_rid, session_name or None, batches)``. Numeric columns are
        writable arrays owned by the result.

    Raises:
        MalformedBatchError: a ``Series`` without a channel or points type, or with a timestamp
            outside int64 nanoseconds; names the first such series' index and channel.
        google.protobuf.message.DecodeError: bytes that are not a valid message (truncated,
            garbage, invalid UTF-8). Broken bytes anywhere take precedence over a bad series.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    spans, texts = request_fields(buf, 0x0A, 1, {2: "session_name"})
    session = texts.get(2)

    out: list[SeriesBatch | None] = [None] * len(spans)
    malformed: dict[int, MalformedBatchError] = {}
    # Series by value type (and layout, see _group_key): their points are decoded together, as
    # one region, when they allow it.
    groups: dict[tuple[ValueType, int, int], list[_Walked]] = {}
    slow: list[int] = []
    for i, (s, e) in enumerate(spans):
        try:
            walked = _walk_series(buf, s, e, i)
        except UpbFallback:
            slow.append(i)
            continue
        except MalformedBatchError as exc:
            malformed[i] = exc
            continue
        groups.setdefault(_group_key(buf, walked), []).append(walked)
    for members in groups.values():
        decoded = _joined_points(buf, members)
        for w in members:
            if decoded is not None:
                out[w.at] = decoded[w.at]
                continue
            try:
                ns, values, _ = _points(buf, w.vt, w.start, w.stop)
                out[w.at] = SeriesBatch(w.key, w.vt, ns, values)
            except UpbFallback:
                slow.append(w.at)
    for i in slow:
        try:
            out[i] = _upb_series(buf, spans[i][0], spans[i][1], i)
        except MalformedBatchError as exc:
            malformed[i] = exc
    if malformed:
        # Broken bytes win over a bad series, as with upb: a bad series' bytes may not all have
        # been read, so upb reads them.
        for i in sorted(malformed):
            nw.Series.FromString(buf[spans[i][0] : spans[i][1]])
        raise malformed[min(malformed)]
    return DecodedRequest(dataset_rid, session, out)  # type: ignore[arg-type]


def _upb_series(buf: bytes, start: int, stop: int, index: int) -> SeriesBatch:
    """One ``Series`` through upb and the reference converter."""
    return reference_row.series_batch(index, nw.Series.FromString(buf[start:stop]))


_VALUE_TYPES = {
    1: ValueType.DOUBLE,
    2: ValueType.STRING,
    3: ValueType.INT64,
    5: ValueType.STRUCT,
    6: ValueType.UINT64,
}


class _Walked(NamedTuple):
    """A ``Series`` whose key is read: its value type and the bytes of its points message."""

    at: int
    key: SeriesKey
    vt: ValueType
    start: int
    stop: int


# Series key prefixes (the bytes of a series' channel and tags fields, up to its points
# field) already parsed, and the key they give: series repeat across requests, so most cost
# one slice and one lookup. Bounded; cleared when full (a racing clear only costs a re-parse).
_PREFIX_CACHE: dict[bytes, SeriesKey] = {}
_PREFIX_CACHE_SIZE = 100_000


def _walk_series(buf: bytes, start: int, stop: int, index: int) -> _Walked:
    """Read a ``Series``' key and find its points member.

    Raises:
        UpbFallback: a layout only upb reads (a repeated channel or points field, which
            protobuf merges; a points member set twice).
        MalformedBatchError: no channel, or no points type.
    """
    where = f"series[{index}]"
    # The usual layout, channel and tags then points: the key from the cache.
    p = buf.find(b"\x1a", start, stop)
    key: SeriesKey | None = _PREFIX_CACHE.get(buf[start:p]) if p > start else None
    points: tuple[int, int] | None = None
    if key is not None and p + 2 < stop:
        n, q = read_small_varint(buf, p + 1, stop, where)
        if q + n == stop:
            points = (q, stop)
    if key is None or points is None:
        key, points = _walk_fields(buf, start, stop, index, where)
    if points is None:
        raise MalformedBatchError(index, key.channel, "points type not set")
    s, e = points
    member: tuple[int, int, int] | None = None
    if s + 2 < e and buf[s] in _MEMBER_KEYS:
        # The usual Points: one member spanning all of it.
        n, q = read_small_varint(buf, s + 1, e, where)
        if q + n == e:
            member = (buf[s] >> 3, q, e)
    if member is None:
        member = single_member(buf, [points], f"{where}.points")
        if member is None:
            raise MalformedBatchError(index, key.channel, "points type not set")
    field, s, e = member
    if field == 4:
        kind = single_member(buf, [(s, e)], f"{where}.points")
        if kind is None or kind[0] > 2:
            raise MalformedBatchError(index, key.channel, "array points type not set")
        field, s, e = kind
        return _Walked(index, key, ValueType.DOUBLE_ARRAY if field == 1 else ValueType.STRING_ARRAY, s, e)
    return _Walked(index, key, _VALUE_TYPES[field], s, e)


_MEMBER_KEYS = frozenset({0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x32})


def _walk_fields(buf: bytes, start: int, stop: int, index: int, where: str) -> tuple[SeriesKey, tuple[int, int] | None]:
    """A ``Series``' fields in any order: (key, span of its points field or None)."""
    channel: str | None = None
    tags: dict[str, str] = {}
    points: tuple[int, int] | None = None
    prefix_end = -1  # where the channel and tags fields end, if they all come first
    pos = start
    while pos < stop:
        field_at = pos
        field, wt, pos = read_tag(buf, pos, stop, where)
        if wt != 2 or field > 3:
            pos = skip_field(buf, pos, stop, field, wt, where)
            prefix_end = -2
            continue
        s, pos = read_length(buf, pos, stop, where)
        if field == 1:
            if channel is not None:
                raise UpbFallback
            channel = _channel_name(buf, s, pos, where)
        elif field == 2:
            entry = map_entry(buf, s, pos, f"{where}.tags")
            if entry is not None:
                tags[entry[0]] = entry[1]
        else:
            if points is not None:
                raise UpbFallback
            points = (s, pos)
            if prefix_end == -1:
                prefix_end = field_at
    if channel is None:
        raise MalformedBatchError(index, "", "channel not set")
    key = SeriesKey(channel, tuple(sorted(tags.items())) if tags else ())
    if prefix_end > start and points is not None and points[1] == stop:
        if len(_PREFIX_CACHE) >= _PREFIX_CACHE_SIZE:
            _PREFIX_CACHE.clear()
        _PREFIX_CACHE[buf[start:prefix_end]] = key
    return key, points


def _channel_name(buf: bytes, start: int, stop: int, where: str) -> str:
    name = ""
    pos = start
    while pos < stop:
        field, wt, pos = read_tag(buf, pos, stop, where)
        if field == 1 and wt == 2:
            s, pos = read_length(buf, pos, stop, where)
            name = read_text(buf, s, pos, f"{where}.channel")
        else:
            pos = skip_field(buf, pos, stop, field, wt, where)
    return name


_ANY_LAYOUT = (ValueType.DOUBLE, ValueType.STRING, ValueType.STRUCT, ValueType.STRING_ARRAY)


def _group_key(buf: bytes, w: _Walked) -> tuple[ValueType, int, int]:
    """Series decoded together: doubles and text all in one group per type, others by the
    layout of their first point (our padded varints have a width per series, double arrays a
    row size: one stride per group)."""
    if w.vt in _ANY_LAYOUT or w.stop - w.start < 4:
        return w.vt, 0, 0
    return w.vt, buf[w.start + 1], buf[w.start + 3]


def _points(buf: bytes, vt: ValueType, start: int, stop: int, bounds: I64 | None = None) -> tuple[I64, Any, I64]:
    """(timestamps, values, points per region) of the points message of a ``vt`` series;
    ``bounds``: offsets (from ``start``) of the regions of several series, the last one the end
    (default: one region).

    Raises:
        UpbFallback: a layout no vector path reads, a region that does not start on a point, or a
            timestamp near or past the int64 limits (upb then names it).
    """
    if vt is ValueType.DOUBLE:
        return _doubles(buf, start, stop, bounds)
    if vt in _STRINGISH:
        return _strings(buf, start, stop, bounds)
    if vt in _INTEGER:
        return _fixed_integers(buf, start, stop, vt, bounds)
    if vt is ValueType.DOUBLE_ARRAY:
        try:
            return _uniform_double_rows(buf, start, stop, bounds)
        except UpbFallback:
            return _canonical_double_rows(buf, start, stop, bounds)
    return _string_array_rows(buf, start, stop, bounds)


def _joined_points(buf: bytes, members: list[_Walked]) -> dict[int, SeriesBatch] | None:
    """Decode several series' points of one type as one region (their bytes joined): a
    concatenation of valid points is valid points, and each series' share is checked to start
    on a point. None if the joined region does not decode (each is then tried alone)."""
    if len(members) == 1:
        return None
    vt = members[0].vt
    sizes = [w.stop - w.start for w in members]
    joined = b"".join([buf[w.start : w.stop] for w in members])
    bounds = np.zeros(len(members) + 1, dtype=np.int64)
    np.cumsum(np.array(sizes, dtype=np.int64), out=bounds[1:])
    try:
        ns, values, counts = _points(joined, vt, 0, len(joined), bounds)
    except UpbFallback:
        return None
    out = {}
    off = 0
    for w, c in zip(members, counts.tolist(), strict=True):
        out[w.at] = SeriesBatch(w.key, vt, ns[off : off + c], values[off : off + c])
        off += c
    return out


_U = np.uint64
_HIGH_BITS = _U(0x8080_8080_8080_8080)
_LOW_BITS = _U(0x7F7F_7F7F_7F7F_7F7F)
# At most this many false point starts (a value's bytes that look like one), besides one in 16
# points, are stepped over before a series is left to upb.
_MAX_REPAIRS = 64
# Bytes per block of the point-start scan, points per block of the field decode: temporaries
# stay in cache and in malloc's heap (below its 128 KiB mmap threshold), so no page is faulted
# in per request.
_SCAN_BLOCK = 1 << 16
_POINT_BLOCK = 16000


class _Words:
    """The 8 bytes at any offset of a buffer as a little-endian word, for many offsets at once."""

    def __init__(self, buf: bytes) -> None:
        if len(buf) < 8:
            buf += bytes(8)
        self.view = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
        self.last = len(buf) - 8

    def at(self, pos: I64) -> U64:
        """Words at byte offsets ``pos``; bytes past the buffer's end read as zero (callers check
        every field against its message's bounds)."""
        if pos.shape[0] and int(pos[-1]) > self.last:
            near = np.minimum(pos, self.last)
            shifted: U64 = self.view[near] >> ((pos - near).astype(np.uint64) * _U(8))
            return shifted
        words: U64 = self.view[pos]
        return words


def _varints_at(words: U64) -> tuple[U64, I64] | None:
    """(value, byte length) of the varint in bytes 1..7 of each word (byte 0 is its field key);
    None if one is longer than 7 bytes, which no vector path here reads."""
    words = words >> _U(8)
    # The lowest byte without a continuation bit ends the varint (the shifted-in top byte
    # always has none: a length of 8 means the varint did not end within its 7 bytes).
    stop = np.bitwise_and(~words, _HIGH_BITS)
    low = stop & np.negative(stop)
    mask = low ^ (low - _U(1))
    length = np.bitwise_count(mask)
    if length.shape[0] and int(length.max()) > 56:
        return None
    v = words & mask
    v &= _LOW_BITS
    v = (v & _U(0x007F_007F_007F_007F)) | ((v >> _U(1)) & _U(0x3F80_3F80_3F80_3F80))
    v = (v & _U(0x0000_3FFF_0000_3FFF)) | ((v >> _U(2)) & _U(0x0FFF_C000_0FFF_C000))
    v = (v & _U(0x0000_0000_0FFF_FFFF)) | ((v >> _U(4)) & _U(0x00FF_FFFF_F000_0000))
    length >>= 3
    return v, length.astype(np.int64)


def _point_chain(arr: U8, cand: I64, nxt: I64, key: int = 0x0A) -> I64 | None:
    """The start of every point of a region of ``0a L <L bytes>`` points (L a varint of 1 or 2
    bytes: L < 16384), or of any other length-delimited fields of field key ``key``.

    Sequential parsing is the chain ``start[k + 1] = start[k] + 1 + |L| + L[k]`` from 0 to the end of
    the region. Candidates (offsets that likely start a point) make it vectorised: links
    between consecutive candidates are checked at once, and only where one fails is the chain
    followed in Python, from the last good position: candidates it steps over (a value's bytes
    that look like a point start) are dropped, positions that are no candidate (a point of a
    rarer form) are taken as they are. None when the chain does not end exactly at the end of
    the region, or after too many such steps (upb is then no slower). ``nxt``: where the point
    at each candidate would end.
    """
    total = arr.shape[0]
    bad = np.flatnonzero(nxt[:-1] != cand[1:])
    if cand.shape[0] and cand[0] == 0 and bad.shape[0] == 0 and int(nxt[-1]) == total:
        return cand
    steps = _MAX_REPAIRS + total // 400
    pieces: list[I64] = []
    last = cand.shape[0]
    search = cand.searchsorted
    pos = 0  # a chain position
    while pos < total:
        steps -= 1
        if steps < 0:
            return None
        j = int(search(pos))
        if j < last and int(cand[j]) == pos:
            # Follow good links up to the next bad one (or the last candidate).
            b = int(bad.searchsorted(j))
            k = int(bad[b]) if b < bad.shape[0] else last - 1
            pieces.append(cand[j : k + 1])
            pos = int(nxt[k])
            continue
        if pos + 2 > total or arr[pos] != key:
            return None
        length = int(arr[pos + 1])
        head = 2
        if length >= 0x80:
            if pos + 3 > total or arr[pos + 2] >= 0x80:
                return None
            length = (length & 0x7F) | int(arr[pos + 2]) << 7
            head = 3
        pieces.append(np.array([pos], dtype=np.int64))
        pos += head + length
    if pos != total:
        return None
    return np.concatenate(pieces) if len(pieces) != 1 else pieces[0]


def _point_candidates(arr: U8, wide: bool) -> tuple[I64, I64]:
    """Offsets that likely start a point, and where each such point would end: ``0a L 0a T``
    then ``08`` or ``10``, a point starting with a timestamp (text holding newlines, ``0a``, or
    a double's bytes rarely look like that), L one varint byte, or if ``wide`` also two
    (``L0 >= 80``, ``L1 < 80``: long text and arrays). Points without a timestamp, or with an
    empty one, are rare (the epoch) and are found by :func:`_point_chain`."""
    total = arr.shape[0]
    starts = []
    ends = []
    for b0 in range(0, total - 4, _SCAN_BLOCK):
        b1 = min(b0 + _SCAN_BLOCK, total - 4)
        is_key = arr[b0 : b1 + 3] == 0x0A
        c = np.flatnonzero(is_key[:-3] & is_key[2:-1])
        c += b0
        first = arr[c + 4]
        c = c[((first == 0x08) | (first == 0x10)) & (arr[c + 1] < 0x80)]
        c_end = c + 2 + arr[c + 1]
        if wide:
            w = np.flatnonzero(is_key[:-3] & is_key[3:])
            w += b0
            w = w[w + 5 < total]
            first = arr[w + 5]
            w = w[((first == 0x08) | (first == 0x10)) & (arr[w + 1] >= 0x80) & (arr[w + 2] < 0x80)]
            w_end = w + 3 + (arr[w + 1] & 0x7F) + (arr[w + 2].astype(np.int64) << 7)
            order = np.argsort(np.concatenate([c, w]), kind="stable")
            c = np.concatenate([c, w])[order]
            c_end = np.concatenate([c_end, w_end])[order]
        starts.append(c)
        ends.append(c_end)
    if not starts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if len(starts) == 1:
        return starts[0], ends[0].astype(np.int64, copy=False)
    return np.concatenate(starts), np.concatenate(ends).astype(np.int64, copy=False)


def _doubles(buf: bytes, start: int, stop: int, bounds: I64 | None = None) -> tuple[I64, npt.NDArray[Any], I64]:
    """(timestamps, values, points per region) of ``DoublePoints`` bytes, in our fixed-width
    layout or as prost and upb write them; ``bounds``: offsets (from ``start``) of the regions
    of several series, the last one the end (default: one region).

    Raises:
        UpbFallback: a layout no vector path reads, a region that does not start on a point, or a
            timestamp near or past the int64 limits (upb then names it).
    """
    fixed = _fixed_layout(buf, start, stop, 0x11, 8, bounds)
    if fixed is None:
        return _canonical_doubles(buf, start, stop, bounds)
    n, stride, ns, counts = fixed
    if n == 0:
        return ns, np.empty(0, dtype=np.float64), counts
    values = np.ndarray((n,), dtype="<f8", buffer=buf, offset=start + stride - 8, strides=(stride,))
    return ns, values.astype(np.float64), counts


def _timestamps_ns(sec: I64, nanos: I64) -> I64:
    """seconds * 1e9 + nanos; UpbFallback outside int64 nanoseconds (upb then names the point)."""
    if first_out_of_range(sec, nanos) is not None:
        raise UpbFallback
    out: I64 = sec * _NS + nanos
    return out


def _canonical_doubles(
    buf: bytes, start: int, stop: int, bounds: I64 | None
) -> tuple[I64, npt.NDArray[np.float64], I64]:
    """``DoublePoints`` as prost and upb write them: minimal varints, zero fields omitted.

    Every point is ``0a L`` + ``[0a T [08 seconds] [10 nanos]] [11 <8 bytes>]``: the chain of
    point starts is found (:func:`_point_chain`), then every point's fields are checked to fill
    it exactly and are read with numpy, a varint from one 8-byte word.

    Raises:
        UpbFallback: anything else (fields in another order or repeated, unknown fields, varints
            of more than 7 bytes such as pre-1970 seconds), or a region not starting on a point.
    """
    points = _Points.of(buf, start, stop, bounds)
    n = points.chain.shape[0]
    ns = np.empty(n, dtype=np.int64)
    values = np.empty(n, dtype=np.float64)
    for b0, block in points.blocks():
        b1 = b0 + block.shape[0]
        _double_block(points.full, points.words, block, ns[b0:b1], values[b0:b1])
    return ns, values, points.counts


class _Points(NamedTuple):
    """The points of a region in any varint encoding, found by :func:`_point_chain`."""

    chain: I64  # offsets in the buffer of every point
    counts: I64  # points per region (see _region_counts)
    total: int  # bytes of the region
    # The buffer as bytes (4 zero bytes appended where it ends too soon: up to 4 bytes past a
    # point's start are read before its length is checked), and as words.
    full: U8
    words: _Words

    @classmethod
    def of(cls, buf: bytes, start: int, stop: int, bounds: I64 | None) -> _Points:
        """Raises UpbFallback where no chain of ``0a L`` points (L < 16384) fills the region."""
        arr = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
        if arr.shape[0] < 2:
            raise UpbFallback
        # Two-byte point lengths are looked for only where the first point has one or the chain
        # of one-byte ones fails: the scan for them is a cost doubles and short text should not pay.
        wide = bool(arr[1] >= 0x80)
        chain = _point_chain(arr, *_point_candidates(arr, wide))
        if chain is None and not wide:
            chain = _point_chain(arr, *_point_candidates(arr, True))
        if chain is None:
            raise UpbFallback
        counts = _region_counts(chain, bounds, arr.shape[0])
        full = np.frombuffer(buf if stop + 4 <= len(buf) else buf + bytes(4), dtype=np.uint8)
        return cls(chain + start, counts, arr.shape[0], full, _Words(buf))

    def blocks(self) -> Iterator[tuple[int, I64]]:
        """(first index, offsets) of the points block by block."""
        n = self.chain.shape[0]
        for b0 in range(0, n, _POINT_BLOCK):
            yield b0, self.chain[b0 : b0 + _POINT_BLOCK]


def _strings(buf: bytes, start: int, stop: int, bounds: I64 | None = None) -> tuple[I64, list[str], I64]:
    """(timestamps, values, points per region) of ``StringPoints`` / ``StructPoints`` bytes whose
    points are all shorter than 16384 bytes: ``0a L [0a T <timestamp>] [12 len <UTF-8>]``, in any
    varint encoding (ours and prost's). The value fields are cut out with one mask and parsed
    by upb as one repeated string (which checks the UTF-8); the rest as for doubles.

    Raises:
        UpbFallback: anything else (longer points, unknown fields, ...), as for :func:`_doubles`.
    """
    if stop == start:
        return np.empty(0, dtype=np.int64), [], _region_counts(np.empty(0, dtype=np.int64), bounds, 0)
    points, ns, field_at, field_len, _ = _value_fields(buf, start, stop, bounds)
    fields = _cut(buf, start, points.total, field_at, field_len)
    strs: list[str] = list(nw.StringArrayPoint.FromString(fields.tobytes()).value)
    n = ns.shape[0]
    if len(strs) == n:
        return ns, strs, points.counts
    values = np.full(n, "", dtype=object)
    values[np.flatnonzero(field_len)] = np.array(strs, dtype=object)
    return ns, values.tolist(), points.counts


def _string_array_rows(buf: bytes, start: int, stop: int, bounds: I64 | None = None) -> tuple[I64, Any, I64]:
    """(timestamps, rows, points per region) of ``StringArrayPoints`` bytes whose points and
    strings are all shorter than 16384 bytes, in any varint encoding: ``0a L [0a T <timestamp>]
    (12 len <UTF-8>)*``. The bytes after every timestamp are cut out with one mask; in them the
    chain of entries is found as points are (:func:`_point_chain`), and each point's share
    checked to start on an entry (:func:`_region_counts`); the rows are then columns
    (:func:`_string_columns`), not a str per string.

    Raises:
        UpbFallback: anything else (longer points, unknown or reordered fields, a string that is
            not valid UTF-8, ...), as for :func:`_doubles`: upb then reads it, or raises.
    """
    if stop == start:
        return np.empty(0, dtype=np.int64), [], _region_counts(np.empty(0, dtype=np.int64), bounds, 0)
    points, ns, value_at, rest = _point_values(buf, start, stop, bounds)
    n = ns.shape[0]
    fields = _cut(buf, start, points.total, value_at - start, rest)
    total = fields.shape[0]
    if total == 0:
        empty = np.zeros(n + 1, dtype=np.int64)
        return ns, StringRows(fields, empty[:1], empty), points.counts
    cand, nxt = _entry_candidates(fields)
    chain = _point_chain(fields, cand, nxt, 0x12)
    if chain is None:
        raise UpbFallback
    row_bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rest, out=row_bounds[1:])
    counts = _region_counts(chain, row_bounds, total)
    return ns, _string_columns(fields, chain, counts), points.counts


def _entry_candidates(fields: U8) -> tuple[I64, I64]:
    """Offsets of ``fields`` that likely start an entry ``12 len`` (len a varint of 1 or 2
    bytes), and where each would end."""
    total = fields.shape[0]
    cand = np.flatnonzero(fields == 0x12)
    if cand.shape[0] and cand[-1] == total - 1:
        cand = cand[:-1]  # no room for a length
    first = fields[cand + 1]
    if int(first.max(initial=0)) < 0x80:
        return cand, cand + 2 + first
    wide = first >= 0x80
    keep = ~wide | (cand + 2 < total)
    cand, first, wide = cand[keep], first[keep].astype(np.int64), wide[keep]
    second = fields[np.where(wide, cand + 2, cand)].astype(np.int64)
    keep = ~wide | (second < 0x80)
    cand, first, second, wide = cand[keep], first[keep], second[keep], wide[keep]
    nxt = np.where(wide, cand + 3 + ((first & 0x7F) | second << 7), cand + 2 + first)
    return cand, nxt


def _string_columns(fields: U8, chain: I64, counts: I64) -> StringRows:
    """The strings of entries ``12 len <UTF-8>`` that tile ``fields`` (headers of 2 or 3 bytes at
    offsets ``chain``), ``counts`` of them per row, as :class:`StringRows` columns.

    The headers are overwritten with NUL and the whole is decoded as UTF-8 once, which checks
    every string (a NUL is ASCII, so no character can span two strings); the string bytes are
    the rest, cut out with one mask.

    Raises:
        UpbFallback: a string that is not valid UTF-8 (upb then raises its DecodeError).
    """
    # The entries tile fields, so each string ends where the next entry starts.
    wide = chain[fields[chain + 1] >= 0x80]
    lengths = np.append(chain[1:], fields.shape[0]) - chain - 2
    lengths[np.searchsorted(chain, wide)] -= 1
    # Scatters and np.compress, not boolean indexing, whose per-byte branches cost several times as
    # much on masks of short strings.
    string = np.ones(fields.shape[0], dtype=np.bool_)
    for at in (chain, chain + 1, wide + 2):
        fields[at] = 0
        string[at] = False
    try:
        codecs.utf_8_decode(fields.data, "strict", True)
    except UnicodeDecodeError:
        raise UpbFallback from None
    offsets = np.zeros(chain.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rows = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=rows[1:])
    return StringRows(np.compress(string, fields), offsets, rows)


def _canonical_double_rows(buf: bytes, start: int, stop: int, bounds: I64 | None) -> tuple[I64, list[Any], I64]:
    """``DoubleArrayPoints`` whose points are all shorter than 16384 bytes (up to 2,000 doubles),
    as prost and upb write them: ``0a L [0a T <timestamp>] [12 len <packed doubles>]`` (an empty
    row has no value field). The packed values are cut out with one mask; rows are views of one
    column."""
    points, ns, field_at, field_len, field_head = _value_fields(buf, start, stop, bounds)
    sizes = field_len - field_head
    if (sizes % 8).any():
        raise UpbFallback
    flat = _cut(buf, start, points.total, field_at + field_head, sizes).view("<f8").astype(np.float64)
    widths = sizes // 8
    n = ns.shape[0]
    if n and int(widths.min()) == int(widths.max()):
        return ns, list(flat.reshape(n, int(widths[0]))), points.counts
    return ns, np.split(flat, np.cumsum(widths)[:-1]), points.counts


def _point_values(buf: bytes, start: int, stop: int, bounds: I64 | None) -> tuple[_Points, I64, I64, I64]:
    """Points ``0a L [0a T <timestamp>] <value fields>`` (L < 16384): (the points, their
    timestamps, the offset in ``buf`` of the bytes after each timestamp field, their size)."""
    points = _Points.of(buf, start, stop, bounds)
    n = points.chain.shape[0]
    ns = np.empty(n, dtype=np.int64)
    value_at = np.empty(n, dtype=np.int64)
    rest = np.empty(n, dtype=np.int64)
    for b0, block in points.blocks():
        b1 = b0 + block.shape[0]
        heads = _point_heads(points.full, block, 0x12)
        _point_timestamps(points.words, heads, ns[b0:b1])
        value_at[b0:b1] = heads.value_at
        rest[b0:b1] = heads.rest
    return points, ns, value_at, rest


def _value_fields(buf: bytes, start: int, stop: int, bounds: I64 | None) -> tuple[_Points, I64, I64, I64, I64]:
    """Points ``0a L [0a T <timestamp>] [12 len <bytes>]`` (L < 16384): (the points, their
    timestamps, each value field's offset from ``start``, size and the size of its key and
    length, 0 where it is omitted)."""
    points, ns, value_at, rest = _point_values(buf, start, stop, bounds)
    full = points.full
    n = ns.shape[0]
    field_head = np.zeros(n, dtype=np.int64)
    for b0 in range(0, n, _POINT_BLOCK):
        b1 = min(b0 + _POINT_BLOCK, n)
        has_value = np.flatnonzero(rest[b0:b1] > 0) + b0
        at = value_at[has_value]
        size = rest[has_value]
        # The field's length varint in one byte or two, whichever makes it fill the point exactly.
        one = size < 2 + 0x80
        size -= np.where(one, 2, 3)
        second = full[at + 1]
        length_ok = np.where(one, second == size, (second == (size & 0x7F | 0x80)) & (full[at + 2] == size >> 7))
        if not ((full[at] == 0x12) & length_ok).all():
            raise UpbFallback
        field_head[has_value] = np.where(one, 2, 3)
    value_at -= start
    return points, ns, value_at, rest, field_head


def _cut(buf: bytes, start: int, total: int, at: I64, length: I64) -> U8:
    """The bytes ``[at[k], at[k] + length[k])`` (in order, not overlapping; offsets from
    ``start``) of a region of ``total`` bytes, joined: one mask of alternating runs."""
    n = at.shape[0]
    runs = np.empty(2 * n + 1, dtype=np.int64)
    runs[0] = at[0]
    runs[1::2] = length
    runs[2:-1:2] = at[1:] - (at[:-1] + length[:-1])
    runs[-1] = total - (at[-1] + length[-1])
    in_field = np.zeros(2 * n + 1, dtype=np.bool_)
    in_field[1::2] = True
    cut: U8 = np.frombuffer(buf, dtype=np.uint8, count=total, offset=start)[np.repeat(in_field, runs)]
    return cut


def _region_counts(chain: I64, bounds: I64 | None, total: int) -> I64:
    """Points in each region between ``bounds``, each of which must start a point (or be the end)."""
    if bounds is None:
        return np.array([chain.shape[0]], dtype=np.int64)
    starts = bounds[:-1]
    at = chain.searchsorted(starts)
    inside = at < chain.shape[0]
    if not ((chain[at[inside]] == starts[inside]).all() and (starts[~inside] == total).all()):
        raise UpbFallback
    return np.diff(np.append(at, chain.shape[0]))


class _Heads(NamedTuple):
    """The leading bytes of a block of points ``0a L [0a T <timestamp>] <value field>``."""

    body: I64  # offset of each point's first field (after its key and 1 or 2 length bytes)
    value_at: I64  # offset of the bytes after the timestamp field
    lens: I64  # L
    t_len: I64  # T, 0 where there is no timestamp field
    has_ts: npt.NDArray[np.bool_]
    all_ts: bool
    rest: I64  # bytes after the timestamp field: the value field's


def _point_heads(full: U8, chain: I64, value_key: int) -> _Heads:
    """Read and check the heads of the points at offsets ``chain`` of ``full`` (L < 16384, T <= 16:
    a point without a timestamp is empty or starts with its value field, key ``value_key``)."""
    lens = full[chain + 1].astype(np.int64)
    wide = lens >= 0x80
    if wide.any():
        high = full[chain + 2].astype(np.int64)
        if (wide & (high >= 0x80)).any():
            raise UpbFallback
        lens = np.where(wide, (lens & 0x7F) | high << 7, lens)
        body = chain + 2 + wide
    else:
        body = chain + 2
    key = full[body]
    has_ts = (key == 0x0A) & (lens >= 2)
    all_ts = bool(has_ts.all())
    if all_ts:
        t_len = full[body + 1].astype(np.int64)
        ok = t_len <= 16
        value_at = body + 2 + t_len
    else:
        t_len = np.where(has_ts, full[body + 1], 0).astype(np.int64)
        ok = (t_len <= 16) & (has_ts | (key == value_key) | (lens == 0))
        value_at = body + np.where(has_ts, 2 + t_len, 0)
    rest = body + lens - value_at
    ok &= rest >= 0
    if not ok.all():
        raise UpbFallback
    return _Heads(body, value_at, lens, t_len, has_ts, all_ts, rest)


def _point_timestamps(words: _Words, heads: _Heads, ns_out: I64) -> None:
    """Decode the timestamp fields of the points of ``heads`` into ``ns_out``."""
    t_len = heads.t_len
    body = heads.body
    if heads.all_ts and int(t_len.min()) > 0:
        sec, nanos = _timestamp_bodies(words, body + 2, t_len)
    else:
        with_body = np.flatnonzero(t_len)
        sec = np.zeros(body.shape[0], dtype=np.uint64)
        nanos = np.zeros(body.shape[0], dtype=np.uint64)
        if with_body.shape[0]:
            sec[with_body], nanos[with_body] = _timestamp_bodies(words, body[with_body] + 2, t_len[with_body])
    # nanos is an int32 field: a wider varint keeps its low 32 bits, as every parser does.
    nanos32 = (nanos & _U(0xFFFF_FFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    sec64 = sec.view(np.int64)
    if first_out_of_range(sec64, nanos32) is not None:
        raise UpbFallback  # upb then names the point
    np.multiply(sec64, _NS, out=ns_out)
    ns_out += nanos32


def _double_block(full: U8, words: _Words, chain: I64, ns_out: I64, values_out: npt.NDArray[np.float64]) -> None:
    """Check and read the DoublePoints starting at the offsets ``chain`` of ``full`` (the buffer)."""
    heads = _point_heads(full, chain, 0x11)
    # After the timestamp: nothing (0.0) or the value field, exactly.
    value_at = heads.value_at
    has_value = heads.rest == 9
    every_value = bool(has_value.all())
    if every_value:
        ok = full[value_at] == 0x11
    else:
        ok = (heads.rest == 0) | (has_value & (full[np.where(has_value, value_at, chain)] == 0x11))
    if not ok.all():
        raise UpbFallback
    _point_timestamps(words, heads, ns_out)
    if every_value:
        values_out[:] = words.at(value_at + 1).view("<f8")
    else:
        values_out[:] = 0.0
        with_value = np.flatnonzero(has_value)
        values_out[with_value] = words.at(value_at[with_value] + 1).view("<f8")


# 08, then five bytes of which the last has no continuation bit.
_SEC5_MASK = _U(0x0000_8080_8080_80FF)
_SEC5_WANT = _U(0x0000_0080_8080_8008)


def _seconds(first: U64, body: I64) -> tuple[U64, I64]:
    """(seconds, offset after them) of Timestamp messages starting with ``first`` at ``body``:
    a seconds field (``08`` varint) or none (the message starts with nanos, ``10``)."""
    key0 = first & _U(0xFF)
    has_sec = key0 == 0x08
    sv = _varints_at(first)
    if sv is None:
        raise UpbFallback
    if has_sec.all():
        return sv[0], body + 1 + sv[1]
    if not (has_sec | (key0 == 0x10)).all():
        raise UpbFallback
    return np.where(has_sec, sv[0], _U(0)), body + np.where(has_sec, 1 + sv[1], 0)


def _timestamp_bodies(words: _Words, body: I64, t_len: I64) -> tuple[U64, U64]:
    """(seconds, nanos) of Timestamp messages of ``t_len`` > 0 bytes at offsets ``body``, each
    exactly ``[08 seconds] [10 nanos]`` (varints of up to 7 bytes)."""
    body_end = body + t_len
    first = words.at(body)
    if ((first & _SEC5_MASK) == _SEC5_WANT).all():
        # Every point's seconds in 5 bytes (all times from 1978 to 3058): read in place.
        sec = unspread5(first >> _U(8))
        q = body + 6
    else:
        sec, q = _seconds(first, body)
    more = q < body_end
    every = bool(more.all())
    if not every and not (more | (q == body_end)).all():
        raise UpbFallback
    nano_at = None if every else np.flatnonzero(more)
    qn = q if nano_at is None else q[nano_at]
    if qn.shape[0] == 0:
        return sec, np.zeros(body.shape[0], dtype=np.uint64)
    second = words.at(qn)
    nv = _varints_at(second)
    ends = body_end if nano_at is None else body_end[nano_at]
    if nv is None or not (((second & _U(0xFF)) == 0x10) & (qn + 1 + nv[1] == ends)).all():
        raise UpbFallback
    if nano_at is None:
        return sec, nv[0]
    nanos = np.zeros(body.shape[0], dtype=np.uint64)
    nanos[nano_at] = nv[0]
    return sec, nanos


def _uniform_double_rows(buf: bytes, start: int, stop: int, bounds: I64 | None) -> tuple[I64, list[Any], I64]:
    """(timestamps, rows, points per region) of ``DoubleArrayPoints`` whose rows are all laid
    out as the first: ``0a L`` + fixed-width Timestamp + ``12 M`` + M bytes of packed doubles, as
    our encoder writes rows of one width; one matrix, no per-row parse."""
    total = stop - start
    if total == 0:
        return np.empty(0, dtype=np.int64), [], _region_counts(np.empty(0, dtype=np.int64), bounds, 0)
    if total < 2 or buf[start] != 0x0A:
        raise UpbFallback
    length, p = read_varint(buf, start + 1, stop, "points")
    h = p - start
    if p + 2 > stop or buf[p] != 0x0A:
        raise UpbFallback
    tsw = buf[p + 1] + 2
    q = p + tsw
    if tsw not in (TIMESTAMP_BYTES, TIMESTAMP_BYTES_NEGATIVE) or q >= stop or buf[q] != 0x12:
        raise UpbFallback
    size, r = read_varint(buf, q + 1, stop, "points")
    inner = r - q
    stride = h + length
    if size % 8 or h + tsw + inner + size != stride or total % stride:
        raise UpbFallback
    if bounds is not None and (np.diff(bounds) % stride).any():
        raise UpbFallback
    n = total // stride
    rows = np.ndarray((n, stride), dtype=np.uint8, buffer=buf, offset=start)
    heads = np.frombuffer(buf, dtype=np.uint8, count=h, offset=start)
    inners = np.frombuffer(buf, dtype=np.uint8, count=inner, offset=q)
    if not ((rows[:, :h] == heads).all() and (rows[:, h + tsw : h + tsw + inner] == inners).all()):
        raise UpbFallback
    if tsw == TIMESTAMP_BYTES:
        ns = fixed_14_ns(buf, n, start + h, stride, 0x0A)
        if ns is None:
            raise UpbFallback
    else:
        ok, sec, nanos = decode_fixed_19(buf, n, start + h, stride, 0x0A)
        if not ok.all():
            raise UpbFallback
        ns = _timestamps_ns(sec, nanos)
    counts = np.array([n], dtype=np.int64) if bounds is None else np.diff(bounds) // stride
    if size == 0:
        return ns, [np.empty(0, dtype=np.float64) for _ in range(n)], counts
    values = np.ascontiguousarray(rows[:, stride - size :]).view("<f8").astype(np.float64, copy=False)
    return ns, list(values), counts


def _fixed_integers(
    buf: bytes, start: int, stop: int, vt: ValueType, bounds: I64 | None = None
) -> tuple[I64, npt.NDArray[Any], I64]:
    """(timestamps, values, points per region) of integer points whose varints are padded to
    one width, as our encoder writes them, or in minimal varints (:func:`_canonical_integers`)."""
    if stop - start < 4:
        if stop == start:
            return (
                np.empty(0, dtype=np.int64),
                np.empty(0, dtype=vt.numpy_dtype),
                _region_counts(np.empty(0, dtype=np.int64), bounds, 0),
            )
        return _canonical_integers(buf, start, stop, vt, bounds)
    width = buf[start + 1] - 1 - (buf[start + 3] + 2)
    if not 1 <= width <= 10:
        return _canonical_integers(buf, start, stop, vt, bounds)
    fixed = _fixed_layout(buf, start, stop, 0x10, width, bounds)
    if fixed is None:
        return _canonical_integers(buf, start, stop, vt, bounds)
    n, stride, ns, counts = fixed
    rows = np.ndarray((n, width), dtype=np.uint8, buffer=buf, offset=start + stride - width, strides=(stride, 1))
    if n and not ((rows[:, :-1] >= 0x80).all() and (rows[:, -1] < (0x02 if width == 10 else 0x80)).all()):
        raise UpbFallback
    values = np.zeros(n, dtype=np.uint64)
    for k in range(width):
        values |= (rows[:, k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return ns, values.view(np.int64) if vt is ValueType.INT64 else values, counts


def _canonical_integers(
    buf: bytes, start: int, stop: int, vt: ValueType, bounds: I64 | None
) -> tuple[I64, npt.NDArray[Any], I64]:
    """Integer points in minimal varints, zero fields omitted: ``0a L [0a T <timestamp>] [10
    varint]``, values of up to 7 bytes (below 2**49: counters, not negative int64s)."""
    points = _Points.of(buf, start, stop, bounds)
    n = points.chain.shape[0]
    ns = np.empty(n, dtype=np.int64)
    values = np.zeros(n, dtype=np.uint64)
    for b0, block in points.blocks():
        heads = _point_heads(points.full, block, 0x10)
        has_value = heads.rest > 0
        at = np.flatnonzero(has_value)
        value_at = heads.value_at[at]
        word = points.words.at(value_at)
        decoded = _varints_at(word)
        if decoded is None or not (((word & _U(0xFF)) == 0x10) & (decoded[1] + 1 == heads.rest[at])).all():
            raise UpbFallback
        _point_timestamps(points.words, heads, ns[b0 : b0 + block.shape[0]])
        values[at + b0] = decoded[0]
    return ns, values.view(np.int64) if vt is ValueType.INT64 else values, points.counts


def _fixed_layout(
    buf: bytes, start: int, stop: int, value_key: int, value_bytes: int, bounds: I64 | None
) -> tuple[int, int, I64, I64] | None:
    """Points as our encoder writes them: every row ``0a L`` + fixed-width Timestamp (field key
    ``0a``) + ``value_key`` + ``value_bytes``, with one stride; (points, stride, timestamps,
    points per region), or None for any other layout. The value bytes are the caller's to check.

    Raises:
        UpbFallback: a timestamp near or past the int64 limits (upb then names it).
    """
    total = stop - start
    if total == 0:
        return 0, 0, np.empty(0, dtype=np.int64), _region_counts(np.empty(0, dtype=np.int64), bounds, 0)
    if total < 4 or buf[start] != 0x0A or buf[start + 2] != 0x0A:
        return None
    tsw = buf[start + 3] + 2
    stride = 2 + tsw + 1 + value_bytes
    if tsw not in (TIMESTAMP_BYTES, TIMESTAMP_BYTES_NEGATIVE) or buf[start + 1] != stride - 2 or total % stride:
        return None
    if bounds is None:
        counts = np.array([total // stride], dtype=np.int64)
    else:
        sizes = np.diff(bounds)
        if (sizes % stride).any():
            return None
        counts = sizes // stride
    n = total // stride
    head = np.ndarray((n,), dtype="<u2", buffer=buf, offset=start, strides=(stride,))
    key = np.ndarray((n,), dtype=np.uint8, buffer=buf, offset=start + 2 + tsw, strides=(stride,))
    if not ((head == (0x0A | (stride - 2) << 8)).all() and (key == value_key).all()):
        return None
    if tsw == TIMESTAMP_BYTES:
        ns = fixed_14_ns(buf, n, start + 2, stride, 0x0A)
        if ns is None:  # not the fixed form after all, or near the int64 limits
            raise UpbFallback
        return n, stride, ns, counts
    ok, sec, nanos = decode_fixed_19(buf, n, start + 2, stride, 0x0A)
    if not ok.all():
        return None
    return n, stride, _timestamps_ns(sec, nanos), counts
