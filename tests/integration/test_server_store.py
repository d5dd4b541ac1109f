"""The store's commit machinery below gRPC: the shared directory fsync and the commit file format."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalStore, _index
from beam_nominal.server._index import _GroupSync
from beam_nominal.server.store import _Committer

pytestmark = pytest.mark.timeout(60)

RID = "ri.test.store"


class GatedFsync:
    """Stands in for the directory fsync: records each call and blocks it until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.fail_next: BaseException | None = None

    def __call__(self, path: Path) -> None:
        self.calls += 1
        self.started.release()
        assert self.release.acquire(timeout=10), "fsync never released"
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc


def wait_in_thread(sync: _GroupSync, done: list[str], name: str, mine: Any = None) -> threading.Thread:
    """Join the open round now (as after a rename) unless given one, wait for it in a thread."""
    mine = sync.join() if mine is None else mine

    def run() -> None:
        try:
            sync.wait(mine)
            done.append(name)
        except OSError as exc:
            done.append(f"{name}: {exc}")

    th = threading.Thread(target=run)
    th.start()
    return th


def test_rename_during_an_fsync_waits_for_the_next_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsync = GatedFsync()
    monkeypatch.setattr(_index, "_fsync_dir", fsync)
    sync = _GroupSync(tmp_path)
    done: list[str] = []
    a = wait_in_thread(sync, done, "a")
    assert fsync.started.acquire(timeout=10)  # a leads the first fsync, which is now running
    # b and c rename while it runs: that fsync may have missed them, so they share the next.
    b = wait_in_thread(sync, done, "b")
    c = wait_in_thread(sync, done, "c")
    fsync.release.release()
    a.join(10)
    assert done == ["a"]
    assert fsync.started.acquire(timeout=10)
    assert fsync.calls == 2 and sorted(done) == ["a"]  # b and c still wait for the second fsync
    fsync.release.release()
    b.join(10)
    c.join(10)
    assert sorted(done) == ["a", "b", "c"]
    assert fsync.calls == 2  # one fsync for both


def test_a_failed_fsync_fails_every_commit_of_its_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsync = GatedFsync()
    monkeypatch.setattr(_index, "_fsync_dir", fsync)
    sync = _GroupSync(tmp_path)
    done: list[str] = []
    fsync.fail_next = OSError(5, "disk gone")
    # Both rename before either waits: one round.
    first, second = sync.join(), sync.join()
    assert first is second
    a = wait_in_thread(sync, done, "a", first)
    b = wait_in_thread(sync, done, "b", second)
    assert fsync.started.acquire(timeout=10)
    fsync.release.release()
    a.join(10)
    b.join(10)
    assert sorted(done) == ["a: [Errno 5] disk gone", "b: [Errno 5] disk gone"]
    # The next round fsyncs again and succeeds.
    c = wait_in_thread(sync, done, "c")
    assert fsync.started.acquire(timeout=10)
    fsync.release.release()
    c.join(10)
    assert done[-1] == "c" and fsync.calls == 2


def test_one_file_per_commit_with_its_manifest_in_the_footer(tmp_path: Path) -> None:
    committer = _Committer(LocalStore(tmp_path))
    ts = np.arange(3, dtype=np.int64)
    batches = [
        SeriesBatch(SeriesKey.of("a", {"k": "v"}), ValueType.DOUBLE, ts, np.array([1.0, 2.0, 3.0])),
        SeriesBatch(SeriesKey.of("b"), ValueType.INT64, ts[:2] + 10, np.array([7, 8], dtype=np.int64)),
        SeriesBatch(SeriesKey.of("c"), ValueType.DOUBLE, ts[:1] + 5, np.array([9.0])),
    ]
    assert committer.commit(RID, batches, "key-1")
    files = sorted((tmp_path / RID / "commits").iterdir())
    assert [f.name.endswith(".parquet") for f in files] == [True]
    table = pq.read_table(files[0])
    # Rows grouped by type (doubles a, c first, then ints b); each type's column null elsewhere.
    assert table.column("channel").to_pylist() == ["a"] * 3 + ["c", "b", "b"]
    assert table.column("value_double").to_pylist() == [1.0, 2.0, 3.0, 9.0, None, None]
    assert table.column("value_int64").to_pylist() == [None] * 4 + [7, 8]
    manifest = json.loads(pq.read_metadata(files[0]).metadata[b"beam_nominal.manifest"])
    assert manifest["idempotency_key"] == "key-1"
    assert manifest["types"] == [["double", 2], ["int64", 1]]
    assert manifest["series"]["count"] == [3, 1, 2]
    assert manifest["series"]["min"] == [0, 5, 10]
    # A fresh store rebuilds the index from the footer alone and reads the right rows.
    fresh = LocalStore(tmp_path)
    assert fresh.read(RID, "c").column("value").to_pylist() == [9.0]
    assert fresh.read(RID, "b").column("value").to_pylist() == [7, 8]
    assert [(s.channel, s.count, s.min_timestamp_ns, s.max_timestamp_ns) for s in fresh.list_series(RID)] == [
        ("a", 3, 0, 2),
        ("b", 2, 10, 11),
        ("c", 1, 5, 5),
    ]
    assert not _Committer(fresh).commit(RID, batches, "key-1")  # the key came back with the data


def test_malloc_thresholds_are_accepted_on_glibc() -> None:
    import platform

    from beam_nominal.server._malloc import keep_freed_memory

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt thresholds are glibc's")
    assert keep_freed_memory()


def test_an_interrupted_fsync_is_no_success_for_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsync = GatedFsync()
    monkeypatch.setattr(_index, "_fsync_dir", fsync)
    sync = _GroupSync(tmp_path)
    done: list[str] = []
    first, second = sync.join(), sync.join()
    leader_error: list[BaseException] = []

    def lead() -> None:
        try:
            sync.wait(first)
        except BaseException as exc:
            leader_error.append(exc)

    class Interrupt(BaseException):
        pass

    fsync.fail_next = Interrupt()
    a = threading.Thread(target=lead)
    a.start()
    assert fsync.started.acquire(timeout=10)
    b = wait_in_thread(sync, done, "b", second)
    fsync.release.release()
    a.join(10)
    b.join(10)
    assert [type(e) for e in leader_error] == [Interrupt]
    assert done == ["b: [Errno 5] directory fsync did not complete"]
