"""The local server's on-disk format: where a dataset's files live and what a commit file holds.

Layout under the data dir::

    DIR/<dataset_rid>/commits/<seq>-<tag>.parquet   one file per accepted request
    DIR/<dataset_rid>/staging/<random>.parquet      a commit being written; never read

(rids over 200 characters, beyond file name limits, live in ``DIR/~h-<sha256 of rid>/`` with a
``dataset.json`` naming the rid.)

A commit is one Parquet file: columns ``channel``, ``tags`` (sorted-key JSON), ``timestamp``
(int64 ns) and one ``value_<type>`` column per value type in the request (rows grouped by type,
null outside their type's rows), and the manifest (series, counts, bounds, idempotency key) as
JSON in the file's key-value metadata, so the index is rebuilt from footers alone. DuckDB reads
the data directly: ``SELECT channel, timestamp, value_double FROM
read_parquet('DIR/<rid>/commits/*.parquet', union_by_name=true) WHERE value_double IS NOT NULL``.

Encoding (a request's batches to a commit's table, manifest and file bytes) and decoding (a
manifest back to index entries, a value type to its column) live together so they cannot drift
apart; nothing here writes a file or takes a lock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from beam_nominal._wire.batch import SeriesBatch, StringRows
from beam_nominal.model import SeriesKey, ValueType

_MANIFEST_KEY = "beam_nominal.manifest"
_COMMITS = "commits"
_STAGING = "staging"
_FORMAT = 2
_DATASET_FILE = "dataset.json"
# Directory names of rids too long for a file name (~ is not a rid character, so no clash).
_HASHED_PREFIX = "~h-"
_MAX_DIR_NAME = 200
_COMMIT_RE = re.compile(r"(\d{12})-[0-9a-z]+\.parquet")

_ARROW_TYPES: dict[ValueType, pa.DataType] = {
    ValueType.DOUBLE: pa.float64(),
    ValueType.INT64: pa.int64(),
    ValueType.UINT64: pa.uint64(),
    ValueType.STRING: pa.string(),
    ValueType.STRUCT: pa.string(),
    ValueType.DOUBLE_ARRAY: pa.list_(pa.float64()),
    ValueType.STRING_ARRAY: pa.list_(pa.string()),
}

# Dictionary-encoding only the low-cardinality name columns, DELTA_BINARY_PACKED timestamps, PLAIN
# values, no compression and statistics only on the timestamp column: faster to write than
# pyarrow's defaults, and compact (delta-packed timestamps; docs/benchmarks.md, "Local server").
_PARQUET_OPTIONS: dict[str, Any] = {
    "use_dictionary": ["channel", "tags"],
    "column_encoding": {"timestamp": "DELTA_BINARY_PACKED"},
    "compression": "none",
    "write_statistics": ["timestamp"],
}


def _dir_name(rid: str) -> str:
    """The directory of a dataset: its rid, or a digest where the rid exceeds file name limits."""
    if len(rid) <= _MAX_DIR_NAME:
        return rid
    return _HASHED_PREFIX + hashlib.sha256(rid.encode("utf-8")).hexdigest()


def _value_column(vt: ValueType) -> str:
    return f"value_{vt.value}"


def _tags_json(tags: tuple[tuple[str, str], ...]) -> str:
    # Tags are already sorted in a SeriesKey, so equal tag sets give equal text.
    return json.dumps(dict(tags), ensure_ascii=False, separators=(",", ":"))


# One series of one commit: key, type, count, min and max timestamp, first row in its file.
_Entry = tuple[SeriesKey, ValueType, int, int, int, int]


def _entries(manifest: Mapping[str, Any]) -> list[_Entry]:
    """The manifest's column-wise series table as entries (rows of a commit are contiguous per
    series, in manifest order, so offsets are the running sum of counts)."""
    tags = [tuple(sorted(t.items())) for t in manifest["tag_sets"]]
    series = manifest["series"]
    counts = series["count"]
    offsets = itertools.accumulate(counts, initial=0)
    types = itertools.chain.from_iterable(itertools.repeat(ValueType(vt), n) for vt, n in manifest["types"])
    return [
        (SeriesKey(c, tags[t]), vt, n, lo, hi, off)
        for c, t, vt, n, lo, hi, off in zip(
            series["channel"], series["tags"], types, counts, series["min"], series["max"], offsets, strict=False
        )
    ]


# ---------------------------------------------------------------------------------------------
# Building a commit
# ---------------------------------------------------------------------------------------------


def _value_array(vt: ValueType, batches: Sequence[SeriesBatch]) -> pa.Array:
    values = [b.values for b in batches]
    dtype = vt.numpy_dtype
    if dtype is not None:
        # Per-part dtype first: concatenating int64 with uint64 parts would go through float64.
        column: npt.NDArray[Any]
        if len(values) == 1:
            # A deep request's one part is used as is: the table only reads it until the file is written.
            column = np.asarray(values[0], dtype=dtype)
        else:
            # Each part cast straight to the column's dtype (unsafe, as asarray would): int64 and
            # uint64 parts must not meet in a common float64 type.
            column = np.concatenate(values, dtype=dtype, casting="unsafe") if values else np.empty(0, dtype)
        return pa.array(column, type=_ARROW_TYPES[vt])
    if vt in (ValueType.STRING, ValueType.STRUCT):
        return pa.array(list(itertools.chain.from_iterable(values)), type=pa.string())
    if vt is ValueType.STRING_ARRAY:
        # The row decoder's columns as they are, upb's lists (a series it left to upb) as lists;
        # runs of each kind in request order, joined.
        pieces = [
            _string_rows_array(list(run)) if columns else _rows_array(vt, list(run))
            for columns, run in itertools.groupby(values, key=lambda v: isinstance(v, StringRows))
        ]
        return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces or [_rows_array(vt, [])])
    return _rows_array(vt, values)


def _rows_array(vt: ValueType, values: Sequence[Any]) -> pa.Array:
    """A ``list<double>`` or ``list<string>`` array of parts that are sequences of rows."""
    rows: list[Any] = list(itertools.chain.from_iterable(values))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, rows), dtype=np.int32, count=len(rows)), out=offsets[1:])
    flat: pa.Array
    if vt is ValueType.DOUBLE_ARRAY:
        flat_values = np.concatenate(rows).astype(np.float64, copy=False) if rows else np.empty(0, np.float64)
        flat = pa.array(flat_values, type=pa.float64())
    else:
        flat = pa.array(list(itertools.chain.from_iterable(rows)), type=pa.string())
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), flat)


def _string_rows_array(parts: list[StringRows]) -> pa.Array:
    """One ``list<string>`` array of decoded string rows, from their columns: no str is made.

    The series of one decoded region are contiguous views of the same columns, so they are
    taken as one run each; the runs' columns are joined with their offsets rebased.
    """
    runs: list[list[Any]] = []  # [data, offsets, rows, lo, hi]
    for p in parts:
        last = runs[-1] if runs else None
        if last is not None and last[2] is p.rows and last[4] == p.lo:
            last[4] = p.hi
        else:
            runs.append([p.data, p.offsets, p.rows, p.lo, p.hi])
    list_offsets: list[npt.NDArray[np.int64]] = []
    string_offsets: list[npt.NDArray[np.int64]] = []
    data: list[npt.NDArray[np.uint8]] = []
    strings = nbytes = 0
    for run_data, offsets, rows, lo, hi in runs:
        first, last_row = int(rows[lo]), int(rows[hi])
        o = offsets[first : last_row + 1]
        list_offsets.append(rows[lo:hi] - first + strings)
        string_offsets.append(o[:-1] - o[0] + nbytes)
        data.append(run_data[int(o[0]) : int(o[-1])])
        strings += last_row - first
        nbytes += int(o[-1] - o[0])
    if nbytes >= 2**31:
        raise ValueError(f"string array values of {nbytes} bytes in one request: over Arrow's 2 GiB of a string column")
    list_offsets.append(np.array([strings], dtype=np.int64))
    string_offsets.append(np.array([nbytes], dtype=np.int64))
    flat = pa.StringArray.from_buffers(
        strings,
        pa.py_buffer(np.concatenate(string_offsets).astype(np.int32)),
        pa.py_buffer(np.concatenate(data) if len(data) > 1 else data[0]),
    )
    return pa.ListArray.from_arrays(pa.array(np.concatenate(list_offsets).astype(np.int32), type=pa.int32()), flat)


def points_digest(batches: Sequence[SeriesBatch]) -> str:
    """A digest of a request's points: what its commit file holds, in the file's order.

    Of the points, not of the bytes, so a retry in another wire form or content encoding matches,
    and a commit file read back (:func:`_commit_batches`) digests as the request it was written
    from did: series in the commit's order (grouped by value type, first-seen type first, request
    order within a type), empty batches left out as the commit leaves them out. Numeric values by
    their bytes, so NaN payloads and -0.0 count; the rid and the source name are not points.
    """
    by_type: dict[ValueType, list[SeriesBatch]] = {}
    for b in batches:
        if len(b.timestamps):
            by_type.setdefault(b.value_type, []).append(b)
    h = hashlib.sha256()
    for vt, group in by_type.items():
        h.update(json.dumps([vt.value, [[b.key.channel, b.key.tags] for b in group]]).encode("ascii"))
        stamps = [b.timestamps for b in group]
        h.update(np.fromiter(map(len, stamps), dtype="<i8", count=len(stamps)).data)
        h.update(np.concatenate(stamps, dtype="<i8", casting="unsafe").data)
        parts = [b.values for b in group]
        if vt.numpy_dtype is not None:
            h.update(
                np.concatenate(
                    [np.asarray(p) for p in parts], dtype=vt.numpy_dtype.newbyteorder("<"), casting="unsafe"
                ).data
            )
        elif vt is ValueType.DOUBLE_ARRAY:
            # A list of rows and a (rows, width) matrix of the same rows digest alike.
            rows = [np.ravel(r) for p in parts for r in p]
            h.update(np.fromiter(map(len, rows), dtype="<i8", count=len(rows)).data)
            if rows:
                h.update(np.concatenate(rows, dtype="<f8", casting="unsafe").data)
        else:
            # JSON's quoting keeps item boundaries; ensure_ascii escapes even lone surrogates.
            items = [[list(r) for r in p] for p in parts] if vt is ValueType.STRING_ARRAY else [list(p) for p in parts]
            h.update(json.dumps(items).encode("ascii"))
    return h.hexdigest()


def _commit_batches(table: pa.Table, entries: Sequence[_Entry]) -> list[SeriesBatch]:
    """A commit file's rows (``timestamp`` and every ``value_<type>`` column) as the batches of
    its series, in file order: the request it was written from, less its empty batches."""
    ts = table.column("timestamp").to_numpy()
    out = []
    for skey, vt, count, _lo, _hi, offset in entries:
        column = table.column(_value_column(vt)).slice(offset, count)
        values: Any
        if vt.numpy_dtype is not None:
            values = column.to_numpy()
        elif vt is ValueType.DOUBLE_ARRAY:
            values = [np.array(r, dtype=np.float64) for r in column.to_pylist()]
        else:
            values = column.to_pylist()
        out.append(SeriesBatch(skey, vt, ts[offset : offset + count], values))
    return out


def _codes(items: list[Any]) -> tuple[list[Any], npt.NDArray[np.int32]]:
    """Distinct items in first-seen order, and each item's index among them."""
    distinct = list(dict.fromkeys(items))
    index = {item: i for i, item in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, items), dtype=np.int32, count=len(items))


