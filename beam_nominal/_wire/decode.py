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

The walk is driven by a :class:`ColumnReader`: the request form's :class:`ColumnLayout` (where
the timestamps and the value member sit) and its upb fallback. ``decode_request`` reads the gRPC
form; :mod:`write_batches_v2` reads Nominal's HTTP columnar form with the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from beam_nominal._wire import reference
from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_channel_writer_common_pb2 as common,
)
from beam_nominal._wire._varint import I64, decode_varints, varint_bytes
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal._wire.encode import COLUMN_BATCHES, ColumnLayout, _values_body
from beam_nominal._wire.fields import (
    NS,
    UpbFallback,
    decode_fixed_14,
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
)
from beam_nominal.model import SeriesKey, ValueType

__all__ = ["ColumnReader", "decode_columns", "decode_request", "decode_write_batches"]


_U = np.uint64


# ---------------------------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------------------------


def _fixed_run(buf: bytes, pos: int, stop: int, tag: int = 0x1A) -> tuple[int, int]:
    """(entries, width) of the run of fixed-width Timestamp entries (key ``tag``) at ``pos``;
    (0, 0) if none.

    The run is every consecutive entry whose tag and length bytes match, which is exactly what
    a sequential parser reads as entries. Found without a loop: strided slices of the tag and
    length columns, and ``lstrip`` counts how many lead with the expected byte. The entries'
    inner bytes are verified later, for all batches at once.
    """
    if pos + 2 > stop:
        return 0, 0
    length = buf[pos + 1]
    if length == 12:
        width = 14
    elif length == 17:
        width = 19
    else:
        return 0, 0
    m = (stop - pos) // width
    end = pos + m * width
    tags = buf[pos:end:width]
    lens = buf[pos + 1 : end : width]
    k = min(m - len(tags.lstrip(bytes([tag]))), m - len(lens.lstrip(bytes([length]))))
    return k, width


def _bad_nanos(nanos: I64) -> int | None:
    """Index of the first nanos outside [0, 1e9), or None."""
    if nanos.shape[0] == 0:
        return None
    bad = (nanos < 0) | (nanos >= NS)
    return int(np.argmax(bad)) if bad.any() else None


def _nanos_reason(nanos: int) -> str:
    return f"a timestamp's nanos ({nanos}) is outside [0, 1e9)"


def _combine(sec: I64, nanos: I64, index: int, channel: str, check_nanos: bool = False) -> I64:
    """seconds * 1e9 + nanos, refusing values outside int64 nanoseconds instead of wrapping (and,
    with ``check_nanos``, nanos outside [0, 1e9))."""
    if check_nanos:
        j = _bad_nanos(nanos)
        if j is not None:
            raise MalformedBatchError(index, channel, _nanos_reason(int(nanos[j])))
    bad = first_out_of_range(sec, nanos)
    if bad is not None:
        raise MalformedBatchError(
            index,
            channel,
            f"timestamps[{bad}] ({int(sec[bad])} s, {int(nanos[bad])} ns) is outside the int64 nanosecond range",
        )
    out: I64 = sec * NS + nanos
    return out


def _packed_field(buf: bytes, start: int, stop: int, where: str, number: int = 1) -> list[tuple[int, int]]:
    """Spans of every packed occurrence of field ``number`` in a message; unpacked -> fallback."""
    spans: list[tuple[int, int]] = []
    pos = start
    while pos < stop:
        field, wt, pos = read_tag(buf, pos, stop, where)
        if field == number:
            if wt != 2:
                raise UpbFallback
            s, pos = read_length(buf, pos, stop, where)
            spans.append((s, pos))
        else:
            pos = skip_field(buf, pos, stop, field, wt, where)
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


def _double_rows(buf: bytes, start: int, stop: int, where: str) -> list[Any]:
    rows: list[Any] = []
    pos = start
    while pos < stop:
        field, wt, pos = read_tag(buf, pos, stop, where)
        if field != 1 or wt != 2:
            pos = skip_field(buf, pos, stop, field, wt, where)
            continue
        s, pos = read_length(buf, pos, stop, where)
        # DoubleArrayPoint { packed double value = 2 }
        rows.append(_doubles(buf, _packed_field(buf, s, pos, where, 2), where))
    return rows


