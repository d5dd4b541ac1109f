"""Soak: minutes of mixed load and faults on both wires, then exact reconciliation (not in CI).

One ``beam-nominal serve`` process (this checkout) serves gRPC and HTTP on fixed ports; four
``NominalStream`` writers run the whole time, throttled: gRPC and HTTP straight to the server, and
gRPC and HTTP (columnar) through loopback fault proxies (tests/integration/_proxy.py). A fault
loop injects, in turn: SIGKILL of the server and a restart on the same data dir and ports, proxy
resets at connect and mid-request, responses cut after the commit, stalls past the attempt
deadline. At the end every writer closes, and every series is read back from the data dir:
points sent == points stored, duplicates and missing points counted (each writer's timestamps are
unique, and every value is a function of its timestamp, so both are exact).

Run: ``.venv/bin/python -m benchmarks.soak --minutes 10`` (``--rate`` points/s per writer).
Exits 1 if any point is missing, duplicated or wrong, or a writer failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from _proxy import FaultProxy  # noqa: E402

from beam_nominal.server import LocalStore  # noqa: E402
from beam_nominal.stream import NominalStream  # noqa: E402

RID = "ri.soak"
T0 = 1_700_000_000_000_000_000
READY = re.compile(r"listening on grpc://127\.0\.0\.1:(\d+) and http://127\.0\.0\.1:(\d+)/api\n")
RETRY = {
    "linger": 0.2,
    "initial_backoff": 0.05,
    "max_backoff": 1.0,
    "max_attempts": 1_000_000,
    "total_timeout": 600.0,
    "attempt_timeout": 5.0,
}


class Server:
    def __init__(self, data: Path, grpc_port: int = 0, http_port: int = 0) -> None:
        cmd = [sys.executable, "-m", "beam_nominal.cli", "serve", "--data-dir", str(data)]
        cmd += ["--port", str(grpc_port), "--http-port", str(http_port)]
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        out = self.proc.stdout
        threading.Thread(target=lambda: [lines.put(x) for x in out], daemon=True).start()
        m = READY.fullmatch(lines.get(timeout=60))
        assert m is not None
        self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


class Writer(threading.Thread):
    """Writes series ``<name>.0`` .. ``<name>.3`` at ``rate`` points/s; value = f(timestamp)."""

    def __init__(self, name: str, url: str, rate: int, stop: threading.Event, **options: Any) -> None:
        super().__init__(name=f"soak-{name}", daemon=True)
        self.label, self.url, self.rate, self.stop_event, self.options = name, url, rate, stop, options
        self.sent: collections.Counter[str] = collections.Counter()
        self.report: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        s = NominalStream(self.url, dataset_rid=RID, max_request_points=5_000, **RETRY, **self.options)
        batch, k = 500, 0
        period = batch / self.rate
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                channel = f"{self.label}.{k % 4}"
                start = self.sent[channel]
                ts = T0 + np.arange(start, start + batch, dtype=np.int64)
                s.enqueue_batch(channel, ts, value_of(ts))
                self.sent[channel] += batch
                k += 1
                next_at += period
                self.stop_event.wait(max(0.0, next_at - time.monotonic()))
            self.report = s.close(timeout=600)
        except BaseException as exc:
            self.error = exc


def value_of(ts: np.ndarray) -> np.ndarray:
    return ((ts - T0) % 1_000_003).astype(np.float64) / 7.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=5_000, help="points per second per writer")
    ap.add_argument("--fault-every", type=float, default=6.0, help="seconds between faults")
    ap.add_argument("--data-dir", help="default: a new temporary directory")
    args = ap.parse_args(argv)
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="soak-")) / "data"
    server = Server(data)
    gp, hp = server.grpc_port, server.http_port
    gproxy, hproxy = FaultProxy(gp, "grpc"), FaultProxy(hp, "http")
    stop = threading.Event()
    writers = [
        Writer("grpc", f"grpc://127.0.0.1:{gp}", args.rate, stop),
        Writer("http", f"http://127.0.0.1:{hp}/api", args.rate, stop),
        Writer("grpc-proxy", f"grpc://127.0.0.1:{gproxy.port}", args.rate, stop),
        Writer("http-proxy", f"http://127.0.0.1:{hproxy.port}/api", args.rate, stop, format="columnar"),
    ]
    for w in writers:
        w.start()
    faults: collections.Counter[str] = collections.Counter()
    kinds = ["sigkill-restart", "reset-at-connect", "reset-mid-request", "cut-after-commit", "stall"]
    started = time.monotonic()
    end = started + args.minutes * 60
    i = 0
    try:
        while time.monotonic() < end:
            stop.wait(min(args.fault_every, max(0.0, end - time.monotonic())))
            if time.monotonic() >= end:
                break
            kind = kinds[i % len(kinds)]
            i += 1
            if kind == "sigkill-restart":
                server.kill()
                time.sleep(1.0)  # down long enough for every writer to meet it
                server = Server(data, gp, hp)
            elif kind == "reset-at-connect":
                gproxy.drop_connections(2)
                hproxy.drop_connections(2)
            elif kind == "reset-mid-request":
                gproxy.drop_connections(2, after_bytes=400)
                hproxy.drop_connections(2, after_bytes=400)
            elif kind == "cut-after-commit":
                gproxy.cut_responses(2)
                hproxy.cut_responses(2)
            else:
                gproxy.stall(6.0)  # past the 5 s attempt deadline
                hproxy.stall(6.0)
            faults[kind] += 1
            print(f"[{time.monotonic() - started:7.1f}s] {kind}", flush=True)
    finally:
        stop.set()
        for w in writers:
            w.join(660)
    elapsed = time.monotonic() - started
    store = LocalStore(data)
    rows = []
    bad = False
    for w in writers:
        sent = stored = dups = missing = wrong = 0
        for channel, n in sorted(w.sent.items()):
            table = store.read(RID, channel) if n else None
            ts = table.column("timestamp").to_numpy() if table is not None else np.empty(0, np.int64)
            values = table.column("value").to_numpy() if table is not None else np.empty(0)
            uniq = np.unique(ts)
            want = T0 + np.arange(n, dtype=np.int64)
            sent += n
            stored += len(ts)
            dups += len(ts) - len(uniq)
            missing += len(np.setdiff1d(want, uniq))
            wrong += int((values != value_of(ts)).sum()) + len(np.setdiff1d(uniq, want))
        report = w.report
        retries = report.retries if report is not None else "-"
        failed = report.failed_points if report is not None else f"error: {w.error!r}"[:60]
        rows.append((w.label, sent, stored, dups, missing, wrong, retries, failed))
        bad |= bool(dups or missing or wrong or w.error or (report is not None and report.failed_points))
    server.kill()
    gproxy.close()
    hproxy.close()
    print()
    print(f"soak: {elapsed / 60:.1f} min, {args.rate} points/s per writer, a fault every {args.fault_every} s")
    print("faults injected: " + ", ".join(f"{k} x{faults[k]}" for k in kinds))
    print(f"proxy counters: gRPC {vars_of(gproxy)}; HTTP {vars_of(hproxy)}")
    print()
    head = ("writer", "points sent", "stored", "duplicates", "missing", "wrong", "retries", "failed")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    total = [sum(r[i] for r in rows) for i in range(1, 6)]
    print(f"| total | {' | '.join(map(str, total))} | | |")
    print("\nRESULT:", "FAIL" if bad else "OK (every point stored exactly once)")
    return 1 if bad else 0


def vars_of(p: FaultProxy) -> str:
    return f"connections={p.connections} dropped={p.dropped} cut={p.cut}"


if __name__ == "__main__":
    sys.exit(main())