def _build_commit(batches: Sequence[SeriesBatch], meta: dict[str, Any]) -> tuple[pa.Table, list[_Entry], bytes]:
    """One commit's table (all series, all types), its series entries and its manifest.

    Requests carry thousands of short series, so the per-series work is a few passes of C-level
    ``map``/``zip`` over the batches; everything per point is one numpy or Arrow operation over
    the whole request: the name columns are dictionary arrays built from per-series codes.
    """
    by_type: dict[ValueType, list[SeriesBatch]] = {}
    for b in batches:
        if len(b.timestamps):
            by_type.setdefault(b.value_type, []).append(b)
    group_list = list(by_type.items())
    ordered = group_list[0][1] if len(group_list) == 1 else [b for _, g in group_list for b in g]
    keys: list[SeriesKey] = [b.key for b in ordered]
    stamps = [b.timestamps for b in ordered]
    counts = np.fromiter(map(len, stamps), dtype=np.int64, count=len(ordered))
    starts = np.zeros(len(ordered), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    ts = (stamps[0] if len(stamps) == 1 else np.concatenate(stamps)).astype(np.int64, copy=False)
    channels, chan_codes = _codes([k.channel for k in keys])
    tag_sets, tag_codes = _codes([k.tags for k in keys])
    columns: dict[str, pa.Array] = {
        "channel": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(chan_codes, counts)), pa.array(channels, type=pa.string())
        ),
        "tags": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(tag_codes, counts)), pa.array([_tags_json(t) for t in tag_sets], type=pa.string())
        ),
        "timestamp": pa.array(ts, type=pa.int64()),
    }
    rows = int(ts.shape[0])
    first = 0
    for vt, group in group_list:
        values = _value_array(vt, group)
        n = len(values)
        if len(group_list) > 1:
            # Other types' rows are null in this type's column.
            values = pa.concat_arrays(
                [pa.nulls(first, _ARROW_TYPES[vt]), values, pa.nulls(rows - first - n, _ARROW_TYPES[vt])]
            )
        columns[_value_column(vt)] = values
        first += n
    mins = np.minimum.reduceat(ts, starts).tolist() if rows else []
    maxs = np.maximum.reduceat(ts, starts).tolist() if rows else []
    count_list = counts.tolist()
    type_runs = [[vt.value, len(g)] for vt, g in group_list]
    entries = list(
        zip(
            keys,
            itertools.chain.from_iterable(itertools.repeat(vt, len(g)) for vt, g in group_list),
            count_list,
            mins,
            maxs,
            starts.tolist(),
            strict=False,
        )
    )
    # Column-wise: one JSON list per field is faster to write and read than one object per
    # series. Offsets are not stored: they are the running sum of counts.
    manifest = {
        **meta,
        "format": _FORMAT,
        "tag_sets": [dict(t) for t in tag_sets],
        "types": type_runs,
        "series": {
            "channel": [k.channel for k in keys],
            "tags": tag_codes.tolist(),
            "count": count_list,
            "min": mins,
            "max": maxs,
        },
    }
    body = json.dumps(manifest, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return pa.table(columns), entries, body


# Per-thread output buffers, reused: writing a commit into a fresh buffer (or straight into a new
# file through Arrow's stream) costs more in first-touch page faults than the encoding.
_scratch = threading.local()
# Buffers above this are not kept for the next request (memory per worker thread).
_SCRATCH_KEEP = 64 << 20


def _parquet_bytes(table: pa.Table, manifest: bytes) -> memoryview:
    """The commit file's bytes, encoded into this thread's reusable buffer (valid until the next
    call on this thread)."""
    need = 2 * table.nbytes + 2 * len(manifest) + (1 << 20)
    for attempt in range(2):
        buf: npt.NDArray[np.uint8] | None = getattr(_scratch, "buf", None)
        if buf is None or buf.shape[0] < need:
            buf = np.ones(need, dtype=np.uint8)  # ones, not empty: touch every page once, now
            if need <= _SCRATCH_KEEP:
                _scratch.buf = buf
        sink = pa.FixedSizeBufferWriter(pa.py_buffer(buf))
        try:
            with pq.ParquetWriter(sink, table.schema, **_PARQUET_OPTIONS) as writer:
                writer.write_table(table, row_group_size=max(1, table.num_rows))
                writer.add_key_value_metadata({_MANIFEST_KEY: manifest.decode("utf-8")})
        except OSError:
            # The only OSError a memory sink raises: the estimate was short. Once more, larger.
            if attempt:
                raise
            need *= 4
            continue
        return buf.data[: sink.tell()]
    raise AssertionError("unreachable")
