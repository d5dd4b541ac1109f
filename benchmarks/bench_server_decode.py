"""The server's decoders against upb (``Message.FromString``) plus numpy over the repeated fields.

For each request form the local server accepts, each shape of :mod:`benchmarks.bench_wire` and
each byte form (``ours``: what our encoders write; ``canonical``: upb's ``SerializeToString``,
minimal varints and zero fields omitted, as other clients such as nominal-streaming's prost write
them), two decoders:

* ``server``: the decoder the server runs (``decode_request``, ``decode_write_nominal``,
  ``decode_write_batches_v2``);
* ``upb+numpy``: the generated classes' parse, then numpy over every repeated field (the
  ``reference*`` modules, which the server's decoders fall back to).

Every measurement is a fresh process that checks the decoder's output equal to the input, then
times 5 decodes after one unmeasured one and reports their median (CPU time). Rounds alternate
the job order; the table shows the median over rounds in ns a point (a point is a timestamp: a
row of an array series counts once) and the ratio upb+numpy / server.

Run: ``.venv/bin/python -m benchmarks.bench_server_decode [--rounds 3] [--only doubles grouped]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RID = "ri.bench.decode"
FORMS = ("grpc-columns", "http-row", "http-columnar")
BYTES = ("ours", "canonical")
DECODERS = ("server", "upb+numpy")


def _codec(form: str) -> tuple[Callable[..., bytes], Callable[..., bytes], dict[str, Callable[[bytes], Any]]]:
    """(our encoder, the canonical encoder, decoders by name) of one request form; each encoder
    takes the batches."""
    from beam_nominal._wire import reference, reference_columnar, reference_row
    from beam_nominal._wire.decode import decode_request
    from beam_nominal._wire.encode import encode_request
    from beam_nominal._wire.write_batches_v2 import decode_write_batches_v2, encode_write_batches_v2
    from beam_nominal._wire.write_nominal import decode_write_nominal, encode_write_nominal

    if form == "grpc-columns":
        return (
            lambda b: encode_request(RID, b),
            lambda b: reference.encode(RID, b),
            {"server": decode_request, "upb+numpy": reference.decode},
        )
    if form == "http-row":
        return (
            encode_write_nominal,
            reference_row.encode,
            {"server": lambda d: decode_write_nominal(d, RID), "upb+numpy": lambda d: reference_row.decode(d, RID)},
        )
    return (
        lambda b: encode_write_batches_v2(RID, b),
        lambda b: reference_columnar.encode(RID, b),
        {"server": decode_write_batches_v2, "upb+numpy": reference_columnar.decode},
    )


def measure(form: str, shape: str, byte_form: str, decoder: str) -> float:
    """Median CPU ns a point of 5 decodes, after checking the decoder's output."""
    from benchmarks.bench_wire import _equal, _shapes

    batches = _shapes()[shape]
    ours, canonical, decoders = _codec(form)
    data = (ours if byte_form == "ours" else canonical)(batches)
    decode = decoders[decoder]
    if not _equal(batches, decode(data).batches):
        raise AssertionError(f"{form} {shape} {byte_form} {decoder}: decoded batches differ from the input")
    points = sum(b.timestamps.shape[0] for b in batches)
    times = []
    for _ in range(5):
        t0 = time.process_time()
        decode(data)
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1e9 / points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", default=["doubles", "grouped", "int64", "strings", "double_array_64"])
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    ap.add_argument("--one", nargs=4, metavar=("FORM", "SHAPE", "BYTES", "DECODER"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(*args.one)))
        return 0
    jobs = [(f, s, b, d) for f in args.forms for s in args.only for b in BYTES for d in DECODERS]
    got: dict[tuple[str, ...], list[float]] = {j: [] for j in jobs}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for r in range(args.rounds):
        for job in jobs if r % 2 == 0 else reversed(jobs):
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_server_decode", "--one", *job],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                check=True,
            )
            got[job].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"decode CPU ns a point, medians of {args.rounds} rounds (fresh process each)\n")
    print("| form | shape | bytes | server | upb+numpy | upb+numpy / server |")
    print("|---|---|---|---|---|---|")
    for f in args.forms:
        for s in args.only:
            for b in BYTES:
                fast = statistics.median(got[(f, s, b, "server")])
                upb = statistics.median(got[(f, s, b, "upb+numpy")])
                print(f"| {f} | {s} | {b} | {fast:.0f} | {upb:.0f} | {upb / fast:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
