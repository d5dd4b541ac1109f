"""How fast the local ingest server stores WriteColumnBatches requests from one Python client.

One client sends pre-encoded requests of ~1 MiB and ~4 MiB of doubles, each with its own
idempotency key as a real client sends them, over one gRPC channel, and keeps 1 or more requests
in flight. Shapes: ``grouped`` (1000 series per request) and ``deep`` (one series per request).
Every reply is a durable commit (Parquet written, fsynced, renamed, directory fsynced). After
each round the stored counts are read back and checked.

    .venv/bin/python benchmarks/bench_server.py                      # server in its own process
    .venv/bin/python benchmarks/bench_server.py --in-flight 1 2 4    # several in-flight settings
    .venv/bin/python benchmarks/bench_server.py --in-process         # LocalServer in this process
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np

from beam_nominal._wire import metadata as md
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.decode import decode_request
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.server.store import _Committer

RID = "ri.bench.server"
SHAPES = {"grouped": 1000, "deep": 1}  # series per request; --series overrides grouped
T0 = 1_700_000_000_000_000_000


def stages(requests: list[bytes]) -> tuple[float, float]:
    """Median milliseconds per request of the server's two stages, without gRPC: decode, store."""
    decode_ms, store_ms = [], []
    with tempfile.TemporaryDirectory(prefix="bench-stages-") as tmp:
        committer = _Committer(LocalStore(tmp))
        for body in requests:
            t0 = time.perf_counter()
            decoded = decode_request(body)
            t1 = time.perf_counter()
            committer.commit(decoded.dataset_rid, decoded.batches, None)
            t2 = time.perf_counter()
            decode_ms.append((t1 - t0) * 1e3)
            store_ms.append((t2 - t1) * 1e3)
    return statistics.median(decode_ms), statistics.median(store_ms)


def build_requests(target_bytes: int, count: int, round_no: int, series: int) -> tuple[list[bytes], int]:
    """``count`` distinct requests of about ``target_bytes``; returns them and points per request."""
    rng = np.random.default_rng(round_no)

    def make(per_series: int, i: int) -> bytes:
        base = T0 + (round_no * count + i) * per_series * 1_000_000
        ts = base + np.arange(per_series, dtype=np.int64) * 1_000_000
        batches = [
            SeriesBatch(
                SeriesKey.of(f"ch{s:04d}", {"rig": "bench"}),
                ValueType.DOUBLE,
                ts,
                rng.standard_normal(per_series),
            )
            for s in range(series)
        ]
        return encode_request(RID, batches)

    probe = make(16, 0)
    per_series = max(1, round(16 * target_bytes / len(probe)))
    return [make(per_series, i) for i in range(count)], per_series * series


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; nan elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def serve(data_dir: Path, in_process: bool) -> Iterator[tuple[str, int]]:
    """The server's target and process id (this process when in-process)."""
    if in_process:
        with LocalServer(data_dir) as server:
            yield server.target, os.getpid()
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_nominal.cli", "serve", "--data-dir", str(data_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        m = re.fullmatch(r"listening on (grpc://\S+)\n", proc.stdout.readline())
        if m is None:
            raise RuntimeError("server did not start")
        yield m.group(1), proc.pid
    finally:
        proc.terminate()
        proc.wait(60)


def send_all(target: str, requests: list[bytes], in_flight: int) -> float:
    channel = grpc.insecure_channel(
        target.split("://", 1)[1], options=[("grpc.max_send_message_length", md.MAX_MESSAGE_BYTES)]
    )
    call = channel.unary_unary(md.WRITE_COLUMN_BATCHES)
    keys = [md.idempotency_key(r) for r in requests]
    grpc.channel_ready_future(channel).result(timeout=30)
    next_index = iter(range(len(requests)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            call(requests[i], metadata=[(md.IDEMPOTENCY_KEY, keys[i])], timeout=120)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(in_flight)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    channel.close()
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mib", type=float, nargs="+", default=[1.0, 4.0])
    p.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["grouped", "deep"])
    p.add_argument("--requests", type=int, default=40, help="requests per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--in-flight", type=int, nargs="+", default=[1, 2])
    p.add_argument("--in-process", action="store_true", help="run LocalServer in this process")
    p.add_argument("--series", type=int, default=SHAPES["grouped"], help="series per grouped request")
    args = p.parse_args()
    shapes = {**SHAPES, "grouped": args.series}

    print(
        f"server {'in-process' if args.in_process else 'subprocess'}, one client, double series, "
        f"{args.requests} requests x {args.rounds} rounds (median)"
    )
    print(
        "| shape | request | points/request | in flight | requests/s | points/s | MB/s | server CPU ms/request "
        "| decode ms | store ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        series = shapes[shape]
        for size in args.sizes_mib:
            with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
                data_dir = Path(tmp)
                stored = 0
                rates: dict[int, list[float]] = {k: [] for k in args.in_flight}
                cpu: dict[int, list[float]] = {k: [] for k in args.in_flight}
                with serve(data_dir, args.in_process) as (target, pid):
                    for r in range(args.rounds):
                        requests, points = build_requests(int(size * 2**20), args.requests, r, series)
                        nbytes = sum(map(len, requests))
                        # Interleaved, each in-flight setting with its own keys (distinct requests).
                        for j, in_flight in enumerate(args.in_flight):
                            if j:
                                requests, _ = build_requests(
                                    int(size * 2**20), args.requests, r + 1000 * j, series
                                )
                            before = cpu_seconds(pid)
                            rates[in_flight].append(send_all(target, requests, in_flight))
                            cpu[in_flight].append((cpu_seconds(pid) - before) / len(requests))
                            stored += points * len(requests)
                            got = sum(s.count for s in LocalStore(data_dir).list_series(RID))
                            if got != stored:
                                raise SystemExit(f"read back {got} points, expected {stored}")
                n = args.requests
                decode_ms, store_ms = stages(requests[: min(n, 10)])
                for in_flight, times in rates.items():
                    elapsed = statistics.median(times)
                    print(
                        f"| {shape} | {nbytes / n / 2**20:.2f} MiB | {points:,} | {in_flight} | {n / elapsed:.1f} | "
                        f"{n * points / elapsed / 1e6:.2f} M | {nbytes / elapsed / 1e6:.0f} | "
                        f"{statistics.median(cpu[in_flight]) * 1e3:.1f} | "
                        f"{decode_ms:.1f} | {store_ms:.1f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
