"""WriteToNominal vs a DoFn wrapping nominal-streaming vs a discard sink, in one Beam run each.

Every pipeline is ``Impulse | FlatMap(generate) | sink`` on ``FnApiRunner`` in-process: the data is
made inside the pipeline, so the generator's cost is the same for every sink and the discard sink
shows the ceiling Beam itself allows. Sinks:

* ``discard``: a DoFn that drops elements;
* ``nominal-streaming``: a DoFn opening ``NominalDatasetStream().to_file(...)`` per bundle (its
  fastest local sink, an Avro file), the way users wrap it today;
* ``WriteToNominal→avro``: our sink writing the same Avro format (like for like);
* ``WriteToNominal→gRPC``: our sink sending to ``beam-nominal serve`` (the local server, in its
  own process as Nominal would be) on loopback, which stores Parquet durably before acknowledging.

Shapes: ``series`` (10,000-point numpy series elements), ``points`` (single-point tuples) and
``table`` (pyarrow RecordBatches, a timestamp column and 50 channel columns). Rounds interleave the
sinks (order reversed every other round); the table shows medians of points/s over rounds, wall
time of the whole pipeline run (start-up included), and ratios to the nominal-streaming DoFn.
Delivery is verified every round: Avro files are read back and counted, the server's series
counts summed. Each pipeline runs in a fresh process, after one unmeasured warm-up run of the same
sink and shape in that process: what one sink leaves behind (allocator state, threads, a grown
heap) must not weigh on the next one's figures.

Wall time includes a wait of 0-200 ms at the end of every bundle, whatever the sink: the SDK
worker's state sampler thread sleeps in periods growing to 200 ms and the bundle joins it
(``StateSampler.stop``). Runs of a few seconds keep that under a few percent; the CPU table
is free of it.

Run: ``.venv/bin/python -m benchmarks.bench_beam [--rounds 5] [--scale 1.0]``
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

T0 = 1_700_000_000_000_000_000
SERIES_LEN = 10_000
TABLE_ROWS = 2_000
TABLE_CHANNELS = 50


def gen_series(_: Any, n_elements: int) -> Iterator[Any]:
    ts = np.arange(SERIES_LEN, dtype=np.int64)
    vals = np.random.default_rng(0).random(SERIES_LEN)
    for i in range(n_elements):
        yield f"s{i % 100:03d}", T0 + (i // 100) * SERIES_LEN + ts, vals


def gen_points(_: Any, n_points: int) -> Iterator[Any]:
    for i in range(n_points):
        yield f"p{i % 100:03d}", T0 + i, i * 0.5


def gen_tables(_: Any, n_tables: int) -> Iterator[Any]:
    import pyarrow as pa

    rng = np.random.default_rng(0)
    cols = {f"t{c:02d}": pa.array(rng.random(TABLE_ROWS)) for c in range(TABLE_CHANNELS)}
    for i in range(n_tables):
        ts = pa.array(T0 + i * TABLE_ROWS + np.arange(TABLE_ROWS, dtype=np.int64))
        yield pa.RecordBatch.from_pydict({"timestamp": ts, **cols})


class Discard(beam.DoFn):  # type: ignore[misc]
    def process(self, element: Any) -> Any:
        return ()


class NominalStreamingDoFn(beam.DoFn):  # type: ignore[misc]
    """What users write today: nominal-streaming opened per bundle, written to an Avro file.

    One subclass per shape, so ``process`` is the one call a user would write for their data:
    no dispatch, the stream's method bound once per bundle.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.stream: Any = None
        self.n = 0

    def start_bundle(self) -> None:
        from nominal_streaming import NominalDatasetStream

        self.n += 1
        path = Path(self.directory) / f"ns-{os.getpid()}-{id(self)}-{self.n}.avro"
        self.stream = NominalDatasetStream().to_file(path)
        self.stream.__enter__()
        self.enqueue = self.stream.enqueue
        self.enqueue_batch = self.stream.enqueue_batch

    def finish_bundle(self) -> None:
        self.stream.__exit__(None, None, None)
        self.stream = None


