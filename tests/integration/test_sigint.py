"""Ctrl+C at random moments while a script writes single points: never a hang, never a lost or
duplicated point, never torn state.

Each trial runs ``_sigint_child.py`` as a real process writing into a real local server (gRPC and
HTTP), sends it SIGINT after a random delay (anywhere from opening the stream to its final drain),
and reads back: the series must be exactly ``0..m-1`` where ``m`` is the number of ``enqueue``
calls that returned (or one more: the call the interrupt cut short may have buffered its point).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from beam_nominal.server import LocalServer, LocalStore

pytestmark = pytest.mark.timeout(600)

CHILD = Path(__file__).with_name("_sigint_child.py")
TRIALS = int(os.environ.get("BEAM_NOMINAL_SIGINT_TRIALS", "40"))
#: Most trials write more than they can before the interrupt; every eighth writes few enough
#: that the interrupt often lands in the final drain or after it.
POINTS, FEW_POINTS = 3_000_000, 200_000


def _trial(srv: LocalServer, wire: str, form: str, rid: str, delay: float, points: int) -> tuple[str, int, int | None]:
    target = srv.http_url if wire == "http" else srv.target
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), target, rid, str(points), form],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.stderr else ""
    # The random delay picks the moment to interrupt; the outcome is waited on, never slept for.
    threading.Event().wait(delay)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "hang", 0, None
    line = out.strip().splitlines()[-1] if out.strip() else ""
    if not line.startswith("{"):
        return f"no result (rc {proc.returncode}): {err[-2000:]}", 0, None
    result = json.loads(line)
    return result["outcome"], result["returned"], proc.returncode


def _stored(store: LocalStore, rid: str) -> list[int]:
    if rid not in store.list_datasets():
        return []
    column = store.read(rid, "sig").column("timestamp").cast("int64")
    return [int(t) for t in column.to_pylist()]


@pytest.mark.slow
def test_sigint_at_random_moments_never_hangs_or_loses_points(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("BEAM_NOMINAL_SIGINT_SEED", "11")))
    problems: list[str] = []
    interrupted = 0
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        store = LocalStore(tmp_path / "data")
        for i in range(TRIALS):
            wire = ("grpc", "http")[i % 2]
            form = ("point", "point", "wide")[i % 3]
            rid = f"ri.sigint.trial.{i}"
            points = FEW_POINTS if i % 8 == 7 else POINTS
            delay = rng.uniform(0.0, 1.5)
            outcome, returned, _rc = _trial(srv, wire, form, rid, delay, points)
            if outcome not in ("interrupted", "finished"):
                problems.append(f"trial {i} ({wire}, {form}, {delay:.2f}s): {outcome}")
                continue
            interrupted += outcome == "interrupted"
            stamps = _stored(store, rid)
            m = len(stamps)
            if sorted(stamps) != list(range(m)) or m not in (returned, returned + 1):
                problems.append(
                    f"trial {i} ({wire}, {form}, {delay:.2f}s): {returned} enqueues returned, "
                    f"{m} points stored, {len(set(stamps))} distinct"
                )
    print(f"sigint: {TRIALS} trials, {interrupted} interrupted, {len(problems)} hung or lost points")
    assert not problems, "\n".join(problems)
    assert interrupted >= min(30, TRIALS * 3 // 4), f"only {interrupted} of {TRIALS} trials were interrupted"
