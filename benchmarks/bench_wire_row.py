"""Row-oriented HTTP body codec (``WriteRequestNominal``): numpy codec against the generated classes.

The shapes of :mod:`benchmarks.bench_wire`, each cut to a ~4 MiB body as our encoder writes it.
Decoders run on our bytes and on upb's canonical bytes (``ref bytes``: minimal varints, zero
fields omitted, as nominal-streaming's prost writes them). Every round times every (shape,
codec, direction) once, in an order reversed every other round; the table shows the median
rate over rounds in M points/s. Before timing, each decoder's output is checked equal to the
input. CPU time of this process is the clock (``--clock wall`` for wall time).

Run: ``.venv/bin/python -m benchmarks.bench_wire_row [--rounds 9] [--clock cpu|wall]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from beam_nominal._wire import reference_row
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.write_nominal import decode_write_nominal, encode_write_nominal
from benchmarks.bench_wire import TARGET_BYTES, _equal, _shapes, interleaved_times

RID = "ri.bench"


def _fit(batches: list[SeriesBatch]) -> list[SeriesBatch]:
    """The leading series, or the leading points of one series, that fill ``TARGET_BYTES``."""
    if len(batches) > 1:
        out, size = [], 0
        for b in batches:
            size += len(encode_write_nominal([b]))
            if size > TARGET_BYTES:
                break
            out.append(b)
        return out
    (b,) = batches
    n = len(b) * TARGET_BYTES // len(encode_write_nominal([b]))
    return [SeriesBatch(b.key, b.value_type, b.timestamps[:n], b.values[:n])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ns = parser.parse_args(argv)
    clock = time.process_time if ns.clock == "cpu" else time.perf_counter

    shapes = {name: _fit(bs) for name, bs in _shapes().items()}
    encoded = {name: encode_write_nominal(bs) for name, bs in shapes.items()}
    ref_bytes = {name: reference_row.encode(bs) for name, bs in shapes.items()}
    for name, bs in shapes.items():
        for data in (encoded[name], ref_bytes[name]):
            for decode in (decode_write_nominal, reference_row.decode):
                if not _equal(bs, decode(data, RID).batches):
                    raise SystemExit(f"{name}: {decode.__module__} does not give back the input")

    jobs: list[tuple[str, str, Callable[[], Any]]] = []
    for name, bs in shapes.items():
        jobs += [
            (name, "encode fast", lambda bs=bs: encode_write_nominal(bs)),
            (name, "encode reference", lambda bs=bs: reference_row.encode(bs)),
            (name, "decode fast", lambda d=encoded[name]: decode_write_nominal(d, RID)),
            (name, "decode fast (ref bytes)", lambda d=ref_bytes[name]: decode_write_nominal(d, RID)),
            (name, "decode reference", lambda d=encoded[name]: reference_row.decode(d, RID)),
        ]
    times = interleaved_times(jobs, ns.rounds, clock)

    ops = ["encode fast", "encode reference", "decode fast", "decode fast (ref bytes)", "decode reference"]
    print(f"row body codec, M points/s (median of {ns.rounds} interleaved rounds, {ns.clock} time)")
    print(f"| shape | points | MiB (ours / ref) | {' | '.join(ops)} |")
    print("|---|---|---|" + "---|" * len(ops))
    for name, bs in shapes.items():
        points = sum(len(b) for b in bs)
        rates = [points / statistics.median(times[(name, op)]) / 1e6 for op in ops]
        cells = " | ".join(f"{x:.1f}" for x in rates)
        mib = f"{len(encoded[name]) / 2**20:.2f} / {len(ref_bytes[name]) / 2**20:.2f}"
        print(f"| {name} | {points:,} | {mib} | {cells} |")


if __name__ == "__main__":
    main()
