"""Deleting from a local data directory (``beam-nominal delete``): a whole dataset, or some of its
series, atomically and durably, with the server stopped.

A dataset goes by one ``rename`` of its directory to ``DIR/~deleting-<uuid>`` (``~`` is not a
rid character, so no reader takes it for a dataset) and a directory fsync: that rename is the
commit point; the renamed tree is removed after, or by the next delete or server start if a crash
came first. Its idempotency keys go with it: a request re-sent after is stored as new.

Series go by rewriting every commit file that holds any of their rows, under the file's own name:
each new version (the other series' rows, and the same manifest fields, idempotency key included)
is written to ``staging/`` and fdatasynced; then a journal ``delete-journal.json`` naming every
replacement is written, fsynced and renamed into the dataset directory (the commit point), and
the replacements are renamed over the originals, ``commits/`` fsynced and the journal removed. A
crash before the journal leaves only staging leftovers, which a server start removes (the state
before); after it, :func:`finish_pending` (run by every delete, server start and ``LocalStore``
that opens the dataset) completes the renames (the state after). A commit left without rows is
kept, empty, so its idempotency key stays stored; the rewritten manifest keeps the points digest
of the request as it was first stored (``points_digest``), so the ledger still recognises a
re-sent request as the one it stored: it is acknowledged and nothing is stored again (deleted
points stay deleted). A new request under that key with other points is refused as before.

Nothing here runs beside a server on the same directory: servers hold a shared lock on
``DIR/.beam-nominal.lock`` while they run, a delete holds it exclusively (:func:`exclusive`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.model import SeriesKey
from beam_nominal.server._durable import _fsync_dir, _write_commit_file
from beam_nominal.server._format import (
    _COMMIT_RE,
    _COMMITS,
    _FORMAT,
    _MANIFEST_KEY,
    _STAGING,
    _build_commit,
    _commit_batches,
    _dir_name,
    _entries,
    points_digest,
)

__all__ = ["DeletePlan", "LOCK_FILE", "delete", "exclusive", "finish_pending", "plan", "remove_trash", "shared"]

#: The lock file of a data directory: shared by running servers, exclusive for a delete.
LOCK_FILE = ".beam-nominal.lock"
_JOURNAL = "delete-journal.json"
_TRASH_PREFIX = "~deleting-"


class DataDirBusyError(RuntimeError):
    """A server (or another delete) is using the data directory."""


def _lock(data_dir: Path, mode: int) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirBusyError(
            f"{data_dir} is in use by a running beam-nominal server (or another delete): stop it first"
        ) from None
    return fd


def shared(data_dir: Path) -> int:
    """Take the shared lock a running server holds (returns the fd to close when it stops).

    Raises:
        DataDirBusyError: a delete is running on the directory.
    """
    return _lock(data_dir, fcntl.LOCK_SH)


@contextlib.contextmanager
def exclusive(data_dir: Path) -> Iterator[None]:
    """Hold the data directory alone for a delete.

    Raises:
        DataDirBusyError: a server (or another delete) holds it.
    """
    fd = _lock(data_dir, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


def remove_trash(data_dir: Path) -> None:
    """Remove what deleted datasets left (a crash between the rename and the removal)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(data_dir):
            if name.startswith(_TRASH_PREFIX):
                shutil.rmtree(data_dir / name, ignore_errors=True)


def finish_pending(root: Path) -> bool:
    """Complete a series delete a crash interrupted after its commit point (idempotent; safe to
    run from several processes). True if there was one."""
    journal = root / _JOURNAL
    try:
        steps = json.loads(journal.read_text("utf-8"))["replace"]
    except FileNotFoundError:
        return False
    for staged, commit in steps:
        with contextlib.suppress(FileNotFoundError):  # already renamed
            os.replace(root / _STAGING / staged, root / _COMMITS / commit)
    _fsync_dir(root / _COMMITS)
    journal.unlink(missing_ok=True)
    _fsync_dir(root)
    return True