def _uniform_double_rows(buf: bytes, start: int, stop: int, where: str) -> list[Any] | None:
    """Rows of one width, each exactly ``0a L 12 M <M bytes>``: one 2-D view, no per-row parse.

    The first row's header fixes the row size; if every row starts with the same header bytes,
    sequential parsing would read each row the same way. None when the rows are not like that.
    """
    if start >= stop:
        return []
    if buf[start] != 0x0A:
        return None
    point_len, p = read_varint(buf, start + 1, stop, where)
    if point_len == 0:
        hdr, size = p - start, 0
    else:
        if p >= stop or buf[p] != 0x12:
            return None
        size, q = read_varint(buf, p + 1, stop, where)
        hdr = q - start
        if q + size != p + point_len or size % 8:
            return None
    row = hdr + size
    total = stop - start
    if total % row:
        return None
    n = total // row
    rows = np.frombuffer(buf, dtype=np.uint8, count=total, offset=start).reshape(n, row)
    if not (rows[:, :hdr] == rows[0, :hdr]).all():
        return None
    if size == 0:
        return [np.empty(0, dtype=np.float64) for _ in range(n)]
    return list(np.ascontiguousarray(rows[:, hdr:]).view("<f8").astype(np.float64, copy=False))


class _Batch:
    """One ColumnBatch while a request is decoded: what the walk found, then its columns."""

    __slots__ = (
        "channel",
        "index",
        "refused",
        "runs",
        "span",
        "tags",
        "timestamps",
        "value_type",
        "values",
    )

    def __init__(self, index: int, span: tuple[int, int]) -> None:
        self.index = index
        self.span = span
        self.channel = ""
        self.tags: dict[str, str] = {}
        # Fixed-width timestamp runs: (start, entries, width).
        self.runs: list[tuple[int, int, int]] = []
        self.timestamps: Any = None
        self.value_type: ValueType | None = None
        self.values: Any = None
        # Why the batch cannot be stored though its bytes parse (a member we refuse), if so.
        self.refused: str | None = None


# Encoded tag entries repeat across batches and requests: their decoded (key, value) is cached
# (bounded; cleared when full; a racing clear from another thread only costs a re-decode).
_TAG_CACHE: dict[bytes, Any] = {}
_TAG_CACHE_SIZE = 100_000
_MISSING = object()


# What a field of a batch (or of its points message) holds. Value members are numbered, here and
# below, as ColumnValues numbers them: 1 doubles, 2 strings, 3 int64s, 4 uint64s, 5 arrays, 6 structs.
_CHANNEL, _TAGS, _TIMESTAMPS, _VALUES, _POINTS, _TEXT, _REFUSED = range(-1, -8, -1)
_KINDS = COLUMN_BATCHES.members