class NominalStreamingPoints(NominalStreamingDoFn):
    def process(self, element: Any) -> None:
        channel, timestamp, value = element
        self.enqueue(channel, timestamp, value)


class NominalStreamingSeries(NominalStreamingDoFn):
    def process(self, element: Any) -> None:
        channel, timestamps, values = element
        self.enqueue_batch(channel, timestamps, values)


class NominalStreamingTable(NominalStreamingDoFn):
    def process(self, element: Any) -> None:
        # nominal-streaming has no table call: one batch call per column.
        ts = element.column(0).to_numpy()
        for name, col in zip(element.schema.names[1:], element.columns[1:], strict=True):
            self.enqueue_batch(name, ts, col.to_numpy())


NS_DOFNS = {"points": NominalStreamingPoints, "series": NominalStreamingSeries, "table": NominalStreamingTable}


SHAPES: dict[str, tuple[Callable[..., Iterator[Any]], Callable[[float], tuple[int, int]]]] = {
    # name -> (generator, scale -> (generator argument, points))
    "series": (gen_series, lambda s: (max(1, int(600 * s)), max(1, int(600 * s)) * SERIES_LEN)),
    # 4.8 M points: runs of ~5-7 s, where one 0.195 s state-sampler step (see the module doc) is
    # ~3% of a ratio; at 2.4 M the same two sinks read 1.19x or 1.29x by which side of a step
    # our run ends.
    "points": (gen_points, lambda s: (max(1, int(4_800_000 * s)), max(1, int(4_800_000 * s)))),
    "table": (
        gen_tables,
        lambda s: (max(1, int(60 * s)), max(1, int(60 * s)) * TABLE_ROWS * TABLE_CHANNELS),
    ),
}
SINKS = ("discard", "nominal-streaming", "WriteToNominal→avro", "WriteToNominal→gRPC")


def _count_avro(pattern: str) -> int:
    import fastavro

    total = 0
    for path in glob.glob(pattern):
        with open(path, "rb") as f:
            total += sum(len(rec["timestamps"]) for rec in fastavro.reader(f))  # type: ignore[index,arg-type]
    return total