@dataclasses.dataclass(frozen=True)
class DeletePlan:
    """What a delete would remove: the series (with their point counts), and whether the whole
    dataset goes."""

    dataset_rid: str
    whole: bool
    series: Mapping[SeriesKey, int]

    @property
    def points(self) -> int:
        return sum(self.series.values())


def plan(store: Any, rid: str, channels: Sequence[str] = (), tags: Mapping[str, str] | None = None) -> DeletePlan:
    """The series of ``rid`` a delete with these filters removes (every series, and the dataset
    itself, without filters). ``store`` is a :class:`~beam_nominal.server.store.LocalStore`.

    Raises:
        KeyError: no such dataset, or no series matches (the message says which).
    """
    if rid not in store.list_datasets():
        raise KeyError(f"no dataset {rid!r} in {store.data_dir}")
    wanted = dict(tags or {})
    chosen = {
        SeriesKey(s.channel, tuple(sorted(s.tags.items()))): s.count
        for s in store.list_series(rid)
        if (not channels or s.channel in channels) and all(s.tags.get(k) == v for k, v in wanted.items())
    }
    whole = not channels and not wanted
    if not chosen and not whole:
        what = ", ".join([*(f"channel {c!r}" for c in channels), *(f"tag {k}={v}" for k, v in wanted.items())])
        raise KeyError(f"dataset {rid!r} has no series with {what}")
    return DeletePlan(rid, whole, chosen)


def delete(data_dir: Path, todo: DeletePlan) -> None:
    """Carry out ``todo`` (from :func:`plan`), holding the directory alone."""
    with exclusive(data_dir):
        remove_trash(data_dir)
        root = data_dir / _dir_name(todo.dataset_rid)
        finish_pending(root)
        if todo.whole:
            trash = data_dir / f"{_TRASH_PREFIX}{uuid.uuid4().hex}"
            os.rename(root, trash)
            _fsync_dir(data_dir)
            shutil.rmtree(trash, ignore_errors=True)
            return
        _delete_series(root, set(todo.series))


def _delete_series(root: Path, doomed: set[SeriesKey]) -> None:
    staging = root / _STAGING
    staging.mkdir(exist_ok=True)
    steps: list[tuple[str, str]] = []
    for name in sorted(os.listdir(root / _COMMITS)):
        if _COMMIT_RE.fullmatch(name) is None:
            continue
        path = root / _COMMITS / name
        pf = pq.ParquetFile(path)
        manifest = json.loads((pf.metadata.metadata or {})[_MANIFEST_KEY.encode()])
        entries = _entries(manifest)
        if not any(e[0] in doomed for e in entries):
            continue
        batches = _commit_batches(pf.read(), entries)
        kept = [b for b in batches if b.key not in doomed]
        meta = {k: v for k, v in manifest.items() if k not in ("format", "tag_sets", "types", "series")}
        # The digest of the points the request stored, so the ledger still knows a re-send of it.
        meta.setdefault("points_digest", points_digest(batches))
        meta["deleted_ns"] = time.time_ns()
        staged = f"{uuid.uuid4().hex}.parquet"
        table, manifest_bytes = _commit_of(kept, meta)
        _write_commit_file(staging / staged, table, manifest_bytes)
        steps.append((staged, name))
    if not steps:
        return
    _fsync_dir(staging)
    journal = root / _JOURNAL
    tmp = root / f"{_JOURNAL}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "xb") as f:
        f.write(json.dumps({"replace": steps}).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, journal)  # the commit point
    _fsync_dir(root)
    finish_pending(root)


def _commit_of(batches: Sequence[SeriesBatch], meta: dict[str, Any]) -> tuple[pa.Table, bytes]:
    if any(len(b) for b in batches):
        table, _, body = _build_commit(batches, meta)
        return table, body
    # No row left: an empty commit still holds the request's idempotency key.
    names = pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    table = pa.table({"channel": names, "tags": names, "timestamp": pa.array([], pa.int64())})
    empty = {
        **meta,
        "format": _FORMAT,
        "tag_sets": [],
        "types": [],
        "series": {"channel": [], "tags": [], "count": [], "min": [], "max": []},
    }
    return table, json.dumps(empty, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