class ColumnReader:
    """What the decoder needs to read one request form.

    Args:
        layout: where the form puts each part.
        parse_batch: parses one batch message's bytes with upb (raising ``DecodeError`` for
            broken bytes), so that broken bytes are reported before a malformed batch.
        upb_batch: ``(buf, start, stop, index)`` decodes the batch at ``buf[start:stop]`` with
            upb and the reference converter, for encodings the vector paths do not read.
    """

    def __init__(
        self,
        layout: ColumnLayout,
        parse_batch: Callable[[bytes], object],
        upb_batch: Callable[[bytes, int, int, int], SeriesBatch],
    ) -> None:
        self.layout = layout
        self.parse_batch = parse_batch
        self.upb_batch = upb_batch
        self.tag = layout.timestamp_tag
        self.nanos_int64 = layout.nanos_int64
        self.nanos_checked = layout.nanos_checked
        self.batch_key = layout.batch_key[0]
        kinds = {layout.members[vt]: kind for vt, kind in _KINDS.items()}  # member field -> kind
        columns: dict[int, int] = {self.tag: _TIMESTAMPS}
        self.values_key = None if layout.values_key is None else layout.values_key[0]
        if self.values_key is None:
            columns.update({number << 3 | 2: kind for number, kind in kinds.items()})
            columns.update({number << 3 | 2: _REFUSED for number in layout.refused})
        else:
            columns[self.values_key] = _VALUES
        self.refused_reasons = {number << 3 | 2: reason for number, reason in layout.refused.items()}
        # In ColumnValues: member field -> kind, and the same by one-byte key.
        self.value_kinds = kinds
        self.value_key_kinds = {number << 3 | 2: kind for number, kind in kinds.items()}
        roles: dict[int, int] = {0x0A: _CHANNEL, 0x12: _TAGS}
        roles.update({number << 3 | 2: _TEXT for number in layout.dropped_strings})
        if layout.points_key is None:
            roles.update(columns)
            self.points_roles: dict[int, int] = {}
        else:
            roles[layout.points_key[0]] = _POINTS
            self.points_roles = columns
        self.batch_roles = roles
        # The whole-request fast path: where a fixed-width run starts, and the numeric members.
        self.points_key = None if layout.points_key is None else layout.points_key[0]
        self.run_head = bytes([self.tag, 12])
        self.numeric_keys = {
            layout.member_keys[vt][0]: _KINDS[vt] for vt in (ValueType.DOUBLE, ValueType.INT64, ValueType.UINT64)
        }
        # Bytes between one timestamp and one double: the smallest such framing.
        self.min_double_tail = len(_values_body(ValueType.DOUBLE, 8, 1, layout))
        self.double_tails: dict[int, bytes] = {}


def _walk_batch(buf: bytes, b: _Batch, r: ColumnReader) -> tuple[int, list[tuple[int, int]]] | None:
    """Read a batch's key, find its timestamp runs and its value member: (kind, spans) or None.

    Raises:
        UpbFallback: the batch uses an encoding only upb handles.
        MalformedBatchError: a member the form refuses (after the whole batch was read).
    """
    start, stop = b.span
    where = f"batches[{b.index}]"
    value_spans: list[tuple[int, int]] = []
    members: list[tuple[int, int, int]] = []
    _walk_fields(buf, b, start, stop, r.batch_roles, r, where, value_spans, members)
    if b.refused is not None:
        raise MalformedBatchError(b.index, b.channel, b.refused)
    runs = b.runs
    if len(runs) > 1 and any(w != runs[0][2] for _, _, w in runs):
        raise UpbFallback  # runs of both widths in one batch: rare enough to leave to upb
    member = None
    if r.values_key is None:
        # Members beside the timestamps: repeated occurrences merge under protobuf rules, which
        # upb applies.
        if len(members) > 1:
            raise UpbFallback
        if not members:
            return None
        member = members[0]
    elif len(value_spans) == 1:
        # The usual shape: ColumnValues holding exactly one member, spanning all of it.
        s, e = value_spans[0]
        if s + 2 < e and buf[s] in r.value_key_kinds:
            n, p = read_small_varint(buf, s + 1, e, where)
            if p + n == e:
                member = (r.value_key_kinds[buf[s]], p, e)
    if member is None:
        found = single_member(buf, value_spans, f"{where}.values", r.value_kinds)
        if found is None:
            return None
        member = (r.value_kinds[found[0]], found[1], found[2])
    field, s, e = member
    if field in (1, 3, 4):
        # Likewise a points message that is exactly one packed field 1.
        if s + 2 < e and buf[s] == 0x0A:
            n, p = read_small_varint(buf, s + 1, e, where)
            if p + n == e:
                return field, [(p, e)]
        return field, _packed_field(buf, s, e, f"{where}.values")
    return field, [(s, e)]


