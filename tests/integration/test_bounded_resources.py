"""Bounded resources, measured in a child process (tests/integration/_memory_child.py):

- against a stalled server (a loopback proxy that accepts and then forwards nothing, so the
  client's sends block in TCP as they would on a hung peer), the client's RSS stays under its
  buffer cap plus a constant, with glibc's defaults, and enqueue blocks;
- against a stalled or a dead server (nothing listening), close ends within its timeout, raising
  ``DeliveryError``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _proxy import FaultProxy

from beam_nominal.server import LocalServer

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "_memory_child.py"
RID = "ri.test.bounded"
CAP = 32 << 20
#: What the client may hold beyond its buffer cap, whatever the cap, with glibc's defaults and the
#: wires' default request sizes: buffers that scale with the request size (gRPC's copy of each
#: body in flight, the encoders' reused buffers, freed request-sized blocks glibc keeps resident),
#: the batch being enqueued, the libraries' threads, interpreter slack.
SLACK = 64 << 20
CLOSE_TIMEOUT = 3.0


def run_child(url: str, cap: int = CAP, after_open: Any = None) -> dict[str, Any]:
    """Run the child against ``url``; with ``after_open``, call it once the child's stream has
    opened (made its first contact) and before the child writes."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), url, RID, str(cap), str(CLOSE_TIMEOUT), *(["--wait"] if after_open else [])],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if after_open is not None:
            assert proc.stdout is not None and proc.stdin is not None
            assert proc.stdout.readline() == "open\n", proc.stderr.read() if proc.stderr else ""
            after_open()
            proc.stdin.write("go\n")
            proc.stdin.flush()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, stderr[-3000:]
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[tuple[LocalServer, FaultProxy, FaultProxy]]:
    with LocalServer(tmp_path / "data", http_port=0) as srv:
        g, h = FaultProxy(srv.port, "grpc"), FaultProxy(srv.http_port, "http")
        for p in (g, h):
            p.stall(3600)
        try:
            yield srv, g, h
        finally:
            g.close()
            h.close()


def _stalled_run(
    stalled: tuple[LocalServer, FaultProxy, FaultProxy], wire: str, cap: int
) -> tuple[dict[str, Any], int]:
    srv, g, h = stalled
    url = f"grpc://127.0.0.1:{g.port}" if wire == "grpc" else f"http://127.0.0.1:{h.port}/api"
    r = run_child(url, cap)
    growth = int(r["peak_rss"] - r["baseline_rss"])
    print(
        f"{wire}: RSS growth {growth / 2**20:.1f} MiB with a {cap >> 20} MiB cap; "
        f"enqueued {r['enqueued_bytes'] >> 20} MiB; close {r['close_seconds']:.2f} s"
    )
    assert r["blocked"], r
    # It did buffer up to the cap (not blocked on something else early).
    assert r["enqueued_bytes"] >= cap // 2, r
    assert r["error"] is not None and r["error"].startswith("DeliveryError"), r
    assert r["close_seconds"] < CLOSE_TIMEOUT + 1.5, r
    assert srv.store.list_series(RID) == []
    return r, growth


@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_stalled_server_memory_stays_under_the_cap_plus_a_constant(
    stalled: tuple[LocalServer, FaultProxy, FaultProxy], wire: str
) -> None:
    """With glibc's defaults, enqueue blocks and RSS stays under cap + a constant: at a 32 and a
    128 MiB cap alike, and growing no faster than the cap between them."""
    (_, small), (r, large) = (_stalled_run(stalled, wire, cap) for cap in (CAP, 4 * CAP))
    assert small < CAP + SLACK, small
    assert large < 4 * CAP + SLACK, r
    assert large - small < 3 * CAP + (8 << 20), (small, large)


@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_close_against_a_dead_server_ends_within_its_timeout(wire: str, tmp_path: Path) -> None:
    # The server answers the stream's first contact, then dies: every connection after is refused.
    # (A server that refuses the first contact fails the stream at open: test_first_contact.py.)
    server = LocalServer(tmp_path / "data", port=0, http_port=0).start()
    url = server.target if wire == "grpc" else server.http_url
    r = run_child(url, after_open=server.stop)
    print(f"{wire}: dead server, close {r['close_seconds']:.2f} s: {r['error']}")
    assert r["error"] is not None and r["error"].startswith("DeliveryError"), r
    assert r["close_seconds"] < CLOSE_TIMEOUT + 1.5, r
    assert r["peak_rss"] - r["baseline_rss"] < CAP + SLACK, r
