"""Client CPU and page faults a point of NominalStream making HTTP bodies, for A/B of commits.

Each measurement is a fresh process that writes one of ``bench_stream``'s shapes into a stream
whose target makes every request's HTTP body (encode, digest, zstd) as ``HttpTarget`` does and
drops it (``callgrind_stream.EncodeAndDrop``): the client's whole work but the network. Trees (a
source checkout each, e.g. ``git worktree add /tmp/base <rev>``; default: this one) alternate
run by run; medians of process CPU ns and minor page faults a point are printed. A 4 KiB
first-touch fault costs ~3 us of CPU on this kind of VM, so faults are part of the story.

Run: ``.venv/bin/python -m benchmarks.client_cpu [--trees /tmp/base .] [--shapes grouped deep]
[--runs 7] [--scale 1.0] [--wire row]`` (build each tree's C module first:
``.venv/bin/python setup.py -q build_ext --inplace`` there).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _child(tree: str, shape: str, scale: float, wire: str) -> None:
    sys.path.insert(0, tree)
    from beam_nominal.stream import NominalStream
    from benchmarks.bench_stream import _shapes
    from benchmarks.callgrind_stream import EncodeAndDrop

    target = EncodeAndDrop(wire)
    points, write = _shapes(scale)[shape]
    with NominalStream(target, dataset_rid="ri.bench.warm", linger=None) as warm:
        _shapes(scale / 10)[shape][1](warm)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu = time.process_time()
    stream = NominalStream(target, dataset_rid="ri.bench.client-cpu", linger=None)
    write(stream)
    acked = stream.close().points
    cpu = time.process_time() - cpu
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    if acked != points:
        raise SystemExit(f"{shape}: {acked} of {points} points acknowledged")
    print(cpu / points * 1e9, faults / points)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], float(argv[3]), argv[4])
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trees", nargs="+", default=["."], help="source checkouts to compare")
    ap.add_argument("--shapes", nargs="+", default=["grouped", "deep", "float_array_64"])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--wire", choices=("row", "columnar"), default="row")
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees]
    # The shapes and the dropping target are this checkout's; the beam_nominal each child
    # imports is its tree's (put first on its path before any import of it).
    here = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": here}
    print(f"client CPU ns / page faults a point, HTTP {args.wire} bodies made and dropped, medians of {args.runs}\n")
    print("| shape | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for shape in args.shapes:
        got: dict[str, list[tuple[float, float]]] = {t: [] for t in trees}
        for _ in range(args.runs):
            for tree in trees:
                cmd = [sys.executable, "-m", "benchmarks.client_cpu", "--child", tree, shape, str(args.scale)]
                out = subprocess.run([*cmd, args.wire], capture_output=True, text=True, check=True, env=env).stdout
                cpu, faults = map(float, out.split())
                got[tree].append((cpu, faults))
        med = statistics.median
        cells = [f"{med(c for c, _ in got[t]):,.0f} / {med(f for _, f in got[t]):.3f}" for t in trees]
        print(f"| {shape} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