def _walk_fields(
    buf: bytes,
    b: _Batch,
    start: int,
    stop: int,
    roles: dict[int, int],
    r: ColumnReader,
    where: str,
    value_spans: list[tuple[int, int]],
    members: list[tuple[int, int, int]],
) -> None:
    """Read the fields of one message of a batch (the batch, or its points message) by ``roles``:
    the key into ``b``, timestamp runs into ``b.runs``, ColumnValues spans into ``value_spans``,
    members beside the timestamps into ``members`` as (kind, start, stop)."""
    pos = start
    while pos < stop:
        field_pos = pos
        key = buf[pos]
        # One-byte keys and lengths inline (all of ours); anything longer takes the helpers.
        role = roles.get(key)
        if role is not None:
            pos += 1
        else:
            field, wt, pos = read_tag(buf, pos, stop, where)
            key = field << 3 | wt
            role = roles.get(key) if wt == 2 else None
            if role is None:
                pos = skip_field(buf, pos, stop, field, wt, where)
                continue
        if role == _TIMESTAMPS:
            k, width = _fixed_run(buf, field_pos, stop, r.tag)
            if k:
                b.runs.append((field_pos, k, width))
                pos = field_pos + k * width
            else:
                # Another varint form (canonical, as other clients write it): no client of ours
                # sends it, and upb reads it.
                raise UpbFallback
            continue
        if pos < stop and buf[pos] < 0x80:
            s = pos + 1
            pos = s + buf[pos]
            if pos > stop:
                raise DecodeError(f"{where}: field of {pos - s} bytes runs past the end of its message")
        else:
            s, pos = read_length(buf, pos, stop, where)
        if role == _CHANNEL:
            try:
                b.channel = buf[s:pos].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(f"{where}.channel: string is not valid UTF-8 ({exc.reason})") from None
        elif role == _TAGS:
            entry = _TAG_CACHE.get(buf[s:pos], _MISSING)
            if entry is _MISSING:
                entry = map_entry(buf, s, pos, f"{where}.tags")
                if len(_TAG_CACHE) >= _TAG_CACHE_SIZE:
                    _TAG_CACHE.clear()
                _TAG_CACHE[buf[s:pos]] = entry
            if entry is not None:
                b.tags[entry[0]] = entry[1]
        elif role == _VALUES:
            value_spans.append((s, pos))
        elif role == _POINTS:
            # Occurrences of the points message merge: their fields are read in order.
            _walk_fields(buf, b, s, pos, r.points_roles, r, f"{where}.points", value_spans, members)
        elif role == _TEXT:
            read_text(buf, s, pos, where)
        elif role == _REFUSED:
            b.refused = r.refused_reasons[key]
        else:
            members.append((role, s, pos))


def _batch_values(buf: bytes, b: _Batch, field: int, s: int, e: int) -> None:
    """Columns of the value types read one batch at a time (strings via upb, arrays)."""
    where = f"batches[{b.index}].values"
    if field in (2, 6):
        b.value_type = ValueType.STRING if field == 2 else ValueType.STRUCT
        b.values = list(common.StringPoints.FromString(buf[s:e]).points)
        return
    kind = single_member(buf, [(s, e)], where)
    if kind is None or kind[0] > 2:
        raise MalformedBatchError(b.index, b.channel, "array value type not set")
    if kind[0] == 1:
        b.value_type = ValueType.DOUBLE_ARRAY
        uniform = _uniform_double_rows(buf, kind[1], kind[2], where)
        b.values = _double_rows(buf, kind[1], kind[2], where) if uniform is None else uniform
    else:
        b.value_type = ValueType.STRING_ARRAY
        sap = common.StringArrayPoints.FromString(buf[kind[1] : kind[2]])
        b.values = [list(p.value) for p in sap.points]


def _split(column: Any, counts: list[int]) -> list[Any]:
    """Consecutive pieces of ``column`` of the given lengths (views, no copies)."""
    out = []
    off = 0
    for c in counts:
        out.append(column[off : off + c])
        off += c
    return out