class _ServerProcess:
    """``beam-nominal serve`` in its own process, as Nominal would be: not sharing our GIL."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen[str] | None = None
        self.target = ""

    def __enter__(self) -> _ServerProcess:
        from beam_nominal.server import LocalStore

        cmd = [sys.executable, "-m", "beam_nominal.cli", "serve", "--data-dir", str(self.data_dir), "--port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # "listening on grpc://HOST:PORT", once serving
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"beam-nominal serve did not start: {line!r}")
        self.target = line.removeprefix("listening on ")
        self.store = LocalStore(self.data_dir)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(timeout=30)


def run_once(shape: str, sink: str, arg: int, out: Path, target: str, rid: str) -> tuple[float, float]:
    """Run one pipeline writing under ``out``; returns (wall seconds, CPU seconds of this process)."""
    from beam_nominal.beam import WriteToNominal

    gen = SHAPES[shape][0]
    out.mkdir()
    if sink == "discard":
        sink_t: Any = beam.ParDo(Discard())
    elif sink == "nominal-streaming":
        sink_t = beam.ParDo(NS_DOFNS[shape](str(out)))
    elif sink == "WriteToNominal→avro":
        sink_t = WriteToNominal(str(out / "data.avro"), dataset_rid=rid)
    else:
        sink_t = WriteToNominal(target, dataset_rid=rid)
    t0, c0 = time.perf_counter(), time.process_time()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Impulse() | beam.FlatMap(gen, arg) | sink_t
    return time.perf_counter() - t0, time.process_time() - c0


def _delivered(sink: str, out: Path, rid: str, server: _ServerProcess) -> int:
    if sink == "nominal-streaming":
        return _count_avro(str(out / "*.avro"))
    if sink == "WriteToNominal→avro":
        return _count_avro(str(out / "data-*.avro"))
    return sum(s.count for s in server.store.list_series(rid))


def _child(argv: list[str]) -> int:
    """One measurement in a process of its own, after one unmeasured warm-up run of the same sink
    and shape (what one sink leaves in the process must not weigh on the next); prints
    ``wall cpu``."""
    shape, sink, arg, out, target, rid = argv
    logging.getLogger().setLevel(logging.ERROR)
    run_once(shape, sink, int(arg), Path(out + "-warm"), target, rid + "-warm")
    wall, cpu = run_once(shape, sink, int(arg), Path(out), target, rid)
    print(wall, cpu)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the points per pipeline")
    ap.add_argument("--only", nargs="*", choices=tuple(SHAPES), help="shapes to run")
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    args = ap.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)
    shapes = args.only or list(SHAPES)
    times: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    verified: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory() as tmp, _ServerProcess(Path(tmp) / "server") as server:
        work = Path(tmp) / "work"
        work.mkdir()
        for rnd in range(args.rounds):
            for shape in shapes:
                arg, points = SHAPES[shape][1](args.scale)
                order = SINKS if rnd % 2 == 0 else tuple(reversed(SINKS))
                for sink in order:
                    tag = f"{shape}-{SINKS.index(sink)}-{rnd}"
                    out, rid = work / tag, f"ri.bench.{tag}"
                    cmd = [sys.executable, "-m", "benchmarks.bench_beam", "--child"]
                    cmd += [shape, sink, str(arg), str(out), server.target, rid]
                    # Each pipeline in a fresh process (see _child).
                    reply = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
                    seconds, cpu = map(float, reply.split())
                    times.setdefault((shape, sink), []).append(seconds)
                    cpus.setdefault((shape, sink), []).append(cpu)
                    if sink != "discard":
                        got = _delivered(sink, out, rid, server)
                        if got != points:
                            verified.setdefault((shape, sink), f"round {rnd}: GOT {got:,} of {points:,}")
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"FnApiRunner in-process, {args.rounds} rounds, medians; points/s over the whole pipeline run\n")
    head = "| shape | points | " + " | ".join(SINKS) + " | →avro / ns | →gRPC / ns | verified |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for shape in shapes:
        _, points = SHAPES[shape][1](args.scale)
        rate = {s: points / statistics.median(times[(shape, s)]) for s in SINKS}
        failures = {s: verified[(shape, s)] for s in SINKS if (shape, s) in verified}
        ok = "yes, every round" if not failures else "; ".join(f"{k}: {v}" for k, v in failures.items())
        print(
            f"| {shape} | {points:,} | "
            + " | ".join(f"{rate[s] / 1e6:.2f} M" for s in SINKS)
            + f" | {rate['WriteToNominal→avro'] / rate['nominal-streaming']:.2f}x"
            + f" | {rate['WriteToNominal→gRPC'] / rate['nominal-streaming']:.2f}x | {ok} |"
        )
    # Wall time is what the targets are about, but on shared cores it moves with other jobs' load;
    # this process's CPU time (all its threads, nominal-streaming's Rust thread included; not the
    # gRPC server's process) moves much less.
    print("\nCPU µs per point of this process (medians), and the sink's share over discard:\n")
    head = "| shape | " + " | ".join(SINKS) + " | sink →avro / ns sink |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for shape in shapes:
        _, points = SHAPES[shape][1](args.scale)
        per = {s: statistics.median(cpus[(shape, s)]) / points * 1e6 for s in SINKS}
        ns_sink = per["nominal-streaming"] - per["discard"]
        ours_sink = per["WriteToNominal→avro"] - per["discard"]
        print(
            f"| {shape} | "
            + " | ".join(f"{per[s]:.3f}" for s in SINKS)
            + f" | {ours_sink:.3f} / {ns_sink:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
