"""Parquet storage of the local server: the per-dataset index, read-back, and the store's names.

A request is stored as one Parquet commit file, entirely or not at all, and its idempotency key is
durable exactly when its data is. The storage is split by job:

- ``_validate``: what a request must satisfy before anything is stored (``InvalidRequestError``);
- ``_format``: the on-disk layout and the commit file, encoded from a request and decoded to
  index entries;
- ``_durable``: the fsync and fdatasync steps that make a commit durable;
- ``_commit``: the write path, ``_Committer`` (reserve, stage, publish; ``StoppingError``);
- this module: the index of each dataset, rebuilt from commit footers and updated by the write
  path (``_Dataset``, with the group fsync of its ``commits`` directory), and :class:`LocalStore`,
  which reads it back, also while a server writes.

The server's handlers import all of these names from here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server._commit import StoppingError as StoppingError
from beam_nominal.server._commit import _Committer as _Committer
from beam_nominal.server._durable import _fsync_dir
from beam_nominal.server._format import (
    _ARROW_TYPES,
    _COMMIT_RE,
    _COMMITS,
    _DATASET_FILE,
    _HASHED_PREFIX,
    _MANIFEST_KEY,
    _dir_name,
    _entries,
    _Entry,
    _value_column,
)
from beam_nominal.server._validate import _RID_RE, InvalidRequestError, check_dataset_rid

__all__ = ["InvalidRequestError", "LocalStore", "SeriesInfo", "check_dataset_rid"]


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
# Read API
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