def _all_timestamps(
    buf: bytes, fast: list[_Batch], malformed: dict[int, MalformedBatchError], r: ColumnReader
) -> list[_Batch]:
    """Decode every batch's fixed-width timestamp runs together; return batches needing upb."""
    slow: list[_Batch] = []
    for width, decoder in ((14, decode_fixed_14), (19, decode_fixed_19)):
        owners = [(b, s, k) for b in fast for s, k, w in b.runs if w == width]
        if not owners:
            continue
        counts = [k for _, _, k in owners]
        n = sum(counts)
        if len(owners) == 1:
            region: Any = memoryview(buf)[owners[0][1] : owners[0][1] + n * width]
        else:
            region = b"".join([buf[s : s + k * width] for _, s, k in owners])
        ok, sec, nanos = decoder(region, n, tag=r.tag, nanos_int64=r.nanos_int64)
        if not ok.all():
            bad = set(np.repeat(np.arange(len(owners)), counts)[~ok].tolist())
            slow += [owners[i][0] for i in sorted(bad)]
        ns = sec * NS + nanos
        # Overflow is checked per batch only when the whole column comes near the int64 limits.
        check = first_out_of_range(sec, nanos) is not None
        check_nanos = r.nanos_checked and _bad_nanos(nanos) is not None
        for (b, _, _), piece, sp, npc in zip(
            owners, _split(ns, counts), _split(sec, counts), _split(nanos, counts), strict=True
        ):
            j = _bad_nanos(npc) if check_nanos else None
            if j is not None and b.index not in malformed:
                malformed[b.index] = MalformedBatchError(b.index, b.channel, _nanos_reason(int(npc[j])))
            j = first_out_of_range(sp, npc) if check else None
            if j is not None and b.index not in malformed:
                malformed[b.index] = MalformedBatchError(
                    b.index,
                    b.channel,
                    f"a timestamp ({int(sp[j])} s, {int(npc[j])} ns) is outside the int64 nanosecond range",
                )
            b.timestamps = piece if b.timestamps is None else np.concatenate([b.timestamps, piece])
    for b in fast:
        if b.timestamps is None:
            b.timestamps = np.empty(0, dtype=np.int64)
    return slow


def _all_numbers(buf: bytes, todo: list[tuple[_Batch, int, list[tuple[int, int]]]]) -> None:
    """Decode every batch's packed doubles, then every batch's packed integers, together."""
    doubles = [(b, spans) for b, field, spans in todo if field == 1]
    if doubles:
        counts = []
        pieces = []
        for b, spans in doubles:
            size = 0
            for s, e in spans:
                if (e - s) % 8:
                    raise DecodeError(
                        f"batches[{b.index}].values: packed doubles of {e - s} bytes, not a multiple of 8"
                    )
                size += e - s
                pieces.append(buf[s:e])
            counts.append(size // 8)
            b.value_type = ValueType.DOUBLE
        raw = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        column = np.frombuffer(raw, dtype="<f8").astype(np.float64)
        for (b, _), piece in zip(doubles, _split(column, counts), strict=True):
            b.values = piece
    ints = [(b, field, spans) for b, field, spans in todo if field in (3, 4)]
    if ints:
        pieces = []
        sizes = []
        for b, _, spans in ints:
            size = 0
            for s, e in spans:
                if s < e and buf[e - 1] >= 0x80:
                    raise DecodeError(f"batches[{b.index}].values: truncated varint at the end of a packed field")
                size += e - s
                pieces.append(buf[s:e])
            sizes.append(size)
        raw = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        region = np.frombuffer(raw, dtype=np.uint8)
        integers = decode_varints(region, "packed integers")
        # Values per batch: varints that end inside its bytes.
        ends = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.array(sizes, dtype=np.int64), out=ends[1:])
        done = np.zeros(region.shape[0] + 1, dtype=np.int64)
        np.cumsum(region < 0x80, out=done[1:])
        counts = np.diff(done[ends]).tolist()
        for (b, field, _), piece in zip(ints, _split(integers, counts), strict=True):
            if field == 3:
                b.value_type, b.values = ValueType.INT64, piece.view(np.int64)
            else:
                b.value_type, b.values = ValueType.UINT64, piece


