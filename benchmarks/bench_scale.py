"""Write cost against the number of series: NominalStream and WriteToNominal vs nominal-streaming.

Every shape writes the same points through both clients to the same sink, an Avro file in the
``AvroStream`` format (nominal-streaming's ``to_file``, our ``AvroFileTarget``), so wall time
compares like with like end to end. Shapes (channel ``s<k>`` of point ``i`` is ``k = i % N``,
timestamps ``T0 + i``, float values):

* ``enqueue_100``, ``enqueue_10k``, ``enqueue_1m``: 1 M single ``enqueue`` calls over 100,
  10^4 and 10^6 series (the last: one point per series);
* ``dict_100k``: ``enqueue_from_dict`` of 10 records of 10^5 channels each;
* ``beam_tuples_10k``, ``beam_tuples_100k``, ``beam_dicts_10k``, ``beam_dicts_100k``: a Beam
  pipeline (``FnApiRunner`` in-process, ``--no_pipeline_type_check`` for both) of
  ``(channel, int ns, float)`` tuples or ``{"channel", "timestamp", "value"}`` dicts over 10^4 or
  10^5 channels into ``WriteToNominal(path.avro)``, against ``bench_beam``'s nominal-streaming DoFn
  of the same element shape (a stream and an Avro file per bundle).

Every measurement runs in a fresh process (after one unmeasured warm-up run of the same client and
shape in that process, as bench_stream does); rounds interleave the clients, order reversed every
other round; the table shows medians over rounds of points/s, our ratio, and CPU µs a point (the
measuring process, all threads). Delivery is verified every run: the Avro files are read back and
their points counted and checksummed (a sum over points of a hash of channel, timestamp and the
value's bits, so order between series does not matter) against the points written.

Two more figures: CPU a point over 10^6 series against over 100 (from the ``enqueue`` shapes),
and the peak RSS of a fresh process (no warm-up) writing 1 M points over 10^6 series through one
stream and closing it, less its RSS before the first write (the libraries imported), for each
client.

``--old TREE`` also runs our client from another checkout (its ``beam_nominal`` first on the
path; build its C extension there first), as a third column.

Run: ``.venv/bin/python -m benchmarks.bench_scale [--rounds 3] [--quick] [--only SHAPE ...]
[--old TREE]``; ``--quick`` writes a fifth of the points (RSS included).
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

T0 = 1_700_000_000_000_000_000
ROOT = Path(__file__).resolve().parent.parent
NS, OURS, OLD = "nominal-streaming", "ours", "old"

#: shape -> (kind, points at full size, series)
SHAPES: dict[str, tuple[str, int, int]] = {
    "enqueue_100": ("enqueue", 1_000_000, 100),
    "enqueue_10k": ("enqueue", 1_000_000, 10_000),
    "enqueue_1m": ("enqueue", 1_000_000, 1_000_000),
    "dict_100k": ("dict", 1_000_000, 100_000),
    "beam_tuples_10k": ("tuples", 1_000_000, 10_000),
    "beam_tuples_100k": ("tuples", 1_000_000, 100_000),
    "beam_dicts_10k": ("dicts", 1_000_000, 10_000),
    "beam_dicts_100k": ("dicts", 1_000_000, 100_000),
}


def _names(series: int) -> list[str]:
    return [f"s{k}" for k in range(series)]


def _value(i: int) -> float:
    return i * 0.5


# -- writers (the same calls for both clients) ----------------------------------------------------


def write_enqueue(stream: Any, points: int, series: int) -> None:
    names = _names(series)
    enqueue = stream.enqueue
    for i in range(points):
        enqueue(names[i % series], T0 + i, i * 0.5)


def write_dicts(stream: Any, points: int, series: int) -> None:
    names = _names(series)
    for r in range(points // series):
        base = r * series
        stream.enqueue_from_dict(T0 + r, {name: (base + k) * 0.5 for k, name in enumerate(names)})


def gen_tuples(_: Any, points: int, series: int) -> Iterator[Any]:
    names = _names(series)
    for i in range(points):
        yield names[i % series], T0 + i, i * 0.5


def gen_dicts(_: Any, points: int, series: int) -> Iterator[Any]:
    names = _names(series)
    for i in range(points):
        yield {"channel": names[i % series], "timestamp": T0 + i, "value": i * 0.5}


# -- what was written, to check the files against -------------------------------------------------


def _point_hash(channel: str, ts: int, value: float) -> int:
    return zlib.crc32(f"{channel}|{ts}|{np.float64(value).view(np.uint64)}".encode())


def expected(kind: str, points: int, series: int) -> tuple[int, int]:
    """(points, checksum) a shape writes."""
    names = _names(series)
    total = 0
    if kind == "dict":
        n = (points // series) * series
        for i in range(n):
            total += _point_hash(names[i % series], T0 + i // series, i * 0.5)
        return n, total & 0xFFFFFFFFFFFFFFFF
    for i in range(points):
        total += _point_hash(names[i % series], T0 + i, i * 0.5)
    return points, total & 0xFFFFFFFFFFFFFFFF


def read_back(pattern: str) -> tuple[int, int]:
    """(points, checksum) of every Avro file matching ``pattern``."""
    import fastavro

    count = total = 0
    for path in glob.glob(pattern):
        with open(path, "rb") as f:
            for rec in fastavro.reader(f):
                ch = rec["channel"]  # type: ignore[index,call-overload]
                for t, v in zip(rec["timestamps"], rec["values"], strict=True):  # type: ignore[index,call-overload]
                    total += _point_hash(ch, t, v)
                count += len(rec["timestamps"])  # type: ignore[index,call-overload,arg-type]
    return count, total & 0xFFFFFFFFFFFFFFFF


# -- one run ---------------------------------------------------------------------------------------


def _stream(client: str, path: Path) -> Any:
    if client == NS:
        from nominal_streaming import NominalDatasetStream

        s = NominalDatasetStream().to_file(path)
        s.__enter__()
        return s
    from beam_nominal.stream import NominalStream

    # linger=None: the Beam path's setting; cuts depend only on the data.
    return NominalStream(str(path), dataset_rid="ri.bench.scale", linger=None)


def _close(client: str, s: Any) -> None:
    if client == NS:
        s.__exit__(None, None, None)
    else:
        s.close()


def run_stream(kind: str, client: str, points: int, series: int, out: Path) -> None:
    s = _stream(client, out / "data-0.avro")
    (write_enqueue if kind == "enqueue" else write_dicts)(s, points, series)
    _close(client, s)


def run_beam(kind: str, client: str, points: int, series: int, out: Path) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_beam import NominalStreamingDicts, NominalStreamingPoints

    if client == NS:
        sink: Any = beam.ParDo((NominalStreamingPoints if kind == "tuples" else NominalStreamingDicts)(str(out)))
    else:
        from beam_nominal.beam import WriteToNominal

        sink = WriteToNominal(str(out / "data.avro"), dataset_rid="ri.bench.scale")
    gen = gen_tuples if kind == "tuples" else gen_dicts
    options = PipelineOptions(["--no_pipeline_type_check"])
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        _ = p | beam.Impulse() | beam.FlatMap(gen, points, series) | sink


def _run(kind: str, client: str, points: int, series: int, out: Path) -> None:
    out.mkdir(parents=True)
    if kind in ("enqueue", "dict"):
        run_stream(kind, client, points, series, out)
    else:
        run_beam(kind, client, points, series, out)


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _child(argv: list[str]) -> int:
    """``--child measure|rss SHAPE CLIENT POINTS OUT``: prints ``wall cpu`` (after one warm-up
    run) or ``peak_kib base_kib`` (no warm-up)."""
    what, shape, client, points_s, out_s = argv
    kind, _, series = SHAPES[shape]
    points, out = int(points_s), Path(out_s)
    if what == "rss":
        import numpy  # noqa: F401 - both clients import it; not part of the figure

        if client == NS:
            import nominal_streaming  # noqa: F401
        else:
            import beam_nominal.stream  # noqa: F401
        names = _names(series)  # the input's strings: not part of the figure either
        base = _rss_kib()
        out.mkdir(parents=True)
        s = _stream(client, out / "data-0.avro")
        enqueue = s.enqueue
        for i in range(points):
            enqueue(names[i % series], T0 + i, i * 0.5)
        _close(client, s)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, base)
        return 0
    warm = Path(f"{out}-warm")
    _run(kind, client, points, series, warm)
    shutil.rmtree(warm)
    c0, t0 = time.process_time(), time.perf_counter()
    _run(kind, client, points, series, out)
    print(time.perf_counter() - t0, time.process_time() - c0)
    return 0


def _spawn(tree: Path, args: list[str]) -> list[float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{ROOT}")
    reply = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tree,
        env=env,
    ).stdout
    return [float(x) for x in reply.split()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    ap = argparse.ArgumentParser(description="write cost against the number of series")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a fifth of the points")
    ap.add_argument("--only", nargs="*", help="shape names (and/or 'rss')")
    ap.add_argument("--old", help="another checkout of beam_nominal to run as a third client")
    args = ap.parse_args(argv)
    frac = 0.2 if args.quick else 1.0
    only = set(args.only or [*SHAPES, "rss"])
    shapes = {k: v for k, v in SHAPES.items() if k in only}
    trees = {NS: ROOT, OURS: ROOT}
    if args.old:
        trees[OLD] = Path(args.old).resolve()
    clients = tuple(trees)
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    bad: list[str] = []
    want = {name: expected(kind, int(points * frac), series) for name, (kind, points, series) in shapes.items()}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for name, (_, points, _) in shapes.items():
                n = int(points * frac)
                for client in clients if rnd % 2 == 0 else clients[::-1]:
                    out = Path(tmp) / f"{name}-{client}-{rnd}"
                    w, c = _spawn(trees[client], ["measure", name, client, str(n), str(out)])
                    wall.setdefault((name, client), []).append(w)
                    cpu.setdefault((name, client), []).append(c)
                    got = read_back(str(out / "*.avro"))
                    if got != want[name]:
                        bad.append(f"{client} {name} round {rnd + 1}: {got} read back, {want[name]} written")
                    shutil.rmtree(out)
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        rss: dict[str, tuple[float, float]] = {}
        if "rss" in only:
            n = int(1_000_000 * frac)
            for client in clients:
                out = Path(tmp) / f"rss-{client}"
                peak, base = _spawn(trees[client], ["rss", "enqueue_1m", client, str(n), str(out)])
                rss[client] = (peak, base)
                got = read_back(str(out / "*.avro"))
                if got != expected("enqueue", n, 1_000_000):
                    bad.append(f"{client} rss run: {got} read back")
                shutil.rmtree(out)
    _table(shapes, clients, wall, cpu, frac)
    if rss:
        print()
        print("| peak RSS, 10^6 series buffered and written (1 process, no warm-up) | MiB above imports | MiB peak |")
        print("|---|---|---|")
        for client, (peak, base) in rss.items():
            print(f"| {client} | {(peak - base) / 1024:.0f} | {peak / 1024:.0f} |")
    print(f"\ndelivery verified (points and checksum read back): {'every run' if not bad else '; '.join(bad)}")
    return 1 if bad else 0


def _table(
    shapes: dict[str, tuple[str, int, int]],
    clients: tuple[str, ...],
    wall: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
    frac: float,
) -> None:
    extra = OLD in clients
    head = "| shape | points | nominal-streaming M pts/s | ours M pts/s (ratio) |"
    head += " old M pts/s (ratio) |" if extra else ""
    head += " CPU µs/pt: ns, ours" + (", old |" if extra else " |")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    per_point: dict[tuple[str, str], float] = {}
    for name, (kind, points, series) in shapes.items():
        n = expected(kind, int(points * frac), series)[0]
        rate = {c: n / statistics.median(wall[(name, c)]) for c in clients}
        for c in clients:
            per_point[(name, c)] = statistics.median(cpu[(name, c)]) / n * 1e6
        ns = rate[NS]
        row = f"| {name} | {n:,} | {ns / 1e6:.2f} | {rate[OURS] / 1e6:.2f} ({rate[OURS] / ns:.2f}x) |"
        if extra:
            row += f" {rate[OLD] / 1e6:.2f} ({rate[OLD] / ns:.2f}x) |"
        row += " " + ", ".join(f"{per_point[(name, c)]:.2f}" for c in clients) + " |"
        print(row)
    if ("enqueue_1m", OURS) in per_point and ("enqueue_100", OURS) in per_point:
        growth = ", ".join(f"{c} {per_point[('enqueue_1m', c)] / per_point[('enqueue_100', c)]:.1f}x" for c in clients)
        print(f"\nCPU a point over 10^6 series / over 100 series (enqueue): {growth}")


if __name__ == "__main__":
    raise SystemExit(main())
