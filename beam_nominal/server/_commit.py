"""The local server's write path: one request becomes one durable, atomic commit, or nothing.

:class:`_Committer` validates the whole request, then under the dataset's condition variable
checks stored types and the idempotency ledger and reserves the key and new series types
(``_ledger``; a conflicting writer waits for the outcome), builds and writes the commit file in ``staging``
without the lock, and publishes it by one ``rename`` into ``commits`` plus the dataset's shared
directory fsync. So a request is stored entirely or not at all, and its idempotency key (in the
file's manifest) is durable exactly when its data is. A gate refuses commits once the server
stops (:class:`StoppingError`); leftovers in ``staging`` from a crash are removed on start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.server import _delete
from beam_nominal.server._durable import _fsync_dir, _write_commit_file, _write_durably
from beam_nominal.server._format import _COMMITS, _DATASET_FILE, _HASHED_PREFIX, _STAGING, _build_commit, _dir_name
from beam_nominal.server._index import _Dataset
from beam_nominal.server._ledger import _busy, _reserve
from beam_nominal.server._validate import _validate, check_dataset_rid

if TYPE_CHECKING:
    # Types only: store imports this module (handlers get _Committer from there), so no import back at run time.
    from beam_nominal.server.store import LocalStore


class StoppingError(RuntimeError):
    """The server is stopping: a write that arrives now is refused, nothing of it stored."""


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
        # Shared with other servers on the directory; a delete (server/_delete.py) needs it alone.
        self._lock_fd: int | None = _delete.shared(self.data_dir)
        self._release = weakref.finalize(self, os.close, self._lock_fd)
        try:
            self._recover()
        except BaseException:
            self._release()
            raise

    def close(self, timeout: float | None = 30.0) -> bool:
        """Refuse new commits and wait for those in progress; True if none is left running."""
        with self._gate:
            self._closed = True
            done = self._gate.wait_for(lambda: self._active == 0, timeout)
        if done:
            self._release()  # the directory's lock: a delete may run now
        return done

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
        _delete.remove_trash(self.data_dir)
        for rid in self.store._dataset_dirs():
            # A delete past its commit point first (its replacements wait in staging).
            _delete.finish_pending(self.data_dir / _dir_name(rid))
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
                    _busy(existing, types, None, batches)
            return True
        ds = self.store._dataset(rid, create=True)
        assert ds is not None
        with _reserve(ds, batches, types, idempotency_key) as fresh:
            if not fresh:
                return False
            self._publish(ds, batches, idempotency_key, source_name)
        return True

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