def _upb_batch(buf: bytes, start: int, stop: int, index: int) -> SeriesBatch:
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


# The gRPC form. Its fallback is looked up when called (tests replace it).
_COLUMN_READER = ColumnReader(
    COLUMN_BATCHES, cw.ColumnBatch.FromString, lambda buf, start, stop, index: _upb_batch(buf, start, stop, index)
)


# ---------------------------------------------------------------------------------------------
# Fast path: every batch laid out as our encoder writes it
# ---------------------------------------------------------------------------------------------

# Key prefixes (the channel and tags fields, bytes up to the timestamp run) already parsed, and
# the key they give. Series repeat across requests, so most batches cost one slice and one
# lookup here instead of a field walk. Bounded like _TAG_CACHE.
_KEY_CACHE: dict[bytes, SeriesKey | None] = {}
_KEY_CACHE_SIZE = 100_000


def _double_tail(k: int, r: ColumnReader) -> bytes:
    """The bytes between ``k`` timestamps and ``k`` packed doubles (``22 Lv 0a Lm 0a Lp`` in a
    ColumnBatch), cached per form."""
    tail = _values_body(ValueType.DOUBLE, 8 * k, k, r.layout)
    if len(r.double_tails) >= _KEY_CACHE_SIZE:
        r.double_tails.clear()
    r.double_tails[k] = tail
    return tail


def _prefix_key(buf: bytes, s: int, p: int) -> SeriesKey | None:
    """The key of a prefix that is exactly one channel field then tag entries, each with a
    one-byte length; None for anything else (the general path decodes that)."""
    if p - s < 2 or buf[s] != 0x0A or buf[s + 1] >= 0x80 or s + 2 + buf[s + 1] > p:
        return None
    try:
        channel = buf[s + 2 : s + 2 + buf[s + 1]].decode("utf-8")
    except UnicodeDecodeError:
        return None
    pos = s + 2 + buf[s + 1]
    tags: dict[str, str] = {}
    while pos < p:
        if buf[pos] != 0x12 or pos + 1 >= p or buf[pos + 1] >= 0x80 or pos + 2 + buf[pos + 1] > p:
            return None
        try:
            entry = map_entry(buf, pos + 2, pos + 2 + buf[pos + 1], "tags")
        except DecodeError:
            return None
        if entry is not None:
            tags[entry[0]] = entry[1]
        pos += 2 + buf[pos + 1]
    return SeriesKey(channel, tuple(sorted(tags.items())) if tags else ())


