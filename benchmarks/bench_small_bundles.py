"""What small bundles cost WriteToNominal in a streaming pipeline, with and without cross-bundle batching.

Streaming runners hand a sink small bundles, and without cross-bundle batching each bundle is a
flush: one acknowledged request (or more) per bundle. This measures points per second and
requests per point for bundles of 1 and 10 points, ``cross_bundle_batching`` off and on, on:

* ``direct``: Beam's Python DirectRunner in streaming mode (``BundleBasedDirectRunner``,
  ``streaming=True``) fed by ``TestStream``, one ``add_elements`` of B points per bundle;
* ``portable``: PortableRunner (``job_endpoint=embed``) with SDK workers in separate processes
  (``environment_type=EXTERNAL``, a ``worker_pool_main`` pool started from this interpreter), fed
  by an unbounded splittable DoFn that emits B points and then defers the rest of its
  restriction, so each bundle of the fused write stage holds B points. Its output PCollection is
  unbounded, as a streaming source's is.

Pass ``--cross off on default``: ``default`` leaves ``cross_bundle_batching`` unset, so
WriteToNominal picks it (on for an unbounded input).

The server is ``beam-nominal serve`` in its own process (gRPC on loopback), storing Parquet
durably before acknowledging, one commit per request: requests are counted as the commits of
the dataset, and every run reads back every series' count (delivery verified). Each
measurement runs in a fresh process, rounds interleave the configurations (order reversed every
other round), tables show medians. Wall time is the pipeline run's, start-up included (the worker
pool is started before it and not counted).

``--rtt-ms`` (default ``0 20``) delays the server's answer to each write call by that much, as a
remote Nominal's round trip would (a sleep in a gRPC server interceptor, nothing else changed).

Run: ``.venv/bin/python -m benchmarks.bench_small_bundles [--rounds 3] [--runners direct portable]
[--bundles 1 10] [--cross off on] [--rtt-ms 0 20] [--scale 1.0]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASE = 1_700_000_000_000_000_000
RID = "ri.bench.small-bundles"
CHANNELS = 4
# Bundles per run, by runner and bundle size. Twice these (`--scale 2`, 3 rounds) took 425 s.
BUNDLES = {("direct", 1): 150, ("direct", 10): 75, ("portable", 1): 150, ("portable", 10): 75}


def _points(n: int) -> Iterator[tuple[str, int, float]]:
    for i in range(n):
        yield f"sb.{i % CHANNELS}", BASE + i, i / 8


def _sink(target: str, cross: str) -> Any:
    from beam_nominal.beam import WriteToNominal

    kw: dict[str, Any] = {}
    if cross != "default":
        kw["cross_bundle_batching"] = cross == "on"
    return WriteToNominal(target, dataset_rid=RID, **kw)


def _direct(target: str, per: int, bundles: int, cross: str) -> float:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    stream = TestStream()
    points = list(_points(per * bundles))
    for b in range(bundles):
        stream = stream.add_elements([TimestampedValue(p, b) for p in points[b * per : (b + 1) * per]])
        stream = stream.advance_watermark_to(b + 1)
    stream = stream.advance_watermark_to_infinity()
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    _ = p | stream | _sink(target, cross)
    t0 = time.perf_counter()
    p.run().wait_until_finish()
    return time.perf_counter() - t0


def _portable(target: str, per: int, bundles: int, cross: str, pool: str) -> float:
    import apache_beam as beam
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.portable_runner import PortableRunner
    from apache_beam.transforms.core import RestrictionProvider

    class Whole(RestrictionProvider):  # type: ignore[misc]
        def initial_restriction(self, total: int) -> OffsetRange:
            return OffsetRange(0, total)

        def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
            return OffsetRestrictionTracker(restriction)

        def restriction_size(self, total: int, restriction: OffsetRange) -> int:
            return int(restriction.size())

        def split(self, total: int, restriction: OffsetRange) -> Iterator[OffsetRange]:
            yield restriction

    class Emit(beam.DoFn):  # type: ignore[misc]
        """B points, then the rest of the restriction deferred: one bundle per B points downstream."""

        @beam.DoFn.unbounded_per_element()
        def process(self, total: int, tracker: Any = beam.DoFn.RestrictionParam(Whole())) -> Iterator[Any]:  # noqa: B008
            i = tracker.current_restriction().start
            while tracker.try_claim(i):
                yield f"sb.{i % CHANNELS}", BASE + i, i / 8
                i += 1
                if i % per == 0:
                    tracker.defer_remainder()
                    return

    options = PipelineOptions(["--job_endpoint=embed", "--environment_type=EXTERNAL", f"--environment_config={pool}"])
    p = beam.Pipeline(runner=PortableRunner(), options=options)
    _ = p | beam.Create([per * bundles]) | beam.ParDo(Emit()) | _sink(target, cross)
    t0 = time.perf_counter()
    result = p.run()
    state = result.wait_until_finish(duration=300_000)
    if state != "DONE":
        raise RuntimeError(f"job ended in state {state}")
    return time.perf_counter() - t0


# The local server in its own process; with an RTT, each write call is answered that much later,
# as a remote Nominal would be (a delay at the transport seam, nothing else changed).
SERVE = """
import sys, time, grpc
from beam_nominal._wire import metadata as md
from beam_nominal.server import LocalServer

