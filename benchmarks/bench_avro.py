"""Avro file target: ``AvroFileTarget.send`` against fastavro's writer and nominal-streaming.

Shapes, each one request (one Avro block):

* ``doubles 1x500k`` / ``int64 1x500k``: one series of 500,000 points;
* ``doubles 1000x500`` / ``int64 1000x500``: 1,000 series of 500 points, two tags each;
* ``strings 1x200k``: one series of 200,000 short status words.

Timestamps are int64 ns from 2023 at 1 ms steps (nine-byte Avro longs); doubles are normal
random numbers (snappy gains little on them), int64 values are below 2**20.

Writers, all to a real file in the same ``AvroStream`` format, snappy unless said otherwise:

* ``ours``: ``AvroFileTarget.send``, ``--sends`` requests per round into one file, each a block
  written and fsynced before ``send`` returns;
* ``ours null``: the same with ``codec="null"`` (what snappy costs);
* ``ours prefix``: ``AvroPrefixTarget`` (``WriteToNominal(target="dir/")``'s target), one bundle
  of ``--sends`` requests: blocks appended to a temporary file in request order, fsynced once and
  renamed to its content digest at the bundle's commit (timed from the first send to the end of
  the commit);
* ``fastavro``: ``fastavro.writer`` appending one block per request from the records as Python
  objects (their ``tolist()`` included: fastavro takes nothing else), then fsync;
* ``nominal-streaming``: ``NominalDatasetStream().to_file`` fed the same series with
  ``enqueue_batch`` (numpy arrays), timed from the first call to the end of ``close``: its own
  batching and Rust Avro writer, with no fsync.

Every round runs every (shape, writer) once, in an order reversed every other round, so drift in
machine load hits all of them; the tables show medians over rounds of points/s, by wall time
(fsync is I/O) and by this process's CPU time (all threads: steadier on a shared machine).
Before timing, every writer's file is read back: ours must give exactly the input, the others
the right number of points. ``--breakdown`` adds the median milliseconds per send of our
stages (encode, compress, write, fsync) for each shape.

Run: ``.venv/bin/python benchmarks/bench_avro.py [--rounds 5] [--sends 8] [--breakdown]``
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

import fastavro
import numpy as np

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.targets.avro import AVRO_STREAM_SCHEMA, AvroFileTarget, read_avro_file
from beam_nominal.targets.base import Request

T0 = 1_700_000_000_000_000_000
RID = "ri.bench.avro"
STATUS = ["ok", "warn", "error", "idle", "starting", "stopped"]


def _series(vt: ValueType, count: int, points: int, rng: np.random.Generator) -> list[SeriesBatch]:
    out = []
    for s in range(count):
        ts = T0 + np.arange(points, dtype=np.int64) * 1_000_000 + s
        values: Any
        if vt is ValueType.DOUBLE:
            values = rng.standard_normal(points)
        elif vt is ValueType.INT64:
            values = rng.integers(0, 2**20, points, dtype=np.int64)
        else:
            values = [STATUS[i] for i in rng.integers(0, len(STATUS), points)]
        tags = {"host": f"h{s % 16}", "unit": "m"} if count > 1 else None
        out.append(SeriesBatch(SeriesKey.of(f"ch{s:04d}", tags), vt, ts, values))
    return out


def shapes() -> dict[str, list[SeriesBatch]]:
    rng = np.random.default_rng(0)
    return {
        "doubles 1x500k": _series(ValueType.DOUBLE, 1, 500_000, rng),
        "doubles 1000x500": _series(ValueType.DOUBLE, 1000, 500, rng),
        "int64 1x500k": _series(ValueType.INT64, 1, 500_000, rng),
        "int64 1000x500": _series(ValueType.INT64, 1000, 500, rng),
        "strings 1x200k": _series(ValueType.STRING, 1, 200_000, rng),
    }


# ---------------------------------------------------------------------------------------------
# Writers: each returns the points it wrote
# ---------------------------------------------------------------------------------------------


def ours(path: Path, batches: list[SeriesBatch], sends: int, codec: str = "snappy") -> int:
    request = Request(RID, batches)
    with AvroFileTarget(path, dataset_rid=RID, codec=codec, overwrite=True) as target:
        for _ in range(sends):
            target.send(request)
    return request.points * sends


def ours_prefix(path: Path, batches: list[SeriesBatch], sends: int) -> int:
    from beam_nominal.targets.avro_prefix import AvroPrefixTarget

    target = AvroPrefixTarget(f"{path}.d/", dataset_rid=RID)
    target.begin_bundle()
    for seq in range(sends):
        target.send(Request(RID, batches, seq=seq))
    files = target.commit_bundle()
    target.close()
    # One file (the bundle is under the 256 MiB roll-over): put it where check() and main() look.
    assert len(files) == 1, files
    os.replace(files[0].path, path)
    return sum(len(b) for b in batches) * sends


def _branch(vt: ValueType) -> str:
    return {ValueType.DOUBLE: "double", ValueType.INT64: "long", ValueType.STRING: "string"}[vt]


def fast_avro(path: Path, batches: list[SeriesBatch], sends: int) -> int:
    schema = fastavro.parse_schema(AVRO_STREAM_SCHEMA)
    with open(path, "w+b") as f:
        for _ in range(sends):
            # The union branch is named: fastavro's guess by type would make an int a long or a
            # float a double anyway, but naming it avoids trying branches in order.
            records = [
                {
                    "channel": b.key.channel,
                    "timestamps": b.timestamps.tolist(),
                    "values": [(_branch(b.value_type), v) for v in _tolist(b.values)],
                    "tags": b.key.tag_dict,
                }
                for b in batches
            ]
            fastavro.writer(f, schema, records, codec="snappy", sync_interval=1 << 40)
            f.flush()
            os.fsync(f.fileno())
    return sum(len(b) for b in batches) * sends


def _tolist(values: Any) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def nominal_streaming(path: Path, batches: list[SeriesBatch], sends: int) -> int:
    from nominal_streaming import NominalDatasetStream

    stream = NominalDatasetStream().to_file(path)
    with stream:
        for _ in range(sends):
            for b in batches:
                stream.enqueue_batch(b.key.channel, b.timestamps, b.values, b.key.tag_dict or None)
    return sum(len(b) for b in batches) * sends


WRITERS: dict[str, Callable[[Path, list[SeriesBatch], int], int]] = {
    "ours": ours,
    "ours null": lambda p, b, s: ours(p, b, s, codec="null"),
    "ours prefix": ours_prefix,
    "fastavro": fast_avro,
    "nominal-streaming": nominal_streaming,
}


# ---------------------------------------------------------------------------------------------
# Checks and breakdown
# ---------------------------------------------------------------------------------------------


def _count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(len(rec["timestamps"]) for rec in fastavro.reader(f))  # type: ignore[index,arg-type]


def check(tmp: Path, batches: list[SeriesBatch]) -> None:
    """Every writer's file holds the input: exactly for ours, by count for the others."""
    want = sum(len(b) for b in batches)
    for name, write in WRITERS.items():
        path = tmp / "check.avro"
        write(path, batches, 1)
        if name.startswith("ours"):
            got = read_avro_file(path)
            assert list(got) == [b.key for b in batches], name
            for b in batches:
                series = got[b.key]
                assert np.array_equal(series.timestamps, b.timestamps), name
                want_values = _tolist(b.values)
                assert series.values == want_values, name
        assert _count(path) == want, (name, _count(path), want)
        path.unlink()