def _fixed_layout_batches(buf: bytes, spans: list[tuple[int, int]], r: ColumnReader) -> list[SeriesBatch] | None:
    """Decode a request whose every batch is ``channel, tags..., fixed-width timestamps, one
    numeric member with one packed field`` (timestamps and member inside one points message
    where the form has one), with one lean pass per batch and columns in bulk.

    Every structural fact a sequential parse depends on is checked; None (decode with the
    general path, which also names errors) for any batch that differs or anything invalid.
    """
    n = len(spans)
    keys: list[SeriesKey] = []
    runs: list[tuple[int, int]] = []  # (start, entries)
    members: list[int] = []
    data: list[tuple[int, int]] = []
    cache = _KEY_CACHE
    find = buf.find
    run_head = r.run_head
    wrap = r.points_key
    tails = r.double_tails
    min_tail = r.min_double_tail
    values_key = r.values_key
    tag = r.tag
    for s, e in spans:
        # The timestamp run starts at the first "tag 0c" that ends a well-formed prefix (with
        # the points header from there to the batch's end, where the form has one). A hit
        # inside a name cannot parse (the field holding it would run past it): try the next.
        p = s - 1
        for _attempt in range(4):
            p = find(run_head, p + 1, e)
            if p < 0:
                return None
            q = p
            if wrap is not None:
                q -= 1 + len(varint_bytes(e - p))
                if q < s or buf[q] != wrap or not buf.startswith(varint_bytes(e - p), q + 1):
                    continue
            key = cache.get(buf[s:q], _MISSING)
            if key is _MISSING:
                key = _prefix_key(buf, s, q)
                if len(cache) >= _KEY_CACHE_SIZE:
                    cache.clear()
                cache[buf[s:q]] = key
            if key is not None:
                break
        else:
            return None
        # A doubles batch is 14k bytes of timestamps, a header fixed by k, then 8k bytes of
        # values: k follows from the size and the header bytes confirm it (the entries' own
        # bytes are checked in bulk below). Other members walk their header.
        k = (e - p - min_tail) // 22
        tail = tails.get(k) if k > 0 else b""
        if tail is None:
            tail = _double_tail(k, r)
        if k > 0 and 22 * k + len(tail) == e - p and buf.startswith(tail, p + 14 * k):
            keys.append(key)  # type: ignore[arg-type]
            runs.append((p, k))
            members.append(1)
            data.append((e - 8 * k, e))
            continue
        k, width = _fixed_run(buf, p, e, tag)
        q = p + k * width
        # values = 22 L (if the form has it), member = key L, packed field 1 = 0a L: each must
        # end exactly at e.
        if width != 14:
            return None
        if values_key is not None:
            if q + 6 > e or buf[q] != values_key:
                return None
            ln, q = read_small_varint(buf, q + 1, e, "values")
            if q + ln != e:
                return None
        if q + 4 > e:
            return None
        field = r.numeric_keys.get(buf[q])
        if field is None:
            return None
        ln, q = read_small_varint(buf, q + 1, e, "values")
        # Three bytes at least: the packed field's key and a length read_small_varint may read two bytes of.
        if q + ln != e or q + 3 > e or buf[q] != 0x0A:
            return None
        ln, q = read_small_varint(buf, q + 1, e, "values")
        if q + ln != e:
            return None
        keys.append(key)  # type: ignore[arg-type]
        runs.append((p, k))
        members.append(field)
        data.append((q, e))
    counts = [k for _, k in runs]
    total = sum(counts)
    region: Any = (
        memoryview(buf)[runs[0][0] : runs[0][0] + total * 14]
        if n == 1
        else b"".join([buf[p : p + k * 14] for p, k in runs])
    )
    ns = fixed_14_ns(region, total, tag=tag, nanos_checked=r.nanos_checked)
    if ns is None:
        return None
    stamps = _split(ns, counts)
    values: list[Any] = [None] * n
    for field in set(members):
        idx = [i for i in range(n) if members[i] == field] if len(set(members)) > 1 else list(range(n))
        raw = b"".join([buf[data[i][0] : data[i][1]] for i in idx])
        if field == 1:
            if len(raw) != 8 * sum(counts[i] for i in idx):
                return None
            column: Any = np.frombuffer(raw, dtype="<f8").astype(np.float64)
            pieces = _split(column, [counts[i] for i in idx])
        else:
            region8 = np.frombuffer(raw, dtype=np.uint8)
            if region8.shape[0] and region8[-1] >= 0x80:
                return None
            try:
                integers = decode_varints(region8, "packed integers")
            except DecodeError:
                return None
            # Each batch's count: varints ending inside its bytes; must equal its timestamps.
            sizes = np.array([data[i][1] - data[i][0] for i in idx], dtype=np.int64)
            ends = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(sizes, out=ends[1:])
            done = np.zeros(region8.shape[0] + 1, dtype=np.int64)
            np.cumsum(region8 < 0x80, out=done[1:])
            if np.diff(done[ends]).tolist() != [counts[i] for i in idx]:
                return None
            pieces = _split(integers.view(np.int64) if field == 3 else integers, [counts[i] for i in idx])
        for i, piece in zip(idx, pieces, strict=True):
            values[i] = piece
    types = {1: ValueType.DOUBLE, 3: ValueType.INT64, 4: ValueType.UINT64}
    return [SeriesBatch(key, types[f], ts, v) for key, f, ts, v in zip(keys, members, stamps, values, strict=True)]