class Delay(grpc.ServerInterceptor):
    def intercept_service(self, continuation, details):
        if details.method == md.WRITE_COLUMN_BATCHES:
            time.sleep(float(sys.argv[2]) / 1000)
        return continuation(details)

with LocalServer(sys.argv[1], port=0, interceptors=[Delay()]) as server:
    print("listening on", server.target, flush=True)
    sys.stdin.read()
"""


def _serve(data: Path, rtt_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(data), str(rtt_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"beam-nominal serve did not start: {line!r}")
    return proc, line.split()[2]


def measure(runner: str, per: int, cross: str, rtt_ms: float, scale: float) -> dict[str, Any]:
    """One measurement, in this process (run it in a fresh one)."""
    from beam_nominal.server import LocalStore

    bundles = max(10, int(BUNDLES[(runner, per)] * scale))
    with tempfile.TemporaryDirectory(prefix="bench-small-") as tmp:
        server, target = _serve(Path(tmp) / "data", rtt_ms)
        try:
            if runner == "direct":
                wall = _direct(target, per, bundles, cross)
            else:
                sys.path.insert(0, str(ROOT / "tests" / "beam"))
                from _worker_pool import worker_pool

                env_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
                with worker_pool(
                    sys.executable, cwd=Path(tmp), log=Path(tmp) / "pool.log", pythonpath=[env_path]
                ) as pool:
                    wall = _portable(target, per, bundles, cross, pool)
        finally:
            assert server.stdin is not None
            server.stdin.close()  # the server stops when its stdin ends
            server.wait(timeout=30)
        store = LocalStore(Path(tmp) / "data")
        stored = sum(s.count for s in store.list_series(RID))
        commits = len(list((Path(tmp) / "data").glob("*/commits/*.parquet")))
    points = per * bundles
    return {
        "runner": runner,
        "per": per,
        "cross": cross,
        "rtt": rtt_ms,
        "bundles": bundles,
        "points": points,
        "wall": wall,
        "requests": commits,
        "verified": stored == points,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runners", nargs="*", default=["direct", "portable"], choices=["direct", "portable"])
    ap.add_argument("--bundles", nargs="*", type=int, default=[1, 10], choices=[1, 10])
    ap.add_argument("--cross", nargs="*", default=["off", "on"], choices=["off", "on", "default"])
    ap.add_argument("--rtt-ms", nargs="*", type=float, default=[0.0, 20.0], help="server answer delays")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--one", nargs=4, metavar=("RUNNER", "PER", "CROSS", "RTT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        runner, per, cross, rtt = args.one
        print(json.dumps(measure(runner, int(per), cross, float(rtt), args.scale)), flush=True)
        return 0

    configs = [(r, b, c, t) for t in args.rtt_ms for r in args.runners for b in args.bundles for c in args.cross]
    results: dict[tuple[str, int, str, float], list[dict[str, Any]]] = {c: [] for c in configs}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    t0 = time.monotonic()
    for rnd in range(args.rounds):
        for runner, per, cross, rtt in configs if rnd % 2 == 0 else configs[::-1]:
            cmd = [sys.executable, "-m", "benchmarks.bench_small_bundles", "--scale", str(args.scale)]
            cmd += ["--one", runner, str(per), cross, str(rtt)]
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
                return 1
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results[(runner, per, cross, rtt)].append(r)
            print(
                f"round {rnd + 1} rtt={rtt:g}ms {runner:8} {per:>2}/bundle cross={cross:7} "
                f"{r['points'] / r['wall']:8.0f} points/s "
                f"{r['requests'] / r['points']:.3f} requests/point verified={r['verified']}",
                file=sys.stderr,
                flush=True,
            )
    print(f"\n{args.rounds} rounds, {time.monotonic() - t0:.0f} s\n")
    print(
        "| server RTT | runner | points per bundle | cross_bundle_batching | bundles | points/s | requests/point "
        "| ms per bundle | verified |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (runner, per, cross, rtt), rs in results.items():
        pps = statistics.median(r["points"] / r["wall"] for r in rs)
        rpp = statistics.median(r["requests"] / r["points"] for r in rs)
        ms = statistics.median(r["wall"] * 1000 / r["bundles"] for r in rs)
        ok = "yes, every round" if all(r["verified"] for r in rs) else "NO"
        print(
            f"| {rtt:g} ms | {runner} | {per} | {cross} | {rs[0]['bundles']} | {pps:,.0f} | {rpp:.4f} "
            f"| {ms:.2f} | {ok} |"
        )
    return 0 if all(r["verified"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
