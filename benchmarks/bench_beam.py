"""WriteToNominal vs a DoFn wrapping nominal-streaming, every element shape: Beam runs, one-element bundles.

**Pipelines.** Every pipeline is ``Impulse | FlatMap(generate) | sink`` on ``FnApiRunner``
in-process, or with ``--prism PATH`` on Prism (``PrismRunner``, the runner Beam's DirectRunner
runs first; its SDK worker in the measuring process, ``LOOPBACK``; ``make engines`` builds the
binary, ``python tools/engines.py --path`` prints where): the data is made inside the pipeline,
so the generator's cost is the same for every sink and the discard sink shows the ceiling Beam
itself allows. Sinks:

* ``discard``: a DoFn that drops elements;
* ``nominal-streaming``: a DoFn opening ``NominalDatasetStream().to_file(...)`` per bundle (its
  fastest local sink, an Avro file) and closing it at the end of the bundle, the way users wrap
  it today; one subclass per shape, whose ``process`` is the one call a user would write for it;
* ``WriteToNominal→avro``: our sink writing the same Avro format to a path ending in ``.avro``
  (one file per DoFn instance): like for like;
* ``WriteToNominal→gRPC`` (with ``--grpc``): our sink sending to ``beam-nominal serve`` (the local
  server, in its own process as Nominal would be) on loopback, which stores Parquet durably before
  acknowledging.

Shapes, as users send them (the point shapes make their channel string per element, over 100
channels, as decoded data would), and the nominal-streaming DoFn's call for each:

* ``tuples``: ``(channel, int ns, float)``; ``enqueue`` of the unpacked tuple;
* ``dicts``: ``{"channel", "timestamp", "value"}``; ``enqueue`` of the three items;
* ``rows``: ``beam.Row(channel=, timestamp=, value=)``; ``enqueue`` of the three attributes;
* ``namedtuples``: a ``NamedTuple`` ``Point(channel, timestamp, value)``; the same;
* ``wide``: ``(int ns, {100 channels: float})``; ``enqueue_from_dict``;
* ``series``: ``(channel, int64 ns array, float64 array)`` of 10,000 points; ``enqueue_batch``;
* ``table``: pyarrow RecordBatches of 2,000 rows, a timestamp column and 50 channel columns;
  one ``enqueue_batch`` per column (nominal-streaming has no table call).

Rounds interleave the sinks (order reversed every other round); the tables show medians over
rounds of points/s (wall time of the whole pipeline run, start-up included), ratios of our sink to
the nominal-streaming DoFn, and CPU µs per point of the measuring process. Delivery is verified
every round: Avro files are read back and their points counted, the server's series counts
summed.

**One-element bundles** (what a streaming pipeline often gives a sink): our ``WriteDoFn`` and the
nominal-streaming DoFn of the same shape, each driven directly through its life cycle without a
runner: ``setup`` once, then N times ``start_bundle`` / ``process(one element)`` /
``finish_bundle``, then ``teardown``, all of it timed; outputs ``process`` and ``finish_bundle``
return are consumed. Bundles per second, CPU µs per bundle, delivery verified by reading the Avro
files back. Shapes by ``--bundle-shapes`` (default: ``tuples``, one point per bundle). N differs
by sink (``BUNDLES``) so that each run lasts a few seconds: a nominal-streaming bundle takes
~50 ms (its ``close`` does, whatever the options), ours ~1 ms.

Each measurement runs in a fresh process, after one unmeasured warm-up run of the same sink and
shape in that process: what one sink leaves behind (allocator state, threads, a grown heap) must
not weigh on the next one's figures. Outputs are deleted once counted.

Wall time of a pipeline includes a wait of 0-200 ms at the end of every bundle, whatever the sink:
the SDK worker's state sampler thread sleeps in periods growing to 200 ms and the bundle joins it
(``StateSampler.stop``); a run's time moves in steps of ~0.195 s with its work. Each shape is
sized so that a run of our sink lasts a few seconds, which keeps one step to a few percent of a
ratio; the CPU table is free of it.

``--old TREE`` adds ``WriteToNominal→avro`` from another checkout to the pipeline runs
(``benchmarks/trees.py``): the old and new builds side by side in one run.

Run: ``.venv/bin/python -m benchmarks.bench_beam [--rounds 5] [--scale 1.0] [--only tuples dicts ...]
[--grpc] [--measure pipelines bundles] [--bundle-shapes tuples ...] [--prism PATH] [--old TREE]``
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from benchmarks import trees
from benchmarks.bench_stream import round_spread

T0 = 1_700_000_000_000_000_000
SERIES_LEN = 10_000
TABLE_ROWS = 2_000
TABLE_CHANNELS = 50
WIDE_CHANNELS = 100


class Point(NamedTuple):
    channel: str
    timestamp: int
    value: float


def gen_points(_: Any, n_points: int) -> Iterator[Any]:
    for i in range(n_points):
        yield f"p{i % 100:03d}", T0 + i, i * 0.5


def gen_dicts(_: Any, n_points: int) -> Iterator[Any]:
    for i in range(n_points):
        yield {"channel": f"p{i % 100:03d}", "timestamp": T0 + i, "value": i * 0.5}


def gen_rows(_: Any, n_points: int) -> Iterator[Any]:
    row = beam.Row
    for i in range(n_points):
        yield row(channel=f"p{i % 100:03d}", timestamp=T0 + i, value=i * 0.5)


def gen_namedtuples(_: Any, n_points: int) -> Iterator[Any]:
    for i in range(n_points):
        yield Point(f"p{i % 100:03d}", T0 + i, i * 0.5)


def gen_wide(_: Any, n_records: int) -> Iterator[Any]:
    # A fresh dict per record, as decoded data would be; the channel names and float objects are shared.
    names = [f"w{c:03d}" for c in range(WIDE_CHANNELS)]
    values = np.random.default_rng(0).random(WIDE_CHANNELS).tolist()
    for i in range(n_records):
        yield T0 + i, dict(zip(names, values, strict=True))


def gen_series(_: Any, n_elements: int) -> Iterator[Any]:
    ts = np.arange(SERIES_LEN, dtype=np.int64)
    vals = np.random.default_rng(0).random(SERIES_LEN)
    for i in range(n_elements):
        yield f"s{i % 100:03d}", T0 + (i // 100) * SERIES_LEN + ts, vals


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

    Closing the stream is its only way to have a bundle's points written before the bundle ends
    (it has no flush), so every bundle opens a stream and a file of its own. One subclass per
    shape, so ``process`` is the one call a user would write for their data: no dispatch, the
    stream's method bound once per bundle.
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
        self.enqueue_from_dict = self.stream.enqueue_from_dict

    def finish_bundle(self) -> None:
        self.stream.__exit__(None, None, None)
        self.stream = None


class NominalStreamingPoints(NominalStreamingDoFn):
    def process(self, element: Any) -> Any:  # no output; Beam refuses a None return hint
        channel, timestamp, value = element
        self.enqueue(channel, timestamp, value)


class NominalStreamingDicts(NominalStreamingDoFn):
    def process(self, element: Any) -> Any:  # no output; Beam refuses a None return hint
        self.enqueue(element["channel"], element["timestamp"], element["value"])


class NominalStreamingFields(NominalStreamingDoFn):
    """``beam.Row`` and NamedTuple points: the fields by name."""

    def process(self, element: Any) -> Any:  # no output; Beam refuses a None return hint
        self.enqueue(element.channel, element.timestamp, element.value)


class NominalStreamingWide(NominalStreamingDoFn):
    def process(self, element: Any) -> Any:  # no output; Beam refuses a None return hint
        timestamp, values = element
        self.enqueue_from_dict(timestamp, values)


class NominalStreamingSeries(NominalStreamingDoFn):
    def process(self, element: Any) -> Any:  # no output; Beam refuses a None return hint
        channel, timestamps, values = element
        self.enqueue_batch(channel, timestamps, values)


class NominalStreamingTable(NominalStreamingDoFn):
    def process(self, element: Any) -> Any:  # no output; Beam refuses a None return hint
        # nominal-streaming has no table call: one batch call per column.
        ts = element.column(0).to_numpy()
        for name, col in zip(element.schema.names[1:], element.columns[1:], strict=True):
            self.enqueue_batch(name, ts, col.to_numpy())


class Shape(NamedTuple):
    gen: Callable[[Any, int], Iterator[Any]]
    #: Elements per pipeline at ``--scale 1``.
    elements: int
    points_per_element: int
    ns_dofn: type[NominalStreamingDoFn]

    def size(self, scale: float) -> tuple[int, int]:
        """(elements, points) at ``scale``."""
        n = max(1, int(self.elements * scale))
        return n, n * self.points_per_element


# Sizes: runs of a few seconds at scale 1 (see the module doc on sampler steps), from one-off
# runs of each sink at scale 0.1 scaled to the quiet-machine figures of docs/benchmarks.md.
# 4.8 M tuples: runs of ~5-7 s, where one 0.195 s step is ~3% of a ratio; at 2.4 M the same two
# sinks read 1.19x or 1.29x by which side of a step our run ends. 4 M Rows for the same reason:
# at 1.6 M (runs of ~2 s) our sink's work ended 1.95-1.98 s in, either side of a step, and the
# same build read 1.32x or 1.20x. Series and tables: our sink at
# ~20 M points/s runs ~2 s, nominal-streaming ~6 s (each Avro file ~700 MB, deleted once counted).
SHAPES: dict[str, Shape] = {
    "tuples": Shape(gen_points, 4_800_000, 1, NominalStreamingPoints),
    "dicts": Shape(gen_dicts, 2_400_000, 1, NominalStreamingDicts),
    "rows": Shape(gen_rows, 4_000_000, 1, NominalStreamingFields),
    "namedtuples": Shape(gen_namedtuples, 2_400_000, 1, NominalStreamingFields),
    "wide": Shape(gen_wide, 150_000, WIDE_CHANNELS, NominalStreamingWide),
    "series": Shape(gen_series, 4_000, SERIES_LEN, NominalStreamingSeries),
    "table": Shape(gen_tables, 400, TABLE_ROWS * TABLE_CHANNELS, NominalStreamingTable),
}
#: One-element bundles per measurement at ``--scale 1``, per sink: closing a nominal-streaming
#: stream takes ~50 ms whatever its options (0.10.5), ~20 bundles/s, where ours takes ~1 ms.
BUNDLES = {"nominal-streaming": 100, "WriteToNominal": 2_000}
AVRO, GRPC = "WriteToNominal→avro", "WriteToNominal→gRPC"
AVRO_OLD = AVRO + trees.OLD
PIPELINE_SINKS = ("discard", "nominal-streaming", AVRO)
BUNDLE_SINKS = ("nominal-streaming", "WriteToNominal")


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


def _runner(prism: str) -> tuple[Any, Any]:
    """(runner, options): FnApiRunner in-process, or PrismRunner with the binary at ``prism``."""
    from apache_beam.options.pipeline_options import PipelineOptions

    if not prism:
        return FnApiRunner(), PipelineOptions([])
    from apache_beam.runners.portability.prism_runner import PrismRunner

    return PrismRunner(), PipelineOptions([f"--prism_location={prism}", "--prism_log_level=warn"])


def run_pipeline(
    shape: str, sink: str, n: int, out: Path, target: str, rid: str, prism: str = ""
) -> tuple[float, float]:
    """Run one pipeline writing under ``out``; returns (wall seconds, CPU seconds of this process)."""
    from beam_nominal.beam import WriteToNominal

    out.mkdir()
    if sink == "discard":
        sink_t: Any = beam.ParDo(Discard())
    elif sink == "nominal-streaming":
        sink_t = beam.ParDo(SHAPES[shape].ns_dofn(str(out)))
    elif sink == AVRO:
        sink_t = WriteToNominal(str(out / "data.avro"), dataset_rid=rid)
    else:
        sink_t = WriteToNominal(target, dataset_rid=rid)
    runner, options = _runner(prism)
    t0, c0 = time.perf_counter(), time.process_time()
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = p | beam.Impulse() | beam.FlatMap(SHAPES[shape].gen, n) | sink_t
    return time.perf_counter() - t0, time.process_time() - c0


def _drain(outputs: Any) -> None:
    # Beam iterates what process and finish_bundle return; an output may raise only then.
    if outputs is not None:
        for _ in outputs:
            pass


def run_bundles(shape: str, sink: str, n: int, out: Path, rid: str) -> tuple[float, float]:
    """Drive one DoFn through ``n`` one-element bundles writing under ``out``; returns (wall
    seconds, CPU seconds of this process) from ``setup`` to the end of ``teardown``."""
    out.mkdir()
    dofn: Any
    if sink == "WriteToNominal":
        from beam_nominal.beam._dofn import SinkConfig, WriteDoFn

        dofn = WriteDoFn(SinkConfig(target=str(out / "data.avro"), dataset_rid=rid))
    else:
        dofn = SHAPES[shape].ns_dofn(str(out))
    elements = SHAPES[shape].gen(None, n)
    t0, c0 = time.perf_counter(), time.process_time()
    dofn.setup()
    for element in elements:
        dofn.start_bundle()
        _drain(dofn.process(element))
        _drain(dofn.finish_bundle())
    dofn.teardown()
    return time.perf_counter() - t0, time.process_time() - c0


def _child(argv: list[str]) -> int:
    """One measurement in a process of its own, after one unmeasured warm-up run of the same sink
    and shape (what one sink leaves in the process must not weigh on the next); prints
    ``wall cpu``."""
    kind, shape, sink, n, out, target, rid, prism = argv
    logging.getLogger().setLevel(logging.ERROR)
    warm = Path(out + "-warm")
    if kind == "pipeline":
        run_pipeline(shape, sink, int(n), warm, target, rid + "-warm", prism)
        shutil.rmtree(warm)
        wall, cpu = run_pipeline(shape, sink, int(n), Path(out), target, rid, prism)
    else:
        run_bundles(shape, sink, int(n), warm, rid + "-warm")
        shutil.rmtree(warm)
        wall, cpu = run_bundles(shape, sink, int(n), Path(out), rid)
    print(wall, cpu)
    return 0


def _delivered(sink: str, out: Path, rid: str, server: _ServerProcess | None) -> int:
    if sink == "nominal-streaming":
        return _count_avro(str(out / "ns-*.avro"))
    if sink != GRPC:
        return _count_avro(str(out / "data-*.avro"))
    assert server is not None
    return sum(s.count for s in server.store.list_series(rid))


class _Results:
    """Wall and CPU seconds per (shape, sink) over rounds, and the first delivery failure of each."""

    def __init__(self) -> None:
        self.wall: dict[tuple[str, str], list[float]] = {}
        self.cpu: dict[tuple[str, str], list[float]] = {}
        self.failed: dict[tuple[str, str], str] = {}

    def verified(self, shape: str, sinks: tuple[str, ...]) -> str:
        failures = {s: self.failed[(shape, s)] for s in sinks if (shape, s) in self.failed}
        return "yes, every round" if not failures else "; ".join(f"{k}: {v}" for k, v in failures.items())

    def median_wall(self, shape: str, sink: str) -> float:
        return statistics.median(self.wall[(shape, sink)])

    def median_cpu(self, shape: str, sink: str) -> float:
        return statistics.median(self.cpu[(shape, sink)])

    def round_ratios(self, shape: str, sink: str, base: str) -> str:
        return round_spread(self.wall[(shape, base)], self.wall[(shape, sink)])


def _measure(
    kind: str,
    jobs: list[tuple[str, str, int, int]],
    rounds: int,
    work: Path,
    server: _ServerProcess | None,
    prism: str = "",
    old: Path | None = None,
) -> _Results:
    """Run every (shape, sink, n, points) job once per round, each in a fresh process, the order
    reversed every other round; check every delivery."""
    res = _Results()
    for rnd in range(rounds):
        for i, (shape, sink, n, points) in enumerate(jobs if rnd % 2 == 0 else jobs[::-1]):
            out, rid = work / f"{kind}-{shape}-{rnd}-{i}", f"ri.bench.{kind}.{shape}.{rnd}.{i}"
            base, is_old = trees.split(sink)
            env, cwd = trees.child_env(old if is_old else None)
            cmd = [sys.executable, "-m", "benchmarks.bench_beam", "--child", kind, shape, base, str(n)]
            cmd += [str(out), server.target if server else "", rid, prism]
            reply = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd).stdout
            wall, cpu = map(float, reply.split())
            res.wall.setdefault((shape, sink), []).append(wall)
            res.cpu.setdefault((shape, sink), []).append(cpu)
            if sink != "discard":
                got = _delivered(sink, out, rid, server)
                if got != points:
                    res.failed.setdefault((shape, sink), f"round {rnd + 1}: GOT {got:,} of {points:,}")
            shutil.rmtree(out)
        print(f"{kind}: round {rnd + 1}/{rounds} done", file=sys.stderr, flush=True)
    return res


def _table(head: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def _report_pipelines(
    res: _Results, shapes: list[str], sinks: tuple[str, ...], scale: float, rounds: int, runner: str
) -> None:
    ours = [s for s in sinks if s.startswith("WriteToNominal")]
    print(f"{runner}, {rounds} rounds, medians; points/s over the whole pipeline run\n")
    rows = []
    for shape in shapes:
        _, points = SHAPES[shape].size(scale)
        rate = {s: points / res.median_wall(shape, s) for s in sinks}
        rows.append(
            [shape, f"{points:,}"]
            + [f"{rate[s] / 1e6:.2f} M" for s in sinks]
            + [f"{rate[s] / rate['nominal-streaming']:.2f}x" for s in ours]
            + [res.round_ratios(shape, s, "nominal-streaming") for s in ours]
            + [res.verified(shape, sinks)]
        )
    ratios = [s.removeprefix("WriteToNominal") + " / ns" for s in ours]
    spreads = [f"{r}, rounds" for r in ratios]
    _table(["shape", "points", *sinks, *ratios, *spreads, "verified"], rows)
    # Wall time is what the targets are about, but on shared cores it moves with other jobs' load;
    # this process's CPU time (all its threads, nominal-streaming's Rust thread included; not the
    # gRPC server's process) moves much less.
    print("\nCPU µs per point of the measuring process (medians), and the sink's share over discard:\n")
    rows = []
    for shape in shapes:
        _, points = SHAPES[shape].size(scale)
        per = {s: res.median_cpu(shape, s) / points * 1e6 for s in sinks}
        rows.append(
            [shape]
            + [f"{per[s]:.3f}" for s in sinks]
            + [f"{per[AVRO] - per['discard']:.3f} / {per['nominal-streaming'] - per['discard']:.3f}"]
        )
    _table(["CPU µs per point", *sinks, "sink →avro / ns sink"], rows)


def _report_bundles(res: _Results, shapes: list[str], n: dict[str, int], rounds: int) -> None:
    ns, ours = BUNDLE_SINKS
    print("\nOne-element bundles, each DoFn driven directly (setup, N x start_bundle / process /")
    print(f"finish_bundle, teardown), to Avro files; {rounds} rounds, medians\n")
    rows = []
    for shape in shapes:
        rate = {s: n[s] / res.median_wall(shape, s) for s in BUNDLE_SINKS}
        cpu = {s: res.median_cpu(shape, s) / n[s] * 1e6 for s in BUNDLE_SINKS}
        rows.append(
            [
                shape,
                f"{n[ns]:,} / {n[ours]:,}",
                f"{rate[ns]:,.0f}",
                f"{rate[ours]:,.0f}",
                f"{rate[ours] / rate[ns]:.2f}x",
                f"{cpu[ns]:,.0f}",
                f"{cpu[ours]:,.0f}",
                res.verified(shape, BUNDLE_SINKS),
            ]
        )
    head = ["element", "N (ns / ours)", f"{ns} bundles/s", f"{ours} bundles/s", "ours / ns"]
    _table([*head, f"CPU µs per bundle {ns}", f"CPU µs per bundle {ours}", "verified"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the points per pipeline and the bundles")
    ap.add_argument("--only", nargs="+", choices=tuple(SHAPES), help="shapes of the pipeline runs")
    ap.add_argument("--grpc", action="store_true", help="also WriteToNominal to beam-nominal serve over gRPC")
    ap.add_argument("--measure", nargs="+", choices=("pipelines", "bundles"), default=["pipelines", "bundles"])
    ap.add_argument("--bundle-shapes", nargs="+", choices=tuple(SHAPES), default=["tuples"])
    ap.add_argument("--prism", default="", metavar="PATH", help="run the pipelines on Prism, this binary")
    ap.add_argument("--old", type=Path, metavar="TREE", help="also WriteToNominal→avro from this checkout")
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    args = ap.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)
    shapes = args.only or list(SHAPES)
    sinks = PIPELINE_SINKS + ((AVRO_OLD,) if args.old else ()) + ((GRPC,) if args.grpc else ())
    n_bundles = {sink: max(1, int(n * args.scale)) for sink, n in BUNDLES.items()}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        server = stack.enter_context(_ServerProcess(Path(tmp) / "server")) if args.grpc else None
        work = Path(tmp) / "work"
        work.mkdir()
        if "pipelines" in args.measure:
            jobs = [(shape, sink, *SHAPES[shape].size(args.scale)) for shape in shapes for sink in sinks]
            res = _measure("pipeline", jobs, args.rounds, work, server, args.prism, args.old)
            runner = "PrismRunner (LOOPBACK)" if args.prism else "FnApiRunner in-process"
            _report_pipelines(res, shapes, sinks, args.scale, args.rounds, runner)
        if "bundles" in args.measure:
            jobs = [
                (shape, sink, n_bundles[sink], n_bundles[sink] * SHAPES[shape].points_per_element)
                for shape in args.bundle_shapes
                for sink in BUNDLE_SINKS
            ]
            res = _measure("bundles", jobs, args.rounds, work, None)
            _report_bundles(res, args.bundle_shapes, n_bundles, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
