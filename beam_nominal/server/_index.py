"""The in-memory index of each dataset of the local server, rebuilt from its commit files' footers.

:class:`_Dataset` holds one dataset's committed state (series types, counts, bounds, the row
segments of each series, stored idempotency keys) and the reservations of writes in progress, all
under one condition variable; the write path (``_commit``, ``_ledger``) updates it, ``store``'s
:class:`LocalStore` reads through it. :class:`_GroupSync` is the directory fsync of a dataset's
``commits`` shared by concurrent commits.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server._durable import _fsync_dir
from beam_nominal.server._format import (
    _COMMIT_RE,
    _COMMITS,
    _MANIFEST_KEY,
    _commit_batches,
    _entries,
    _Entry,
    points_digest,
)


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
        # Stored idempotency keys, each with the commit that holds its request, and the points
        # digests of those commits computed so far (only when a key comes again: retries are rare,
        # so the write path never pays for a digest).
        self.keys: dict[str, str] = {}
        self.digests: dict[str, str] = {}
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
            self.keys.setdefault(key, name)
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

    def stored_digest(self, key: str) -> str:
        """The points digest of the commit that holds ``key`` (caller holds ``cond``).

        Raises:
            OSError: that commit file can no longer be read.
        """
        digest = self.digests.get(key)
        if digest is None:
            path = self.root / _COMMITS / self.keys[key]
            try:
                pf = pq.ParquetFile(path)
                manifest = json.loads((pf.metadata.metadata or {})[_MANIFEST_KEY.encode()])
                # A commit some series were deleted from keeps the digest of what it first stored
                # (server/_delete.py): a re-send of that request is still the same request.
                digest = manifest.get("points_digest")
                if digest is None:
                    digest = points_digest(_commit_batches(pf.read(), _entries(manifest)))
            except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
                raise OSError(f"commit {path.name} of key {key[:100]!r} is unreadable: {exc}") from exc
            self.digests[key] = digest
        return digest

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