def breakdown(tmp: Path, batches: list[SeriesBatch], sends: int) -> dict[str, float]:
    """Median ms per send of our stages, through the target's private steps."""
    from beam_nominal.targets import avro as avro_mod

    request = Request(RID, batches)
    times: dict[str, list[float]] = {"encode": [], "compress": [], "write": [], "fsync": []}
    with AvroFileTarget(tmp / "breakdown.avro", overwrite=True) as target:
        scratch = avro_mod.thread_scratch()
        for _ in range(sends):
            t0 = time.perf_counter()
            data, records, _ = avro_mod.encode_records(request.batches, "long", scratch)
            t1 = time.perf_counter()
            body = avro_mod._compress("snappy", data, scratch)
            size = sum(len(p) for p in body)
            t2 = time.perf_counter()
            start = target._size
            target._append([avro_mod.long_bytes(records) + avro_mod.long_bytes(size), *body, target._sync])
            t3 = time.perf_counter()
            os.fsync(target._fd)
            avro_mod._drop_cached(target._fd, start, target._size)
            t4 = time.perf_counter()
            for k, a, b in (("encode", t0, t1), ("compress", t1, t2), ("write", t2, t3), ("fsync", t3, t4)):
                times[k].append((b - a) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sends", type=int, default=8, help="requests per round for ours (fastavro: 1)")
    ap.add_argument("--breakdown", action="store_true")
    args = ap.parse_args(argv)

    data = shapes()
    sends = {"ours": args.sends, "ours null": args.sends, "ours prefix": args.sends, "fastavro": 1}
    sends["nominal-streaming"] = args.sends
    rates: dict[tuple[str, str], list[float]] = {}
    cpu_rates: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_avro_", dir=os.environ.get("BENCH_DIR")) as tmp_name:
        tmp = Path(tmp_name)
        for batches in data.values():
            check(tmp, batches)
        jobs = [(shape, writer) for shape in data for writer in WRITERS]
        for rnd in range(args.rounds):
            for shape, writer in jobs if rnd % 2 == 0 else reversed(jobs):
                path = tmp / "bench.avro"
                t0, c0 = time.perf_counter(), time.process_time()
                points = WRITERS[writer](path, data[shape], sends[writer])
                elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
                rates.setdefault((shape, writer), []).append(points / elapsed)
                cpu_rates.setdefault((shape, writer), []).append(points / cpu)
                path.unlink()
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
        stages = {shape: breakdown(tmp, b, args.sends) for shape, b in data.items()} if args.breakdown else {}

    print(f"\nM points/s, median of {args.rounds} rounds (ours: {args.sends} sends per round)\n")
    print(
        "| shape | points | ours | ours null | ours prefix | fastavro | nominal-streaming "
        "| ours / nominal-streaming | prefix / nominal-streaming |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, batches in data.items():
        med = {w: statistics.median(rates[(shape, w)]) / 1e6 for w in WRITERS}
        ns = med["nominal-streaming"]
        print(
            f"| {shape} | {sum(len(b) for b in batches):,} | {med['ours']:.1f} | {med['ours null']:.1f} "
            f"| {med['ours prefix']:.1f} | {med['fastavro']:.2f} | {ns:.1f} | {med['ours'] / ns:.1f}x "
            f"| {med['ours prefix'] / ns:.1f}x |"
        )
    print("\nM points per CPU second (process time, all threads), same runs\n")
    print("| shape | ours | ours null | ours prefix | fastavro | nominal-streaming |")
    print("|---|---|---|---|---|---|")
    for shape in data:
        c = {w: statistics.median(cpu_rates[(shape, w)]) / 1e6 for w in WRITERS}
        ns = c["nominal-streaming"]
        print(
            f"| {shape} | {c['ours']:.1f} | {c['ours null']:.1f} | {c['ours prefix']:.1f} | {c['fastavro']:.2f} "
            f"| {ns:.1f} |"
        )
    if stages:
        print("\nours, median ms per send\n")
        print("| shape | encode | snappy + CRC | write | fsync |")
        print("|---|---|---|---|---|")
        for shape, st in stages.items():
            print(f"| {shape} | {st['encode']:.1f} | {st['compress']:.1f} | {st['write']:.1f} | {st['fsync']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