def decode_request(data: bytes | bytearray | memoryview) -> DecodedRequest:
    """Parse ``WriteColumnBatchesRequest`` bytes into columns.

    Args:
        data: the request's wire bytes, in any valid protobuf encoding.

    Returns:
        The dataset rid, source name (None when absent) and one :class:`SeriesBatch` per
        ``ColumnBatch``, in order. Numeric columns are writable arrays, owned by the result
        (batches of one request may share one underlying buffer).

    Raises:
        MalformedBatchError: a batch without a value type, whose counts disagree, or with a
            timestamp outside int64 nanoseconds; it names the batch index and channel (the
            first such batch).
        google.protobuf.message.DecodeError: bytes that are not a valid request (truncated,
            garbage, invalid UTF-8). Broken bytes anywhere take precedence over a bad batch.
    """
    return decode_columns(data, _COLUMN_READER)


def decode_columns(data: bytes | bytearray | memoryview, reader: ColumnReader) -> DecodedRequest:
    """Parse the request form ``reader`` reads into columns, as :func:`decode_request` does
    (same results, same errors; a form without a source name gives None)."""
    buf = data if isinstance(data, bytes) else bytes(data)
    layout = reader.layout
    # Spans first: the fast path needs nothing else, the general path makes _Batch objects.
    names = {f: n for f, n in ((layout.rid_field, "data_source_rid"), (layout.source_field, "source_name")) if f}
    spans, texts = request_fields(buf, reader.batch_key, layout.batches_field, names)
    rid = texts.get(layout.rid_field, "")
    source = texts.get(layout.source_field) if layout.source_field else None

    if spans:
        quick = _fixed_layout_batches(buf, spans, reader)
        if quick is not None:
            return DecodedRequest(rid, source, quick)
    batches = [_Batch(i, span) for i, span in enumerate(spans)]

    # Walk every batch (structure only), then decode columns of all batches together.
    malformed: dict[int, MalformedBatchError] = {}
    slow: list[_Batch] = []
    fast: list[_Batch] = []
    numbers: list[tuple[_Batch, int, list[tuple[int, int]]]] = []
    for b in batches:
        try:
            member = _walk_batch(buf, b, reader)
            if member is None:
                malformed[b.index] = MalformedBatchError(b.index, b.channel, layout.unset_reason)
            elif member[0] in (1, 3, 4):
                numbers.append((b, member[0], member[1]))
            else:
                _batch_values(buf, b, member[0], *member[1][0])
        except UpbFallback:
            slow.append(b)
            continue
        except MalformedBatchError as exc:
            malformed[b.index] = exc
        fast.append(b)
    _all_numbers(buf, numbers)
    again = _all_timestamps(buf, fast, malformed, reader)
    slow += again

    out: list[SeriesBatch] = [None] * len(batches)  # type: ignore[list-item]
    redo = {id(b) for b in again}
    for b in fast:
        if id(b) in redo or b.index in malformed:
            continue
        if len(b.values) != b.timestamps.shape[0]:
            malformed[b.index] = MalformedBatchError(
                b.index, b.channel, f"{b.timestamps.shape[0]} timestamps but {len(b.values)} values"
            )
            continue
        assert b.value_type is not None
        tags = tuple(sorted(b.tags.items())) if b.tags else ()
        out[b.index] = SeriesBatch(SeriesKey(b.channel, tags), b.value_type, b.timestamps, b.values)
    for b in sorted(slow, key=lambda x: x.index):
        malformed.pop(b.index, None)
        try:
            out[b.index] = reader.upb_batch(buf, b.span[0], b.span[1], b.index)
        except MalformedBatchError as exc:
            malformed[b.index] = exc
    if malformed:
        first = min(malformed)
        # Broken bytes win over a bad batch, as with upb: re-parse the bad batches' bytes.
        for index in sorted(malformed):
            s, e = batches[index].span
            reader.parse_batch(buf[s:e])
        raise malformed[first]
    return DecodedRequest(rid, source, out)


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
