"""Parquet storage of the local server: read-back, and the store's names.

A request is stored as one Parquet commit file, entirely or not at all, and its idempotency key is
durable exactly when its data is. The storage is split by job:

- ``_validate``: what a request must satisfy before anything is stored (``InvalidRequestError``);
- ``_format``: the on-disk layout and the commit file, encoded from a request and decoded to
  index entries;
- ``_durable``: the fsync and fdatasync steps that make a commit durable;
- ``_index``: the index of each dataset, rebuilt from commit footers and updated by the write
  path (``_Dataset``, with the group fsync of its ``commits`` directory, ``_GroupSync``;
  ``SeriesInfo``);
- ``_ledger``: the idempotency ledger of the write path (wait for a conflicting writer, claim
  the key and new series types, or find the key already stored);
- ``_commit``: the write path, ``_Committer`` (reserve, stage, publish; ``StoppingError``);
- this module: :class:`LocalStore`, which reads the index and the files back, also while a
  server writes.

The server's handlers import all of these names from here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server._commit import StoppingError as StoppingError
from beam_nominal.server._commit import _Committer as _Committer
from beam_nominal.server._delete import finish_pending
from beam_nominal.server._format import _ARROW_TYPES, _COMMITS, _DATASET_FILE, _HASHED_PREFIX, _dir_name, _value_column
from beam_nominal.server._index import SeriesInfo as SeriesInfo
from beam_nominal.server._index import _Dataset, _Series
from beam_nominal.server._index import _GroupSync as _GroupSync
from beam_nominal.server._validate import _RID_RE, InvalidRequestError, check_dataset_rid

__all__ = ["InvalidRequestError", "LocalStore", "SeriesInfo", "check_dataset_rid"]


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
                # A delete a crash interrupted past its commit point is completed before the
                # dataset is read, so no reader sees it half done.
                finish_pending(root)
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
