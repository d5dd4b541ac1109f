"""Freshness on Prism streaming: the time from a point's arrival to its acknowledgement, at a steady rate.

A live dashboard reads Nominal while the job runs: what it sees lags the data by this much. The
pipeline is ``PeriodicImpulse | FlatMap(points of the tick) | WriteToNominal`` on ``PrismRunner``
(its SDK worker in the measuring process, ``LOOPBACK``), streaming, ``--rate`` points/s (default
10,000) as ``--ticks-per-s`` ticks (default 100) for ``--seconds`` (default 20), into
``beam-nominal serve`` in its own process over gRPC. ``cross_bundle_batching`` is left unset, which
is off on Prism (it loses elements of ``GroupIntoBatches``; docs/runners.md): every bundle is a
flush, so this is the freshness of per-bundle writes. ``--rates`` measures several rates.

A point's timestamp is its tick's wall-clock time, when ``PeriodicImpulse`` releases the tick (it
emits a tick at or after its timestamp): the point's arrival. Its acknowledgement is the
modification time of the server's commit that holds it (one Parquet file per acknowledged
request, written, fsynced and renamed before the answer). Freshness = commit time - timestamp,
for every point; the table shows its p50, p90, p99 and max, the requests (commits) per second,
and checks delivery (every point stored once). The first and last 2 s of a run are left out of the
percentiles (start-up; the end, where the source stops). Each run is a fresh process; rounds
interleave the rates, order reversed every other round; medians over rounds.

Run: ``.venv/bin/python -m benchmarks.bench_freshness --prism "$(.venv/bin/python tools/engines.py --path)"
[--rounds 3] [--seconds 20] [--rates 10000] [--ticks-per-s 100]``
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_beam import _ServerProcess

RID = "ri.bench.freshness"
CHANNELS = 10
SETTLE_S = 2.0


def run(prism: str, target: str, rid: str, seconds: float, rate: int, ticks_per_s: int) -> float:
    """One streaming job; returns its wall seconds."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.prism_runner import PrismRunner
    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    from beam_nominal.beam import WriteToNominal

    per_tick = rate // ticks_per_s
    interval = 1.0 / ticks_per_s

    def points(ts: Any) -> list[tuple[str, int, float]]:
        t_ns = round(float(ts) * 1e6) * 1_000  # the tick's wall-clock time (a float of seconds), in µs
        return [(f"fresh.{k % CHANNELS}", t_ns + k, float(k)) for k in range(per_tick)]

    options = PipelineOptions([f"--prism_location={prism}", "--prism_log_level=warn", "--streaming"])
    start = time.time() + 3.0  # the job's start-up before the first tick
    t0 = time.perf_counter()
    with beam.Pipeline(runner=PrismRunner(), options=options) as p:
        ticks = p | PeriodicImpulse(start_timestamp=start, stop_timestamp=start + seconds, fire_interval=interval)
        _ = ticks | beam.FlatMap(points) | WriteToNominal(target, dataset_rid=rid)
    return time.perf_counter() - t0


def analyse(data_dir: Path, rid: str, expected: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    lags, firsts, commits = [], [], []
    for path in sorted((data_dir / rid / "commits").glob("*.parquet")):
        committed = path.stat().st_mtime_ns
        ts = pq.read_table(path, columns=["timestamp"]).column("timestamp").to_numpy().astype(np.int64)
        lags.append(committed - ts)
        firsts.append(ts)
        commits.append(committed)
    lag = np.concatenate(lags)
    ts = np.concatenate(firsts)
    assert len(ts) == expected and len(np.unique(ts)) == expected, (len(ts), len(np.unique(ts)), expected)
    lo, hi = ts.min() + int(SETTLE_S * 1e9), ts.max() - int(SETTLE_S * 1e9)
    steady = lag[(ts >= lo) & (ts <= hi)] / 1e9
    span = (max(commits) - min(commits)) / 1e9 or 1.0
    return {
        "p50": float(np.percentile(steady, 50)),
        "p90": float(np.percentile(steady, 90)),
        "p99": float(np.percentile(steady, 99)),
        "max": float(steady.max()),
        "requests_per_s": len(commits) / span,
        "requests": len(commits),
    }


def _child(argv: list[str]) -> int:
    prism, seconds, rate, ticks_per_s = argv
    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp, _ServerProcess(Path(tmp) / "server") as server:
        wall = run(prism, server.target, RID, float(seconds), int(rate), int(ticks_per_s))
        expected = int(float(seconds) * int(ticks_per_s)) * (int(rate) // int(ticks_per_s))
        out = analyse(Path(tmp) / "server", RID, expected)
    out["wall"] = wall
    print(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--prism", required=True, metavar="PATH", help="the Prism binary (tools/engines.py --path)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rates", type=int, nargs="+", default=[10_000], help="points per second")
    ap.add_argument("--ticks-per-s", type=int, default=100)
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    args = ap.parse_args(argv)
    results: dict[int, list[dict[str, Any]]] = {r: [] for r in args.rates}
    for rnd in range(args.rounds):
        for rate in args.rates if rnd % 2 == 0 else args.rates[::-1]:
            cmd = [sys.executable, "-m", "benchmarks.bench_freshness", "--child", args.prism]
            cmd += [str(args.seconds), str(rate), str(args.ticks_per_s)]
            reply = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            results[rate].append(json.loads(reply.strip().splitlines()[-1]))
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(
        f"PrismRunner streaming (LOOPBACK), {args.ticks_per_s} ticks/s for {args.seconds:.0f} s, per-bundle "
        f"writes, {args.rounds} rounds, medians; freshness = commit time - point time, first and last "
        f"{SETTLE_S:.0f} s left out\n"
    )
    print("| points/s | p50 s | p90 s | p99 s | max s | requests/s | verified |")
    print("|---|---|---|---|---|---|---|")
    for rate, runs in results.items():

        def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        print(
            f"| {rate:,} | {med('p50'):.3f} | {med('p90'):.3f} | {med('p99'):.3f} | {med('max'):.3f} | "
            f"{med('requests_per_s'):.1f} | every point once, every round |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
