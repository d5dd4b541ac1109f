"""NominalStream vs nominal-streaming 0.10.5 on the same shapes, same sink, same machine.

Both clients write to an Avro file in nominal-streaming's ``AvroStream`` format (nominal-streaming's
``to_file`` and our ``AvroFileTarget``): the only sink both can reach without a Nominal account,
and it keeps a server from competing for the 2 cores. ``--grpc`` adds a column for NominalStream
sending to a LocalServer on loopback (the server's decode and Parquet commits then share the CPU).

Each round runs every shape once per client, interleaved, so drift in machine load hits both;
the table shows medians over rounds of points/s (wall time from the first call to the end of
close, i.e. delivered) and CPU seconds per million points (process time, all threads). Delivery is
verified by reading back the point count of every file written in the last round.

Run: ``.venv/bin/python benchmarks/bench_stream.py [--rounds 3] [--grpc]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

WIDE_CHANNELS = 6_480
T0 = 1_700_000_000_000_000_000


def _shapes(scale: float) -> dict[str, tuple[int, Callable[[Any], None]]]:
    """name -> (points, writer(stream)); the writer uses only API both clients share."""

    def n(x: int) -> int:
        return max(1, int(x * scale))

    wide_names = [f"ch{i:05d}" for i in range(WIDE_CHANNELS)]
    wide_rows = n(60)
    rng = np.random.default_rng(0)
    wide_vals = rng.random((4, WIDE_CHANNELS)).tolist()

    def wide(s: Any) -> None:
        for r in range(wide_rows):
            s.enqueue_from_dict(T0 + r, dict(zip(wide_names, wide_vals[r % 4], strict=True)))

    deep_batches = n(20)
    deep_ts = [np.arange(T0 + b * 100_000, T0 + (b + 1) * 100_000, dtype=np.int64) for b in range(deep_batches)]
    deep_vals = rng.random(100_000)

    def deep(s: Any) -> None:
        for ts in deep_ts:
            s.enqueue_batch("deep", ts, deep_vals)

    grouped_rounds = n(10)
    g_ts = np.arange(T0, T0 + 100, dtype=np.int64)
    g_vals = rng.random(100)
    g_names = [f"g{i:04d}" for i in range(1_000)]

    def grouped(s: Any) -> None:
        for r in range(grouped_rounds):
            ts = g_ts + r * 100
            for name in g_names:
                s.enqueue_batch(name, ts, g_vals)

    scalar_calls = n(400_000)

    def scalar(s: Any) -> None:
        enqueue = s.enqueue
        for i in range(scalar_calls):
            enqueue("scalar", T0 + i, 0.5)

    def farr(width: int, calls: int) -> Callable[[Any], None]:
        row = rng.random(width).tolist()

        def write(s: Any) -> None:
            f = s.enqueue_float_array
            for i in range(calls):
                f("farr", T0 + i, row)

        return write

    sa_calls = n(50_000)
    srow = [f"s{i}" for i in range(32)]

    def sarr(s: Any) -> None:
        f = s.enqueue_string_array
        for i in range(sa_calls):
            f("sarr", T0 + i, srow)

    fa8, fa64, fa512 = n(100_000), n(50_000), n(10_000)
    return {
        "wide": (wide_rows * WIDE_CHANNELS, wide),
        "deep": (deep_batches * 100_000, deep),
        "grouped": (grouped_rounds * 100_000, grouped),
        "scalar": (scalar_calls, scalar),
        "float_array_8": (fa8, farr(8, fa8)),
        "float_array_64": (fa64, farr(64, fa64)),
        "float_array_512": (fa512, farr(512, fa512)),
        "string_array_32": (sa_calls, sarr),
    }


def _count_avro(path: Path) -> int:
    import fastavro

    with open(path, "rb") as f:
        return sum(len(rec["timestamps"]) for rec in fastavro.reader(f))  # type: ignore[index,arg-type]


def run_ns(path: Path, write: Callable[[Any], None]) -> None:
    from nominal_streaming import NominalDatasetStream

    stream = NominalDatasetStream().to_file(path)
    with stream:
        write(stream)


def run_ours(path: Path, write: Callable[[Any], None]) -> None:
    from beam_nominal.stream import NominalStream

    with NominalStream(path, dataset_rid="ri.bench.1", linger=None) as stream:
        write(stream)


def _measure(fn: Callable[[], None]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the work per shape")
    ap.add_argument("--only", nargs="*", help="shape names to run")
    ap.add_argument("--grpc", action="store_true", help="also run NominalStream to a LocalServer")
    args = ap.parse_args(argv)
    shapes = _shapes(args.scale)
    if args.only:
        shapes = {k: v for k, v in shapes.items() if k in args.only}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    verified: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.grpc:
            from beam_nominal.server import LocalServer

            server = LocalServer(Path(tmp) / "server").start()
        try:
            for rnd in range(args.rounds):
                last = rnd == args.rounds - 1
                for name, (points, write) in shapes.items():
                    clients: list[tuple[str, Callable[[Path], None]]] = [
                        ("nominal-streaming", lambda p, w=write: run_ns(p, w)),
                        ("NominalStream", lambda p, w=write: run_ours(p, w)),
                    ]
                    if server is not None:
                        target = server.target

                        def grpc_run(p: Path, w: Callable[[Any], None] = write, t: str = target) -> None:
                            from beam_nominal.stream import NominalStream

                            rid = f"ri.bench.{p.stem.replace('_', '-')}"
                            with NominalStream(t, dataset_rid=rid, linger=None) as s:
                                w(s)

                        clients.append(("NominalStream-grpc", grpc_run))
                    for client, run in clients if rnd % 2 == 0 else list(reversed(clients)):
                        path = Path(tmp) / f"{client}-{name}-{rnd}.avro"
                        wall, cpu = _measure(lambda r=run, p=path: r(p))  # type: ignore[misc]
                        results.setdefault((name, client), []).append((wall, cpu))
                        if last and client != "NominalStream-grpc":
                            got = _count_avro(path)
                            verified[(name, client)] = "ok" if got == points else f"GOT {got} of {points}"
                        if path.exists():
                            os.unlink(path)
                print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            if server is not None:
                server.stop()
    has_grpc = args.grpc
    head = "| shape | points | nominal-streaming pts/s | NominalStream pts/s | ratio | CPU s/M pts ns / ours |"
    if has_grpc:
        head += " NominalStream→gRPC pts/s |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, (points, _) in shapes.items():
        ns = results[(name, "nominal-streaming")]
        us = results[(name, "NominalStream")]
        ns_rate = points / statistics.median(w for w, _ in ns)
        us_rate = points / statistics.median(w for w, _ in us)
        ns_cpu = statistics.median(c for _, c in ns) / points * 1e6
        us_cpu = statistics.median(c for _, c in us) / points * 1e6
        v_ns, v_us = verified.get((name, "nominal-streaming")), verified.get((name, "NominalStream"))
        note = "" if v_ns == v_us == "ok" else f" verify: nominal-streaming {v_ns}, ours {v_us}"
        row = (
            f"| {name} | {points:,} | {ns_rate / 1e6:.2f} M | {us_rate / 1e6:.2f} M | "
            f"{us_rate / ns_rate:.2f}x | {ns_cpu:.3f} / {us_cpu:.3f} |"
        )
        if has_grpc:
            g = results[(name, "NominalStream-grpc")]
            row += f" {points / statistics.median(w for w, _ in g) / 1e6:.2f} M |"
        print(row + note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
