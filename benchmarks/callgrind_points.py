"""Instructions per single point, counted by callgrind: exact where wall and CPU times wander.

Each sink's DoFn is driven directly (no Beam runner: a runner's own ~7,300 instructions per
element would hide the difference) with the points of ``bench_beam``'s ``points`` shape, two
bundles of N points, and again with 3N; the difference divided by 4N is what one more point
costs, start-up and imports cancelled out. Sinks: ``discard`` (the generator and the call
alone), ``WriteToNominal`` (``BatchingWriteDoFn`` writing Avro) and ``nominal-streaming`` (the
benchmark's DoFn, its Rust threads' instructions included). Counts do not see the CPU cache or
the second core, so they complement ``bench_beam`` rather than replace it.

Run: ``.venv/bin/python -m benchmarks.callgrind_points [--points 100000]`` (needs valgrind;
~3 min, two runs at a time).
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


def _child(sink: str, n: int) -> None:
    import logging

    logging.disable(logging.WARNING)
    from beam_nominal.beam._dofn import BatchingWriteDoFn, SinkConfig
    from benchmarks.bench_beam import Discard, NominalStreamingPoints, gen_points

    tmp = tempfile.mkdtemp()
    dofn: Any
    if sink == "discard":
        dofn = Discard()
    elif sink == "nominal-streaming":
        dofn = NominalStreamingPoints(tmp)
    else:
        dofn = BatchingWriteDoFn(SinkConfig(target=f"{tmp}/data.avro", dataset_rid="ri.bench.callgrind"))
        dofn.setup()
    for _ in range(2):
        if sink != "discard":
            dofn.start_bundle()
        process = dofn.process
        for element in gen_points(None, n):
            process(element)
        if sink != "discard":
            dofn.finish_bundle()


def _count(sink: str, n: int) -> int:
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}"]
        cmd += [sys.executable, "-m", "benchmarks.callgrind_points", "--child", sink, str(n)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(match.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000, help="N: points per bundle of the smaller run")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("callgrind_points needs valgrind (Debian package valgrind), not found on PATH", file=sys.stderr)
        return 2
    n = args.points
    jobs = [(sink, size) for sink in SINKS for size in (n, 3 * n)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job), jobs), strict=True))
    per = {sink: (counts[sink, 3 * n] - counts[sink, n]) / (4 * n) for sink in SINKS}
    print(f"callgrind, instructions per point (two bundles of {n:,} and of {3 * n:,} points)\n")
    print("| sink | per point | over discard |")
    print("|---|---|---|")
    for sink in SINKS:
        print(f"| {sink} | {per[sink]:,.0f} | {per[sink] - per['discard']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
