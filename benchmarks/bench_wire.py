"""Wire codec: the numpy encoder/decoder against the generated protobuf classes (reference codec).

Shapes, each one ~4 MiB request (as encoded by the fast encoder):

* ``doubles``: one series of float64;
* ``int64``: one series of int64 counters (values below 2**20, 3-byte varints);
* ``strings``: one series of short ASCII strings (status words);
* ``grouped``: 1,000+ series of 100 doubles each, two tags per series (many small batches);
* ``double_array_64`` / ``string_array_32``: one series of arrays (64 doubles / 32 short strings
  per timestamp); points are timestamps (rows), not elements.

Every round times every (shape, codec, direction) once, in an order that is reversed every other
round; the table shows the median rate over rounds in M points/s. Before timing, each decoder's
output is checked equal to the input. CPU time of this process is the clock (``--clock wall`` for
wall time): the machine is shared, and CPU time is what a pipeline worker pays.

Run: ``.venv/bin/python -m benchmarks.bench_wire [--rounds 9] [--clock cpu|wall]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from beam_nominal._wire import reference
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.decode import decode_request
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType

T0 = 1_700_000_000_000_000_000
TARGET_BYTES = 4 * 1024 * 1024


def _shapes() -> dict[str, list[SeriesBatch]]:
    rng = np.random.default_rng(1)

    def ts(n: int) -> np.ndarray:
        return T0 + np.arange(n, dtype=np.int64) * 1_000_000

    n_d = TARGET_BYTES // 22  # 14 B timestamp + 8 B double
    n_i = TARGET_BYTES // 17  # 14 B timestamp + 3 B varint
    n_s = TARGET_BYTES // 25  # 14 B timestamp + 2 B header + ~9 B text
    words = np.array(["OK", "NOMINAL", "WARN", "FAULT-12", "standby", "arming", "ARMED", "launch"])
    n_series = TARGET_BYTES // (100 * 22 + 40)
    n_da = TARGET_BYTES // (14 + 4 + 64 * 8)
    n_sa = TARGET_BYTES // (14 + 3 + 32 * 7)
    return {
        "doubles": [SeriesBatch(SeriesKey.of("d"), ValueType.DOUBLE, ts(n_d), rng.standard_normal(n_d))],
        "int64": [SeriesBatch(SeriesKey.of("i"), ValueType.INT64, ts(n_i), rng.integers(0, 2**20, n_i))],
        "strings": [
            SeriesBatch(SeriesKey.of("s"), ValueType.STRING, ts(n_s), words[rng.integers(0, 8, n_s)].tolist())
        ],
        "grouped": [
            SeriesBatch(SeriesKey.of(f"ch{j:04d}", {"rig": "A", "run": "7"}), ValueType.DOUBLE, ts(100),
                        rng.standard_normal(100))
            for j in range(n_series)
        ],
        "double_array_64": [
            SeriesBatch(SeriesKey.of("da"), ValueType.DOUBLE_ARRAY, ts(n_da), list(rng.standard_normal((n_da, 64))))
        ],
        "string_array_32": [
            SeriesBatch(SeriesKey.of("sa"), ValueType.STRING_ARRAY, ts(n_sa),
                        [words[rng.integers(0, 8, 32)].tolist() for _ in range(n_sa)])
        ],
    }


def _equal(a: list[SeriesBatch], b: list[SeriesBatch]) -> bool:
    for x, y in zip(a, b, strict=True):
        if x.key != y.key or x.value_type is not y.value_type or not np.array_equal(x.timestamps, y.timestamps):
            return False
        if isinstance(x.values, np.ndarray):
            if x.values.dtype != y.values.dtype or not np.array_equal(x.values, y.values):
                return False
        elif x.value_type is ValueType.DOUBLE_ARRAY:
            if not all(np.array_equal(r, q) for r, q in zip(x.values, y.values, strict=True)):
                return False
        elif [list(r) if isinstance(r, list) else r for r in x.values] != list(y.values):
            return False
    return len(a) == len(b)


def interleaved_times(
    jobs: list[tuple[str, str, Callable[[], Any]]], rounds: int, clock: Callable[[], float]
) -> dict[tuple[str, str], list[float]]:
    """Each (shape, op) job's times over ``rounds``, the job order reversed every other round so
    drift in machine load hits all of them alike."""
    times: dict[tuple[str, str], list[float]] = {(s, op): [] for s, op, _ in jobs}
    for r in range(rounds):
        for shape, op, fn in jobs if r % 2 == 0 else reversed(jobs):
            t0 = clock()
            fn()
            times[(shape, op)].append(clock() - t0)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ns = parser.parse_args(argv)
    clock = time.process_time if ns.clock == "cpu" else time.perf_counter

    shapes = _shapes()
    encoded = {name: encode_request("ri.bench", bs) for name, bs in shapes.items()}
    for name, bs in shapes.items():
        for decode in (decode_request, reference.decode):
            if not _equal(bs, decode(encoded[name]).batches):
                raise SystemExit(f"{name}: {decode.__module__} does not give back the input")
        if not _equal(bs, decode_request(reference.encode("ri.bench", bs)).batches):
            raise SystemExit(f"{name}: fast decoder disagrees on reference bytes")

    ref_bytes = {name: reference.encode("ri.bench", bs) for name, bs in shapes.items()}
    jobs: list[tuple[str, str, Callable[[], Any]]] = []
    for name, bs in shapes.items():
        jobs += [
            (name, "encode fast", lambda bs=bs: encode_request("ri.bench", bs)),
            (name, "encode reference", lambda bs=bs: reference.encode("ri.bench", bs)),
            (name, "decode fast", lambda d=encoded[name]: decode_request(d)),
            (name, "decode fast (ref bytes)", lambda d=ref_bytes[name]: decode_request(d)),
            (name, "decode reference", lambda d=encoded[name]: reference.decode(d)),
        ]
    times = interleaved_times(jobs, ns.rounds, clock)

    ops = ["encode fast", "encode reference", "decode fast", "decode fast (ref bytes)", "decode reference"]
    print(f"wire codec, M points/s (median of {ns.rounds} interleaved rounds, {ns.clock} time)")
    print(f"| shape | points | MiB | {' | '.join(ops)} | encode speed-up |")
    print("|---|---|---|" + "---|" * len(ops) + "---|")
    for name, bs in shapes.items():
        points = sum(len(b) for b in bs)
        rates = [points / statistics.median(times[(name, op)]) / 1e6 for op in ops]
        cells = " | ".join(f"{x:.1f}" for x in rates)
        print(f"| {name} | {points:,} | {len(encoded[name]) / 2**20:.2f} | {cells} | {rates[0] / rates[1]:.0f}x |")


if __name__ == "__main__":
    main()
