"""NominalStream vs nominal-streaming 0.10.5 on the same shapes, same machine, interleaved.

Sinks. nominal-streaming can only write locally to an Avro file (``to_file``), so it always does.
NominalStream runs twice per shape:

- ``avro``: to an Avro file in the same ``AvroStream`` format (our ``AvroFileTarget``): the same
  sink, so wall time compares like with like end to end, including each library's Avro writer;
- ``encode only``: requests are encoded to wire bytes and dropped (a target whose ``send``
  only reads ``request.body``): the client's own cost with no sink, for reading the others;
- ``grpc``: to a ``beam-nominal serve`` subprocess on loopback over Nominal's
  ``WriteColumnBatches`` protocol, our production path. Only the client process's CPU is counted;
  the server competes for the same 2 cores in wall time, which counts against us.

Each round runs every shape once per client, in alternating order, so drift in machine load hits
all of them; the table shows medians over rounds of points/s (wall time from the first call to the
end of close, i.e. everything delivered) and CPU seconds per million points (process time, all
threads of the measuring process). Delivery is verified every round: Avro files are read back and
counted, and the server's stored series are counted.

Every measurement runs in a fresh process, after two unmeasured warm-up runs of the same client
and shape in that process. Measured in one long-lived process instead, each figure depended on what
ran before it: grouped to Avro gave 1.65-1.69x after one other shape and 1.33-1.40x after the
whole sequence, and nominal-streaming's CPU per point moved by 25% with the process's history
(its allocations reuse a heap that numpy work has grown).

Each shape's work is sized so that a nominal-streaming run lasts about 0.3 s or more: with runs
of 0.1-0.2 s, scheduling jitter on the 2 shared cores moved single ratios by up to 30%.

``--old TREE`` adds ``NominalStream→avro`` from another checkout (``benchmarks/trees.py``).

Run: ``.venv/bin/python benchmarks/bench_stream.py [--rounds 5] [--scale 1.0] [--only deep wide]
[--old TREE]``;
``--curve SHAPE [RUNS]`` prints each client's rate over RUNS runs in a row in one process (how much
warm-up a client needs).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks import trees
except ImportError:  # run as a script: its own directory is first on the path
    import trees  # type: ignore[no-redef]

WIDE_CHANNELS = 6_480
#: Shapes run only when named (``--only``): at a million series the local server's CPU a point is
#: many times a client's and bounds every client's wall time; ``client_cpu`` measures the client.
AT_SCALE = ("scalar_10k_series", "scalar_1m_series")
T0 = 1_700_000_000_000_000_000


def _shapes(scale: float) -> dict[str, tuple[int, Callable[[Any], None]]]:
    """name -> (points, writer(stream)); the writer uses only API both clients share."""

    def n(x: int) -> int:
        return max(1, int(x * scale))

    wide_names = [f"ch{i:05d}" for i in range(WIDE_CHANNELS)]
    wide_rows = n(200)
    rng = np.random.default_rng(0)
    wide_vals = rng.random((4, WIDE_CHANNELS)).tolist()

    def wide(s: Any) -> None:
        for r in range(wide_rows):
            s.enqueue_from_dict(T0 + r, dict(zip(wide_names, wide_vals[r % 4], strict=True)))

    deep_batches = n(50)
    deep_ts = [np.arange(T0 + b * 100_000, T0 + (b + 1) * 100_000, dtype=np.int64) for b in range(deep_batches)]
    deep_vals = rng.random(100_000)

    def deep(s: Any) -> None:
        for ts in deep_ts:
            s.enqueue_batch("deep", ts, deep_vals)

    grouped_rounds = n(40)
    g_ts = np.arange(T0, T0 + 100, dtype=np.int64)
    g_vals = rng.random(100)
    g_names = [f"g{i:04d}" for i in range(1_000)]

    def grouped(s: Any) -> None:
        for r in range(grouped_rounds):
            ts = g_ts + r * 100
            for name in g_names:
                s.enqueue_batch(name, ts, g_vals)

    scalar_calls = n(1_000_000)

    def scalar(s: Any) -> None:
        enqueue = s.enqueue
        for i in range(scalar_calls):
            enqueue("scalar", T0 + i, 0.5)

    def spread(series: int) -> Callable[[Any], None]:
        # Single calls spread over many channels, each a series (a test rig's thousands of
        # channels, tags multiplying them); the names made before the run, as a decoder holds them.
        names = [f"c{i:07d}" for i in range(series)]

        def write(s: Any) -> None:
            enqueue = s.enqueue
            for i in range(scalar_calls):
                enqueue(names[i % series], T0 + i, 0.5)

        return write

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

    # Rows that differ from call to call (a sample id first): the server's decoder splits a row
    # that repeats only once, which string_array_32's one row always takes.
    sd_rows = [[f"id{i}", *srow[1:]] for i in range(sa_calls)]

    def sarr_distinct(s: Any) -> None:
        f = s.enqueue_string_array
        for i, row in enumerate(sd_rows):
            f("sarr", T0 + i, row)

    fa8, fa64, fa512 = n(200_000), n(50_000), n(10_000)
    return {
        "wide": (wide_rows * WIDE_CHANNELS, wide),
        "deep": (deep_batches * 100_000, deep),
        "grouped": (grouped_rounds * 100_000, grouped),
        "scalar": (scalar_calls, scalar),
        "scalar_10k_series": (scalar_calls, spread(10_000)),
        "scalar_1m_series": (scalar_calls, spread(1_000_000)),
        "float_array_8": (fa8, farr(8, fa8)),
        "float_array_64": (fa64, farr(64, fa64)),
        "float_array_512": (fa512, farr(512, fa512)),
        "string_array_32": (sa_calls, sarr),
        "string_array_32_distinct": (sa_calls, sarr_distinct),
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


ACKED: dict[str, int] = {}


def run_ours(target: Any, rid: str, write: Callable[[Any], None]) -> None:
    from beam_nominal.stream import NominalStream

    # linger=None: the Beam path's setting; cuts depend only on the data.
    stream = NominalStream(target, dataset_rid=rid, linger=None)
    write(stream)
    ACKED[rid] = stream.close().points


class EncodeOnly:
    """A target that encodes each request to its wire bytes and drops them."""

    def send(self, request: Any, timeout: float | None = None) -> None:
        request.body  # noqa: B018 - encoding is the work measured

    def close(self) -> None:
        pass


class Server:
    """``beam-nominal serve`` as a subprocess, so its CPU is not counted as the client's.

    ``target`` is its gRPC URL; with ``http=True`` it also serves Nominal's HTTP API at ``http_url``.
    """

    def __init__(self, data_dir: Path, http: bool = False) -> None:
        exe = Path(sys.executable).parent / "beam-nominal"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "beam_nominal.cli"]
        self.data_dir = data_dir
        extra = ["--http-port", "0"] if http else []
        self.proc = subprocess.Popen(
            [*cmd, "serve", "--data-dir", str(data_dir), "--port", "0", *extra], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (grpc://\S+)", line)
        h = re.search(r"(https?://\S+)", line)
        if m is None or (http and h is None):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.target = m.group(1)
        self.http_url = h.group(1) if h is not None else ""

    def count(self, rid: str) -> int:
        from beam_nominal.server import LocalStore

        return sum(i.count for i in LocalStore(self.data_dir).list_series(rid))

    def cpu_seconds(self) -> float | None:
        """The server process's CPU time so far (user and system, all threads), from Linux's
        /proc; None where there is none."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def round_spread(base_walls: list[float], walls: list[float]) -> str:
    """The lowest and highest of ``base``'s wall time over another client's, round by round (one
    round's runs are measured close together): how far a median's ratio moves on shared cores."""
    ratios = [b / w for b, w in zip(base_walls, walls, strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}x"


def _measure(fn: Callable[[], None]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


CLIENTS = ("nominal-streaming", "NominalStream→avro", "NominalStream→grpc", "NominalStream→encode")
AVRO_OLD = "NominalStream→avro" + trees.OLD


def _child(shape: str, client: str, scale: float, path: str, rid: str, target: str) -> int:
    """One measurement in a process of its own, after two unmeasured warm-up runs of the same
    client and shape (first-touch page faults, allocator growth and the interpreter's warm-up
    are not what a long-running stream pays; ``--curve`` shows nominal-streaming's scalar calls
    need two runs to settle); prints ``wall cpu acknowledged``."""
    write = _shapes(scale)[shape][1]

    def run(path: str, rid: str) -> None:
        if client == "nominal-streaming":
            run_ns(Path(path), write)
        elif client == "NominalStream→avro":
            run_ours(path, rid, write)
        elif client == "NominalStream→grpc":
            run_ours(target, rid, write)
        else:
            run_ours(EncodeOnly(), rid, write)

    for k in range(2):
        warm = f"{path}.warm{k}.avro"
        run(warm, f"{rid}-warm{k}")
        if os.path.exists(warm):
            os.unlink(warm)
    wall, cpu = _measure(lambda: run(path, rid))
    print(wall, cpu, ACKED.get(rid, -1))
    return 0


def _curve(shape: str, runs: int) -> int:
    """Warm-up curve: ``runs`` runs in a row of one shape in one process, per client (Avro sinks),
    each client in a fresh process; prints each run's M points/s and CPU s per M points."""
    for client in ("nominal-streaming", "NominalStream→avro"):
        out = subprocess.run(
            [sys.executable, __file__, "--curve-one", shape, client, str(runs)],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout.strip()
        print(f"{shape} {client}: {out}")
    return 0


def _curve_one(shape: str, client: str, runs: int) -> int:
    points, write = _shapes(1.0)[shape]
    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            path = str(Path(tmp) / f"{i}.avro")
            if client == "nominal-streaming":
                wall, cpu = _measure(lambda path=path: run_ns(Path(path), write))
            else:
                wall, cpu = _measure(lambda path=path, i=i: run_ours(path, f"ri.curve.{i}", write))
            rates.append(f"{points / wall / 1e6:.2f} M/{cpu / points * 1e6:.3f}")
            os.unlink(path)
    print(", ".join(rates))
    return 0


def _run_child(
    shape: str, client: str, scale: float, path: Path, rid: str, target: str, old: Path | None = None
) -> tuple[float, float, int]:
    base, is_old = trees.split(client)
    env, cwd = trees.child_env(old if is_old else None)
    out = subprocess.run(
        [sys.executable, __file__, "--child", shape, base, str(scale), str(path), rid, target],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        shape, client, scale, path, rid, target = argv[1:7]
        return _child(shape, client, float(scale), path, rid, target)
    if argv[:1] == ["--curve-one"]:
        return _curve_one(argv[1], argv[2], int(argv[3]))
    if argv[:1] == ["--curve"]:
        return _curve(argv[1], int(argv[2]) if len(argv) > 2 else 6)
    ap = argparse.ArgumentParser(description="NominalStream vs nominal-streaming")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the work per shape")
    ap.add_argument("--only", nargs="*", help="shape names to run")
    ap.add_argument("--old", type=Path, metavar="TREE", help="also NominalStream→avro from this checkout")
    args = ap.parse_args(argv)
    clients = CLIENTS + ((AVRO_OLD,) if args.old else ())
    shapes = _shapes(args.scale)
    shapes = {k: v for k, v in shapes.items() if (k in args.only if args.only else k not in AT_SCALE)}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "server")
        try:
            for rnd in range(args.rounds):
                for name, (points, _) in shapes.items():
                    order = clients if rnd % 2 == 0 else clients[::-1]
                    for client in order:
                        path = Path(tmp) / f"{name}-{rnd}.avro"
                        rid = f"ri.bench.{name.replace('_', '-')}-{rnd}"
                        # Each measurement in a fresh process: what one client leaves behind (heap,
                        # threads, allocator state) must not weigh on the next one.
                        wall, cpu, acked = _run_child(name, client, args.scale, path, rid, server.target, args.old)
                        results.setdefault((name, client), []).append((wall, cpu))
                        if client == "NominalStream→encode":
                            got = acked  # nothing is stored: the stream's acknowledged count
                        elif client == "NominalStream→grpc":
                            got = server.count(rid)
                        else:
                            got = _count_avro(path)
                        if got != points:
                            bad.append(f"{client} {name} round {rnd}: {got} of {points} points delivered")
                        if path.exists():
                            os.unlink(path)
                        shutil.rmtree(Path(tmp) / "server" / rid, ignore_errors=True)
                        for k in range(2):
                            shutil.rmtree(Path(tmp) / "server" / f"{rid}-warm{k}", ignore_errors=True)
                print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            server.stop()
    old = args.old is not None
    print(
        "| shape | points | nominal-streaming M pts/s | ours→avro M pts/s (ratio) | ours→gRPC M pts/s (ratio) "
        "| ours, encode only M pts/s (ratio) |"
        + (" old→avro M pts/s (ratio) |" if old else "")
        + " CPU s / M pts: ns, ours→avro, ours→gRPC, ours encode only" + (", old→avro |" if old else " |")
    )
    print("|---|---|---|---|---|---|" + ("---|" if old else "") + "---|")
    for name, (points, _) in shapes.items():
        rate = {c: points / statistics.median(w for w, _ in results[(name, c)]) for c in clients}
        cpu = {c: statistics.median(u for _, u in results[(name, c)]) / points * 1e6 for c in clients}
        ns = rate["nominal-streaming"]
        ours = clients[1:]
        print(
            f"| {name} | {points:,} | {ns / 1e6:.2f} | "
            + " | ".join(f"{rate[c] / 1e6:.2f} ({rate[c] / ns:.2f}x)" for c in ours)
            + " | "
            + ", ".join(f"{cpu[c]:.3f}" for c in clients)
            + " |"
        )
    print(f"delivery verified: {'all points, every run' if not bad else '; '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
