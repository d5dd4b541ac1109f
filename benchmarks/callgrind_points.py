"""Instructions per point, counted by callgrind: exact where wall and CPU times wander.

Each sink's DoFn is driven directly (no Beam runner: a runner's own ~7,300 instructions per
element would hide the difference) with the elements of one of ``bench_beam``'s shapes
(``--shape``, default ``tuples``), two bundles of N elements, and again with 3N; the difference
divided by the points of 4N elements is what one more point costs, start-up and imports
cancelled out. Sinks: ``discard`` (the generator and the call
alone), ``WriteToNominal`` (``WriteDoFn`` writing Avro) and ``nominal-streaming`` (the
benchmark's DoFn, its Rust threads' instructions included). Counts do not see the CPU cache or
the second core, so they complement ``bench_beam`` rather than replace it.

Run: ``.venv/bin/python -m benchmarks.callgrind_points [--shape dicts] [--points 100000]`` (needs
valgrind; ~3 min, two runs at a time; use fewer elements for wide records).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SINKS = ("discard", "WriteToNominal", "nominal-streaming")


def _child(sink: str, n: int, shape: str) -> None:
    import logging

    logging.disable(logging.WARNING)
    from beam_nominal.beam._dofn import SinkConfig, WriteDoFn
    from benchmarks.bench_beam import SHAPES, Discard

    tmp = tempfile.mkdtemp()
    dofn: Any
    if sink == "discard":
        dofn = Discard()
    elif sink == "nominal-streaming":
        dofn = SHAPES[shape].ns_dofn(tmp)
    else:
        dofn = WriteDoFn(SinkConfig(target=f"{tmp}/data.avro", dataset_rid="ri.bench.callgrind"))
        dofn.setup()
    for _ in range(2):
        if sink != "discard":
            dofn.start_bundle()
        process = dofn.process
        for element in SHAPES[shape].gen(None, n):
            process(element)
        if sink != "discard":
            dofn.finish_bundle()


def _count(sink: str, n: int, shape: str) -> int:
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}"]
        cmd += [sys.executable, "-m", "benchmarks.callgrind_points", "--child", sink, str(n), shape]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(match.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]), argv[3])
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000, help="N: elements per bundle of the smaller run")
    ap.add_argument("--shape", default="tuples", help="an element shape of benchmarks.bench_beam (default tuples)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("callgrind_points needs valgrind (Debian package valgrind), not found on PATH", file=sys.stderr)
        return 2
    n = args.points
    from benchmarks.bench_beam import SHAPES

    per_element = SHAPES[args.shape].points_per_element
    jobs = [(sink, size) for sink in SINKS for size in (n, 3 * n)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job, args.shape), jobs), strict=True))
    per = {sink: (counts[sink, 3 * n] - counts[sink, n]) / (4 * n * per_element) for sink in SINKS}
    print(f"callgrind, {args.shape}, instructions per point (two bundles of {n:,} and of {3 * n:,} elements)\n")
    print("| sink | per point | over discard |")
    print("|---|---|---|")
    for sink in SINKS:
        print(f"| {sink} | {per[sink]:,.0f} | {per[sink] - per['discard']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
