"""Parquet storage of the local server: durable atomic commits, an idempotency ledger, read-back.

Layout under the data dir::

    DIR/<dataset_rid>/commits/<seq>-<tag>.parquet   one file per accepted request
    DIR/<dataset_rid>/staging/<random>.parquet      a commit being written; never read

(rids over 200 characters, beyond file name limits, live in ``DIR/~h-<sha256 of rid>/`` with a
``dataset.json`` naming the rid.)

A commit is one Parquet file: columns ``channel``, ``tags`` (sorted-key JSON), ``timestamp``
(int64 ns) and one ``value_<type>`` column per value type in the request (rows grouped by type,
null outside their type's rows), and the manifest (series, counts, bounds, idempotency key) as
JSON in the file's key-value metadata, so the index is rebuilt from footers alone. The file is
written and fsynced in ``staging``, then published by one ``rename`` into ``commits`` and an fsync
of that directory (shared by the commits renamed before it started). A request is therefore stored
entirely or not at all, and its idempotency key is durable exactly when its data is. Leftovers
in ``staging`` (a crash mid-write) are removed on start. DuckDB reads the data directly:
``SELECT channel, timestamp, value_double FROM read_parquet('DIR/<rid>/commits/*.parquet',
union_by_name=true) WHERE value_double IS NOT NULL``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import itertools
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from beam_nominal._wire.batch import MalformedBatchError, SeriesBatch
from beam_nominal.model import MAX_NAME_CHARS, SeriesKey, ValueType

__all__ = ["InvalidRequestError", "LocalStore", "SeriesInfo", "check_dataset_rid"]

_MANIFEST_KEY = "beam_nominal.manifest"
_COMMITS = "commits"
_STAGING = "staging"
_FORMAT = 2
_DATASET_FILE = "dataset.json"
# Directory names of rids too long for a file name (~ is not a rid character, so no clash).
_HASHED_PREFIX = "~h-"
_MAX_DIR_NAME = 200
_RID_RE = re.compile(r"[A-Za-z0-9._:-]+")
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

# Measured on 200k-row doubles (benchmarks/bench_server.py has the end-to-end figures): pyarrow's
# defaults write ~6 M points/s; dictionary-encoding only the low-cardinality name columns,
# DELTA_BINARY_PACKED timestamps, PLAIN values, no compression and statistics only on the
# timestamp column write ~30 M points/s at ~8 bytes per double point.
_PARQUET_OPTIONS: dict[str, Any] = {
    "use_dictionary": ["channel", "tags"],
    "column_encoding": {"timestamp": "DELTA_BINARY_PACKED"},
    "compression": "none",
    "write_statistics": ["timestamp"],
}


class StoppingError(RuntimeError):
    """The server is stopping: a write that arrives now is refused, nothing of it stored."""


class InvalidRequestError(ValueError):
    """A request the store refuses as a whole (bad dataset rid); nothing of it is stored."""


@dataclasses.dataclass(frozen=True)
class SeriesInfo:
    """What the store holds for one series of one dataset."""

    dataset_rid: str
    channel: str
    tags: dict[str, str]
    value_type: ValueType
    count: int
    min_timestamp_ns: int
    max_timestamp_ns: int


def check_dataset_rid(rid: str) -> None:
    """Refuse a dataset rid that cannot safely name a directory.

    Raises:
        InvalidRequestError: empty, over 1024 characters, characters outside ``[A-Za-z0-9._:-]``
            (so no path separators), or ``.`` / ``..``.
    """
    if not rid:
        raise InvalidRequestError("data_source_rid is empty")
    if len(rid) > MAX_NAME_CHARS:
        raise InvalidRequestError(f"data_source_rid is {len(rid)} characters, over {MAX_NAME_CHARS}")
    if not _RID_RE.fullmatch(rid) or rid in (".", ".."):
        raise InvalidRequestError(
            f"data_source_rid {rid[:200]!r} is not a safe identifier "
            "(allowed: letters, digits, '._:-'; not '.' or '..')"
        )


def _dir_name(rid: str) -> str:
    """The directory of a dataset: its rid, or a digest where the rid exceeds file name limits."""
    if len(rid) <= _MAX_DIR_NAME:
        return rid
    return _HASHED_PREFIX + hashlib.sha256(rid.encode("utf-8")).hexdigest()


def _check_names(index: int, key: SeriesKey) -> None:
    channel = key.channel
    if not channel:
        raise MalformedBatchError(index, channel, "channel is empty")
    if len(channel) > MAX_NAME_CHARS:
        raise MalformedBatchError(index, channel, f"channel is {len(channel)} characters, over {MAX_NAME_CHARS}")
    for k, v in key.tags:
        if len(k) > MAX_NAME_CHARS:
            raise MalformedBatchError(index, channel, f"tag key {k[:40]!r}... is over {MAX_NAME_CHARS} characters")
        if len(v) > MAX_NAME_CHARS:
            raise MalformedBatchError(
                index, channel, f"value of tag {k[:40]!r} is {len(v)} characters, over {MAX_NAME_CHARS}"
            )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tags_json(tags: tuple[tuple[str, str], ...]) -> str:
    # Tags are already sorted in a SeriesKey, so equal tag sets give equal text.
    return json.dumps(dict(tags), ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# In-memory index, rebuilt from manifests
# ---------------------------------------------------------------------------------------------

# Rows ``[offset, offset + count)`` of commit file ``commit`` (sequence number ``seq``) belong to
# one series: (seq, commit, offset, count). Plain tuples: thousands are made per commit.
_Segment = tuple[int, str, int, int]


@dataclasses.dataclass(slots=True)
class _Series:
    value_type: ValueType
    count: int = 0
    min_ts: int = 0
    max_ts: int = 0
    segments: list[_Segment] = dataclasses.field(default_factory=list)


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


class _GroupSync:
    """One fsync of a directory for every rename that completed before it started.

    A writer joins the open round after its rename and waits for that round's fsync. The first
    waiter to find no fsync running runs it for the whole round; renames landing meanwhile join
    the next round. So with requests in flight, one directory fsync acknowledges several
    commits, and each reply still follows a durable rename of its own.
    """

    class _Round:
        __slots__ = ("done", "error")

        def __init__(self) -> None:
            self.done = False
            self.error: OSError | None = None

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._open = self._Round()
        self._running = False

    def join(self) -> _GroupSync._Round:
        """Call after the rename: the round whose fsync makes it durable."""
        with self._cond:
            return self._open

    def wait(self, mine: _GroupSync._Round) -> None:
        """Return once ``mine``'s fsync succeeded.

        Raises:
            OSError: that fsync failed (every writer of the round gets the error).
        """
        with self._cond:
            while not mine.done and self._running:
                self._cond.wait()
            if not mine.done:
                # No fsync running and ours not done: ours is the open round; run it.
                assert mine is self._open
                self._open = self._Round()
                self._running = True
                lead = True
            else:
                lead = False
        if lead:
            synced = False
            try:
                _fsync_dir(self.path)
                synced = True
            except OSError as exc:
                mine.error = exc
            finally:
                if not synced and mine.error is None:
                    # Interrupted by something else: the others must not take it for success.
                    mine.error = OSError(errno.EIO, "directory fsync did not complete")
                with self._cond:
                    mine.done = True
                    self._running = False
                    self._cond.notify_all()
        if mine.error is not None:
            raise mine.error


class _Dataset:
    """Committed state of one dataset plus the reservations of writes in progress.

    ``cond`` guards everything here. Writers pin new series types and claim idempotency keys under
    it, write their files without it, and publish under it again.
    """

    def __init__(self, rid: str, root: Path) -> None:
        self.rid = rid
        self.root = root
        self.cond = threading.Condition()
        self.series: dict[SeriesKey, _Series] = {}
        self.keys: set[str] = set()
        self.commits: set[str] = set()
        self.next_seq = 1
        # Writes in progress: series type pins (type, number of writers) and idempotency keys.
        self.pending_types: dict[SeriesKey, tuple[ValueType, int]] = {}
        self.pending_keys: set[str] = set()
        # Set once the writer has made sure ``commits`` and ``staging`` exist.
        self.ready = False
        self.sync = _GroupSync(root / _COMMITS)

    def load_commit(self, name: str) -> None:
        """Fold one committed file into the index (caller holds ``cond``)."""
        m = _COMMIT_RE.fullmatch(name)
        if m is None or name in self.commits:
            return
        try:
            # Footer only: the manifest is in the key-value metadata.
            meta = pq.read_metadata(self.root / _COMMITS / name).metadata or {}
            manifest = json.loads(meta[_MANIFEST_KEY.encode()])
            entries = _entries(manifest)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            # A commit file is only ever published complete; an unreadable one was damaged
            # outside the server. Skipping it keeps the rest of the dataset readable.
            return
        self.apply(name, int(m.group(1)), manifest.get("idempotency_key"), entries)

    def apply(self, name: str, seq: int, key: str | None, entries: Sequence[_Entry]) -> None:
        """Index one commit (caller holds ``cond``); a commit already indexed is left alone."""
        if name in self.commits:
            # A refresh can index a commit between its rename and its writer's own apply.
            return
        self.commits.add(name)
        self.next_seq = max(self.next_seq, seq + 1)
        if key is not None:
            self.keys.add(key)
        series = self.series
        for skey, vt, count, lo, hi, offset in entries:
            state = series.get(skey)
            if state is None:
                series[skey] = _Series(vt, count, lo, hi, [(seq, name, offset, count)])
            else:
                state.count += count
                if lo < state.min_ts:
                    state.min_ts = lo
                if hi > state.max_ts:
                    state.max_ts = hi
                state.segments.append((seq, name, offset, count))

    def refresh(self) -> None:
        """Load commits published since the last look (by this or another process)."""
        try:
            names = os.listdir(self.root / _COMMITS)
        except FileNotFoundError:
            return
        with self.cond:
            new = [n for n in names if n not in self.commits]
            for name in sorted(new):
                self.load_commit(name)

    def info(self, key: SeriesKey, state: _Series) -> SeriesInfo:
        return SeriesInfo(
            self.rid, key.channel, dict(key.tags), state.value_type, state.count, state.min_ts, state.max_ts
        )


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


def _codes(items: list[Any]) -> tuple[list[Any], npt.NDArray[np.int32]]:
    """Distinct items in first-seen order, and each item's index among them."""
    distinct = list(dict.fromkeys(items))
    index = {item: i for i, item in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, items), dtype=np.int32, count=len(items))


