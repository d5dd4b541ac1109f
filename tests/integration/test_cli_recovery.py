"""The recovery commands on a local data directory, as real processes: ``datasets`` lists,
``inspect`` filters (``--tag``, ``--start``, ``--end``) and fails on what is not there, ``delete``
asks, deletes exactly what it names, atomically (SIGKILL at every step of it leaves the data as
before or as after) and keeps the idempotency ledger consistent."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_nominal import LocalServer, NominalStream
from beam_nominal.model import SeriesKey
from beam_nominal.server import LocalStore

pytestmark = pytest.mark.timeout(300)

RID = "ri.cli.recovery"
OTHER = "ri.cli.other"
T = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
S = 1_000_000_000


def cli(*args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "beam_nominal.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=stdin,
        check=False,
    )


def _write(data: Path, rid: str = RID) -> None:
    """Three requests: one holding channels a (two vehicles) and b, one holding only a, one only c."""
    ts = T + np.arange(10, dtype=np.int64) * S
    with LocalServer(data, port=0) as server, NominalStream(server.target, dataset_rid=rid, linger=None) as s:
        s.enqueue_batch("a", ts, np.arange(10.0), tags={"vehicle": "v1"})
        s.enqueue_batch("a", ts, np.arange(10.0) + 100, tags={"vehicle": "v2"})
        s.enqueue_batch("b", ts, np.arange(10, dtype=np.int64))
        s.flush()
        s.enqueue_batch("a", ts + 10 * S, np.arange(10.0) + 10, tags={"vehicle": "v1"})
        s.flush()
        s.enqueue_batch("c", ts, ["text"] * 10)


def _snapshot(data: Path) -> dict[str, dict[SeriesKey, list[Any]]]:
    store = LocalStore(data)
    return {
        rid: {k: list(zip(*(t.column(c).to_pylist() for c in ("timestamp", "value")), strict=True)) for k, t in
              store.read_all(rid).items()}
        for rid in store.list_datasets()
    }


@pytest.fixture
def data(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    _write(d)
    _write(d, OTHER)
    return d


def test_datasets_lists_and_fails_on_nothing(data: Path, tmp_path: Path) -> None:
    done = cli("datasets", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["dataset", "series", "points", "first", "last"]
    assert lines[2].split() == [OTHER, "4", "50", "2026-01-01T00:00:00.000000000Z", "2026-01-01T00:00:19.000000000Z"]
    assert lines[3].split()[:3] == [RID, "4", "50"]
    (tmp_path / "empty").mkdir()
    for where in (tmp_path / "empty", tmp_path / "missing"):
        done = cli("datasets", "--data-dir", str(where))
        assert done.returncode == 1 and done.stdout == "" and str(where) in done.stderr


def test_inspect_fails_on_an_unknown_dataset_or_channel(data: Path) -> None:
    done = cli("inspect", "--data-dir", str(data), "--dataset", "ri.typo")
    assert done.returncode == 1 and "no dataset 'ri.typo'" in done.stderr and RID in done.stderr
    done = cli("inspect", "--data-dir", str(data), "--dataset", RID, "--channel", "a", "--channel", "zz")
    assert done.returncode == 1 and "no channel 'zz' in dataset" in done.stderr
    done = cli("inspect", "--data-dir", str(data), "--dataset", RID, "--channel", "c", "--tag", "vehicle=v1")
    assert done.returncode == 1 and "with tag vehicle=v1" in done.stderr
    for bad in (["--tag", "novalue"], ["--start", "2026-01-01T00:00:00"], ["--end", "soon"]):
        done = cli("inspect", "--data-dir", str(data), *bad)
        assert done.returncode == 2, (bad, done.stderr)
        assert bad[0] in done.stderr


def test_inspect_filters_by_tag_and_time(data: Path) -> None:
    done = cli(
        "inspect", "--data-dir", str(data), "--dataset", RID, "--channel", "a", "--tag", "vehicle=v1",
        "--start", "2026-01-01T00:00:05Z", "--end", str(T + 12 * S), "--format", "csv",
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split(",") for line in done.stdout.splitlines()[1:]]
    # [5 s, 12 s): points 5..9 of the first request and 10, 11 of the second, exactly.
    assert [int(r[4]) for r in rows] == [T + k * S for k in range(5, 12)]
    assert [float(r[-1]) for r in rows] == [float(k) for k in range(5, 12)]
    table = cli("inspect", "--data-dir", str(data), "--dataset", RID, "--start", str(T + 15 * S))
    assert table.returncode == 0, table.stderr
    [row] = [line.split() for line in table.stdout.splitlines()[2:]]
    assert row[:5] == [RID, "a", "vehicle=v1", "double", "5"]
    empty = cli("inspect", "--data-dir", str(data), "--dataset", RID, "--start", str(T + 100 * S))
    assert empty.returncode == 1 and "no series" in empty.stderr and "points in" in empty.stderr


def _ask(args: list[str], answer: bytes) -> subprocess.CompletedProcess[str]:
    """Run a delete with a terminal on stdin that answers ``answer``."""
    primary, secondary = pty.openpty()
    try:
        os.write(primary, answer)
        return cli(*args, stdin=secondary)
    finally:
        os.close(primary)
        os.close(secondary)


def test_delete_asks_first(data: Path) -> None:
    before = _snapshot(data)
    args = ["delete", "--data-dir", str(data), "--dataset", RID, "--channel", "a"]
    done = cli(*args)  # no terminal to ask on
    assert done.returncode == 1 and "--yes" in done.stderr
    done = _ask(args, b"n\n")
    assert done.returncode == 1 and "nothing deleted" in done.stdout
    assert "will delete 2 series (30 points)" in done.stdout
    assert _snapshot(data) == before
    done = _ask(args, b"y\n")
    assert done.returncode == 0, done.stderr
    assert set(_snapshot(data)[RID]) == {SeriesKey.of("b"), SeriesKey.of("c")}


def test_delete_removes_exactly_the_series_named(data: Path) -> None:
    before = _snapshot(data)
    done = cli("delete", "--data-dir", str(data), "--dataset", RID, "--channel", "a", "--tag", "vehicle=v1", "--yes")
    assert done.returncode == 0, done.stderr
    assert "deleted 1 series (20 points)" in done.stdout
    after = _snapshot(data)
    expected = {k: v for k, v in before[RID].items() if k != SeriesKey.of("a", {"vehicle": "v1"})}
    assert after == {**before, RID: expected}
    # The files themselves (what DuckDB reads) no longer hold a row of it.
    files = pq.ParquetDataset(sorted((data / RID / "commits").glob("*.parquet"))).read().to_pylist()
    assert len(files) == 30 and not any(r["tags"] == '{"vehicle":"v1"}' for r in files)
    # Unknown series or dataset: nothing to delete is an error.
    done = cli("delete", "--data-dir", str(data), "--dataset", RID, "--channel", "a", "--tag", "vehicle=v1", "--yes")
    assert done.returncode == 1 and "no series with channel 'a', tag vehicle=v1" in done.stderr
    done = cli("delete", "--data-dir", str(data), "--dataset", "ri.typo", "--yes")
    assert done.returncode == 1 and "no dataset 'ri.typo'" in done.stderr
    # The whole dataset.
    done = cli("delete", "--data-dir", str(data), "--dataset", RID, "--yes")
    assert done.returncode == 0, done.stderr
    assert _snapshot(data) == {OTHER: before[OTHER]}
    assert sorted(p.name for p in data.iterdir() if not p.name.startswith(".")) == [OTHER]


def test_delete_refuses_while_a_server_runs(data: Path) -> None:
    with LocalServer(data, port=0):
        done = cli("delete", "--data-dir", str(data), "--dataset", RID, "--yes")
    assert done.returncode == 1 and "stop it first" in done.stderr
    assert RID in _snapshot(data)


def test_a_request_sent_again_after_a_delete(data: Path, tmp_path: Path) -> None:
    """Deleted series stay deleted when a request that stored them is re-sent (same key: it is
    acknowledged, nothing is stored); a deleted dataset forgets its keys (stored as new)."""
    before = _snapshot(data)
    assert cli("delete", "--data-dir", str(data), "--dataset", RID, "--channel", "a", "--yes").returncode == 0
    deleted = _snapshot(data)
    _write(data)  # the same requests again, with the same idempotency keys
    assert _snapshot(data) == deleted
    assert cli("delete", "--data-dir", str(data), "--dataset", RID, "--yes").returncode == 0
    _write(data)
    assert _snapshot(data) == before


_CHILD = """
import os, shutil, signal, sys, types
from beam_nominal.server import _delete
from beam_nominal.cli import main

