"""Where NominalStream's time goes on the grouped shape, and why a worker thread cannot hide it.

Parts, each timed alone in this process (medians of ``--reps``):

- ``enqueue_batch``: one 100-point float64 call for a known series (no request cut: large budget);
- ``cut``: the packer taking 1,000 series of 3 x 100-point chunks into requests, per series;
- ``avro block``: ``AvroFileTarget``'s encoding of those requests (records, snappy, CRC), per record;
- ``grpc body``: the ``WriteColumnBatches`` bytes of the same requests, per series;
- ``CRC-32``: of one such Avro block's data, with zlib and with the Avro target's own (zlib-ng).

Then the GIL share: a worker thread encodes those requests over and over while the main thread
spins in pure Python for one second. The worker's CPU time in that second, and the spinning
thread's speed against spinning alone, show how much a background encoder can overlap with a
caller that keeps the interpreter busy (the situation of ``enqueue`` loops).

Run: ``.venv/bin/python benchmarks/bench_stream_parts.py [--reps 9]``
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from beam_nominal._pipeline.buffer import Buffer
from beam_nominal._pipeline.packer import cut_requests
from beam_nominal._wire.scratch import thread_scratch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.stream import NominalStream
from beam_nominal.targets._avro_block import encode_records
from beam_nominal.targets.avro import _compress, _crc32

T0 = 1_700_000_000_000_000_000
SERIES = 1_000
CHUNKS = 3
CHUNK = 100


class _Drop:
    def send(self, request: Any, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass


def _median(fn: Callable[[], float], reps: int) -> float:
    return statistics.median(fn() for _ in range(reps))


def _filled() -> Buffer:
    ts = np.arange(T0, T0 + CHUNK, dtype=np.int64)
    vals = np.random.default_rng(0).random(CHUNK)
    buf = Buffer()
    for r in range(CHUNKS):
        for i in range(SERIES):
            buf.add(SeriesKey(f"g{i:04d}"), ValueType.DOUBLE, ts + r * CHUNK, vals.copy(), 16 * CHUNK)
    return buf


def _cut(buf: Buffer) -> list[Any]:
    return cut_requests(buf, dataset_rid="ri.bench", max_bytes=4 << 20, max_points=10**9, final=True, next_seq=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    reps = args.reps

    names = [f"g{i:04d}" for i in range(SERIES)]
    ts = np.arange(T0, T0 + CHUNK, dtype=np.int64)
    vals = np.random.default_rng(0).random(CHUNK)
    stream = NominalStream(
        _Drop(), dataset_rid="ri.bench", linger=None, max_request_bytes=1 << 30, max_buffered_bytes=1 << 32
    )
    enqueue_batch = stream.enqueue_batch
    for n in names:
        enqueue_batch(n, ts, vals)  # the series exist: the calls timed are the steady state

    def enqueue_round() -> float:
        t0 = time.perf_counter()
        for n in names:
            enqueue_batch(n, ts, vals)
        return (time.perf_counter() - t0) / SERIES

    per_call = _median(enqueue_round, reps)
    stream.close()

    def cut_once() -> float:
        buf = _filled()
        t0 = time.perf_counter()
        _cut(buf)
        return (time.perf_counter() - t0) / SERIES

    per_series_cut = _median(cut_once, reps)
    requests = _cut(_filled())
    records = sum(len(r.batches) for r in requests)
    scratch = thread_scratch()

    def avro_once() -> None:
        for r in requests:
            data, _, _ = encode_records(r.batches, "long", scratch)
            _compress("snappy", data, scratch)

    def grpc_once() -> None:
        for r in requests:
            r.__dict__.pop("body", None)  # a cached_property: encode again
            r.body  # noqa: B018

    def timed(fn: Callable[[], None]) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        return run

    avro = _median(timed(avro_once), reps) / records
    grpc = _median(timed(grpc_once), reps) / records
    print(f"grouped parts, {SERIES} series x {CHUNKS} chunks of {CHUNK} points, medians of {reps}:\n")
    print("| part | µs | per |")
    print("|---|---|---|")
    print(f"| enqueue_batch, known float64 series | {per_call * 1e6:.2f} | call of {CHUNK} points |")
    print(f"| packer cut | {per_series_cut * 1e6:.2f} | series of {CHUNKS * CHUNK} points |")
    print(f"| Avro block (records, snappy, CRC) | {avro * 1e6:.2f} | series of {CHUNKS * CHUNK} points |")
    print(f"| gRPC request body | {grpc * 1e6:.2f} | series of {CHUNKS * CHUNK} points |")
    block = bytes(encode_records(requests[0].batches, "long", scratch)[0])
    for name, crc in (("zlib", zlib.crc32), ("Avro target's (zlib-ng)", _crc32)):
        per_block = _median(timed(lambda crc=crc: crc(block)), reps)
        print(f"| CRC-32, {name} | {per_block * 1e6:.0f} | Avro block of {len(block) / 1e6:.1f} MB |")

    def spin(seconds: float) -> int:
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            n += 1
        return n

    alone = spin(1.0)
    print("\nGIL share: a worker encoding in a loop while this thread spins in Python for 1 s\n")
    print("| worker | worker CPU s in that second | worker alone, s per pass | spinning thread's speed |")
    print("|---|---|---|---|")
    for name, work in (("Avro block", avro_once), ("gRPC body", grpc_once)):
        solo = _median(timed(work), 3)
        stop = threading.Event()
        busy = [0.0]

        def loop(
            work: Callable[[], None] = work, stop: threading.Event = stop, busy: list[float] = busy
        ) -> None:
            while not stop.is_set():
                c0 = time.thread_time()
                work()
                busy[0] += time.thread_time() - c0

        worker = threading.Thread(target=loop)
        worker.start()
        spun = spin(1.0)
        stop.set()
        worker.join()
        print(f"| {name} | {busy[0]:.3f} | {solo:.3f} | {spun / alone * 100:.0f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