def _value_column(vt: ValueType) -> str:
    return f"value_{vt.value}"


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
    # Column-wise: one JSON list per field is several times faster to write and read than one
    # object per series. Offsets are not stored: they are the running sum of counts.
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


def _write_durably(path: Path, write: Any) -> None:
    with open(path, "xb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


# Per-thread output buffers, reused. On this kind of VM first-touch page faults dominate: encoding
# a 170k-row commit into a fresh growing buffer (or straight into a new file through Arrow's
# stream) took ~8 ms, into an already-touched buffer ~3.3 ms, plus ~0.3 ms for one write(2).
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


def _write_commit_file(path: Path, table: pa.Table, manifest: bytes) -> None:
    """Write one commit file and make its bytes durable (fdatasync: also flushes the size and
    block map, what reading the data needs; the name is made durable by the rename and the
    directory fsync)."""
    data = _parquet_bytes(table, manifest)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fdatasync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Public read API and the server's write path
# ---------------------------------------------------------------------------------------------


class LocalStore:
    """Read access to a local server's data directory (also while a server writes to it).

    Every call first picks up commits published since the previous call, so a store opened next
    to a running server sees everything it has acknowledged.

    Args:
        data_dir: the directory given to ``beam-nominal serve --data-dir``.
    """

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self._lock = threading.Lock()
        self._datasets: dict[str, _Dataset] = {}

    def _dataset(self, rid: str, create: bool = False) -> _Dataset | None:
        check_dataset_rid(rid)
        with self._lock:
            ds = self._datasets.get(rid)
            if ds is None:
                root = self.data_dir / _dir_name(rid)
                if not create and not (root / _COMMITS).is_dir():
                    return None
                ds = self._datasets[rid] = _Dataset(rid, root)
        return ds

    def _dataset_dirs(self) -> list[str]:
        try:
            names = os.listdir(self.data_dir)
        except FileNotFoundError:
            return []
        rids = []
        for n in names:
            if not (self.data_dir / n / _COMMITS).is_dir():
                continue
            if n.startswith(_HASHED_PREFIX):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    rids.append(json.loads((self.data_dir / n / _DATASET_FILE).read_text("utf-8"))["rid"])
            elif _RID_RE.fullmatch(n) and n not in (".", ".."):
                rids.append(n)
        return sorted(rids)

    def list_datasets(self) -> list[str]:
        """Rids of the datasets that hold at least one commit, sorted."""
        out = []
        for name in self._dataset_dirs():
            ds = self._dataset(name)
            assert ds is not None
            ds.refresh()
            if ds.commits:
                out.append(name)
        return out

    def list_series(self, dataset_rid: str) -> list[SeriesInfo]:
        """Every series of a dataset, sorted by channel then tags; empty for an unknown dataset.

        Raises:
            InvalidRequestError: the rid is not a safe identifier.
        """
        ds = self._dataset(dataset_rid)
        if ds is None:
            return []
        ds.refresh()
        with ds.cond:
            items = sorted(ds.series.items(), key=lambda kv: kv[0])
            return [ds.info(k, s) for k, s in items]

    def series_info(self, dataset_rid: str, channel: str, tags: Mapping[str, str] | None = None) -> SeriesInfo:
        """The summary of one series.

        Raises:
            KeyError: no such series.
        """
        ds, key, state = self._find(dataset_rid, channel, tags)
        with ds.cond:
            return ds.info(key, state)

    def _find(
        self, dataset_rid: str, channel: str, tags: Mapping[str, str] | None
    ) -> tuple[_Dataset, SeriesKey, _Series]:
        key = SeriesKey(channel, tuple(sorted((tags or {}).items())))
        ds = self._dataset(dataset_rid)
        if ds is not None:
            ds.refresh()
            with ds.cond:
                state = ds.series.get(key)
            if state is not None:
                return ds, key, state
        raise KeyError(f"dataset {dataset_rid!r} has no series {key.describe()}")

    def read(self, dataset_rid: str, channel: str, tags: Mapping[str, str] | None = None) -> pa.Table:
        """All points of one series as a table ``timestamp`` (int64 ns), ``value``.

        Rows are in timestamp order; equal timestamps keep their arrival order. ``value`` is
        float64, int64, uint64, string, list<float64>, list<string>, or string (struct JSON).

        Raises:
            KeyError: no such series.
            InvalidRequestError: the rid is not a safe identifier.
        """
        ds, _key, state = self._find(dataset_rid, channel, tags)
        with ds.cond:
            vt = state.value_type
            segments = sorted(state.segments)
        parts: list[pa.Table] = []
        for commit, segs in itertools.groupby(segments, key=lambda s: s[1]):
            table = _read_file(ds, commit, vt)
            parts.extend(table.slice(offset, count) for _seq, _c, offset, count in segs)
        return _assemble(parts, vt)

    def read_all(self, dataset_rid: str) -> dict[SeriesKey, pa.Table]:
        """Every series of a dataset, as :meth:`read` gives each, reading every file once.

        Much faster than one :meth:`read` per series when a dataset has many series and commits.

        Raises:
            InvalidRequestError: the rid is not a safe identifier.
        """
        ds = self._dataset(dataset_rid)
        if ds is None:
            return {}
        ds.refresh()
        with ds.cond:
            items = [(k, s.value_type, sorted(s.segments)) for k, s in ds.series.items()]
        files: dict[tuple[str, ValueType], pa.Table] = {}
        out: dict[SeriesKey, pa.Table] = {}
        for key, vt, segments in sorted(items, key=lambda item: item[0]):
            parts = []
            for _seq, commit, offset, count in segments:
                table = files.get((commit, vt))
                if table is None:
                    table = files[(commit, vt)] = _read_file(ds, commit, vt)
                parts.append(table.slice(offset, count))
            out[key] = _assemble(parts, vt)
        return out


def _read_file(ds: _Dataset, commit: str, vt: ValueType) -> pa.Table:
    path = ds.root / _COMMITS / commit
    table = pq.ParquetFile(path, memory_map=True).read(columns=["timestamp", _value_column(vt)])
    return table.rename_columns(["timestamp", "value"])


def _assemble(parts: list[pa.Table], vt: ValueType) -> pa.Table:
    """Concatenate one series' slices (in arrival order) and sort stably by timestamp."""
    schema = pa.schema([("timestamp", pa.int64()), ("value", _ARROW_TYPES[vt])])
    if not parts:
        return schema.empty_table()
    out = pa.concat_tables(parts).cast(schema)
    ts = out.column("timestamp").to_numpy()
    if ts.size > 1 and bool((ts[1:] < ts[:-1]).any()):
        out = out.take(pa.array(np.argsort(ts, kind="stable")))
    return out.combine_chunks()


class _Committer:
    """The server's write path over a :class:`LocalStore`: validate, stage, publish."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.data_dir = store.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # gRPC's stop() cancels calls but cannot stop their handler threads. Without this gate a
        # handler could still publish after stop() returned, while a new server on the same
        # directory (which never saw that key) accepts the client's retry: one request, two copies.
        self._gate = threading.Condition()
        self._active = 0
        self._closed = False
        self._recover()

    def close(self, timeout: float | None = 30.0) -> bool:
        """Refuse new commits and wait for those in progress; True if none is left running."""
        with self._gate:
            self._closed = True
            return self._gate.wait_for(lambda: self._active == 0, timeout)

    @contextlib.contextmanager
    def _admitted(self) -> Iterator[None]:
        with self._gate:
            if self._closed:
                raise StoppingError("the server is stopping; nothing of this request was stored")
            self._active += 1
        try:
            yield
        finally:
            with self._gate:
                self._active -= 1
                if self._active == 0:
                    self._gate.notify_all()

    def _recover(self) -> None:
        for rid in self.store._dataset_dirs():
            staging = self.data_dir / _dir_name(rid) / _STAGING
            if staging.is_dir():
                # A crash left a half-written commit: it was never acknowledged.
                for leftover in staging.iterdir():
                    if leftover.is_dir():
                        shutil.rmtree(leftover, ignore_errors=True)
                    else:
                        leftover.unlink(missing_ok=True)
            ds = self.store._dataset(rid, create=True)
            assert ds is not None
            ds.refresh()

    def commit(
        self,
        rid: str,
        batches: Sequence[SeriesBatch],
        idempotency_key: str | None,
        source_name: str | None = None,
    ) -> bool:
        """Store one request atomically; returns False when its idempotency key was already stored.

        Raises:
            InvalidRequestError: bad rid.
            StoppingError: the server is stopping (retryable: nothing was stored).
            MalformedBatchError: a name too long, or a value type conflicting with the stored or
                another batch's type; names the batch index and channel.
        """
        with self._admitted():
            return self._commit(rid, batches, idempotency_key, source_name)

    def _commit(
        self,
        rid: str,
        batches: Sequence[SeriesBatch],
        idempotency_key: str | None,
        source_name: str | None,
    ) -> bool:
        check_dataset_rid(rid)
        types = _validate(batches)
        if not any(map(len, batches)):
            # Nothing to store, and a type is pinned by a first value; but an empty batch that
            # contradicts a stored type is still an error.
            existing = self.store._dataset(rid)
            if existing is not None:
                with existing.cond:
                    self._busy(existing, types, None, batches)
            return True
        ds = self.store._dataset(rid, create=True)
        assert ds is not None
        with self._reserve(ds, batches, types, idempotency_key) as fresh:
            if not fresh:
                return False
            self._publish(ds, batches, idempotency_key, source_name)
        return True

    @staticmethod
    def _busy(
        ds: _Dataset, types: Mapping[SeriesKey, ValueType], key: str | None, batches: Sequence[SeriesBatch]
    ) -> bool:
        """Whether to wait for writes in progress (caller holds ``ds.cond``).

        Raises:
            MalformedBatchError: a type conflicting with a stored series.
        """
        busy = key is not None and key in ds.pending_keys
        series, pending_types = ds.series, ds.pending_types
        for skey, vt in types.items():
            stored = series.get(skey)
            if stored is not None:
                if stored.value_type is not vt:
                    i = next(i for i, b in enumerate(batches) if b.key == skey)
                    raise MalformedBatchError(
                        i,
                        skey.channel,
                        f"value type {vt.value} conflicts with the stored type "
                        f"{stored.value_type.value} of series {skey.describe()}",
                    )
                continue
            pending = pending_types.get(skey)
            if pending is not None and pending[0] is not vt:
                busy = True
        return busy

    @contextlib.contextmanager
    def _reserve(
        self,
        ds: _Dataset,
        batches: Sequence[SeriesBatch],
        types: Mapping[SeriesKey, ValueType],
        key: str | None,
    ) -> Iterator[bool]:
        """Claim the idempotency key and pin new series types for the duration of one write.

        Yields False, claiming nothing, when the key is already stored.
        """
        new_pins: list[SeriesKey] = []
        with ds.cond:
            # Wait while a write of the same key, or one pinning a type we disagree with, is in
            # progress: its outcome decides whether we are a duplicate or a conflict.
            while not (duplicate := key is not None and key in ds.keys) and self._busy(ds, types, key, batches):
                ds.cond.wait()
            if not duplicate:
                if key is not None:
                    ds.pending_keys.add(key)
                for skey, vt in types.items():
                    if skey not in ds.series:
                        pinned = ds.pending_types.get(skey)
                        ds.pending_types[skey] = (vt, (pinned[1] if pinned else 0) + 1)
                        new_pins.append(skey)
        if duplicate:
            yield False
            return
        try:
            yield True
        finally:
            with ds.cond:
                if key is not None:
                    ds.pending_keys.discard(key)
                for skey in new_pins:
                    vt, n = ds.pending_types[skey]
                    if n == 1:
                        del ds.pending_types[skey]
                    else:
                        ds.pending_types[skey] = (vt, n - 1)
                ds.cond.notify_all()

    def _publish(self, ds: _Dataset, batches: Sequence[SeriesBatch], key: str | None, source_name: str | None) -> None:
        commits = ds.root / _COMMITS
        if not ds.ready:
            if not commits.is_dir():
                ds.root.mkdir(exist_ok=True)
                if ds.root.name.startswith(_HASHED_PREFIX):
                    # Before ``commits`` exists, so any listed dataset directory names its rid.
                    body = json.dumps({"rid": ds.rid}).encode("utf-8")
                    with contextlib.suppress(FileExistsError):
                        _write_durably(ds.root / _DATASET_FILE, lambda f: f.write(body))
                commits.mkdir(exist_ok=True)
                _fsync_dir(ds.root)
                _fsync_dir(self.data_dir)
            (ds.root / _STAGING).mkdir(exist_ok=True)
            ds.ready = True
        staging = ds.root / _STAGING / f"{uuid.uuid4().hex}.parquet"
        try:
            meta = {
                "dataset_rid": ds.rid,
                "idempotency_key": key,
                "source_name": source_name,
                "written_ns": time.time_ns(),
            }
            table, entries, manifest = _build_commit(batches, meta)
            _write_commit_file(staging, table, manifest)
            del table
            tag = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32] if key is not None else uuid.uuid4().hex
            # The file is written without the lock; numbering and renaming take it so commit
            # order (= arrival order for readers) follows the sequence numbers.
            with ds.cond:
                seq = ds.next_seq
                ds.next_seq += 1  # even if publishing fails below, the number is never reused
                name = f"{seq:012d}-{tag}.parquet"
                os.rename(staging, commits / name)
        except BaseException:
            staging.unlink(missing_ok=True)
            raise
        try:
            # Outside the lock, and shared: one directory fsync covers every commit renamed
            # before it started. The reply waits for it, so nothing is acknowledged before its
            # rename is durable.
            ds.sync.wait(ds.sync.join())
        finally:
            # Renamed means visible to readers; index it even if the fsync failed so a retry of
            # the same key is not stored twice.
            with ds.cond:
                ds.apply(name, seq, key, entries)


def _validate(batches: Sequence[SeriesBatch]) -> dict[SeriesKey, ValueType]:
    """Check names, counts and one type per series; returns each series' type.

    The usual request passes whole-list checks (C-level passes over the batches); only a request
    that fails one is walked batch by batch to name the first bad batch.

    Raises:
        MalformedBatchError: the first bad batch, by index.
    """
    keys = [b.key for b in batches]
    channels = [k.channel for k in keys]
    types = dict(zip(keys, (b.value_type for b in batches), strict=True))
    ok = (
        all(channels)
        and max(map(len, channels), default=0) <= MAX_NAME_CHARS
        and all(len(k) <= MAX_NAME_CHARS and len(v) <= MAX_NAME_CHARS for t in set(k.tags for k in keys) for k, v in t)
        and list(map(len, batches)) == [len(b.values) for b in batches]
        and len(set(zip(keys, (b.value_type for b in batches), strict=True))) == len(types)
    )
    if ok:
        return types
    first: dict[SeriesKey, tuple[ValueType, int]] = {}
    for i, b in enumerate(batches):
        _check_names(i, b.key)
        if len(b.values) != len(b.timestamps):
            raise MalformedBatchError(i, b.key.channel, f"{len(b.timestamps)} timestamps but {len(b.values)} values")
        vt, j = first.setdefault(b.key, (b.value_type, i))
        if vt is not b.value_type:
            raise MalformedBatchError(
                i,
                b.key.channel,
                f"value type {b.value_type.value} disagrees with batches[{j}] of the same series ({vt.value})",
            )
    raise AssertionError("a request failed a whole-list check but no batch is bad")