kill_at, calls = int(sys.argv[1]), [0]

def step(f):
    def run(*a, **kw):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return f(*a, **kw)
    return run

fake_os = types.SimpleNamespace(**{n: getattr(os, n) for n in dir(os) if not n.startswith("__")})
fake_os.replace, fake_os.rename, fake_os.unlink = step(os.replace), step(os.rename), step(os.unlink)
_delete.os = fake_os
_delete.shutil = types.SimpleNamespace(rmtree=step(shutil.rmtree))
_delete._write_commit_file = step(_delete._write_commit_file)
_delete._fsync_dir = step(_delete._fsync_dir)
sys.exit(main(["delete", "--yes", *sys.argv[2:]]))
"""


@pytest.mark.parametrize("what", [["--channel", "a"], ["--channel", "c"], []])
def test_sigkill_at_every_step_of_a_delete_leaves_before_or_after(data: Path, tmp_path: Path, what: list[str]) -> None:
    before = _snapshot(data)
    ref = shutil.copytree(data, tmp_path / "ref")
    expected = cli("delete", "--data-dir", str(ref), "--dataset", RID, "--yes", *what)
    assert expected.returncode == 0, expected.stderr
    after = _snapshot(tmp_path / "ref")
    assert after != before
    seen = {"before": 0, "after": 0}
    for kill_at in range(1, 100):
        trial = shutil.copytree(data, tmp_path / f"trial-{kill_at}")
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(kill_at), "--data-dir", str(trial), "--dataset", RID, *what],
            capture_output=True, text=True, timeout=120, check=False,
        )
        # Read back (which completes a delete past its commit point), then as a server would.
        state = _snapshot(trial)
        assert state in (before, after), f"killed at step {kill_at}: neither before nor after"
        seen["before" if state == before else "after"] += 1
        with LocalServer(trial, port=0):
            assert _snapshot(trial) == state
        assert not [p for p in trial.iterdir() if p.name.startswith("~")]
        shutil.rmtree(trial)
        if child.returncode == 0:
            break
        assert child.returncode == -9, child.stderr
    else:
        pytest.fail("the delete never finished")
    assert seen["before"] >= 1 and seen["after"] >= 2, seen
