"""Client CPU and page faults a point of NominalStream making HTTP bodies, for A/B of commits.

Each measurement is a fresh process that writes one of ``bench_stream``'s shapes into a stream
whose target makes every request's HTTP body (encode, digest, zstd) as ``HttpTarget`` does and
drops it (``callgrind_stream.EncodeAndDrop``): the client's whole work but the network. With
``--http`` the streams send to a ``beam-nominal serve`` subprocess over HTTP instead, as
``bench_http`` does. A process writes ``--streams`` streams one after another (a new stream, and
new upload threads, each: what a process that opens a stream per file or per bundle does) and
measures all but the first. Trees (a source checkout each, e.g. ``git worktree add /tmp/base
<rev>``; default: this one) alternate run by run; medians over every measured stream of the
process's CPU ns a point, the kernel's share of it (page faults, zeroing fresh memory) and minor
page faults a point are printed. A 4 KiB first-touch fault costs ~3 us of CPU on this kind of VM,
so the kernel's share is part of the story.

Run: ``.venv/bin/python -m benchmarks.client_cpu [--trees /tmp/base .] [--shapes grouped deep]
[--runs 7] [--streams 2] [--scale 1.0] [--wire row] [--http]`` (build each tree's C module
first: ``.venv/bin/python setup.py -q build_ext --inplace`` there).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _child(tree: str, shape: str, scale: float, wire: str, streams: int, http: bool) -> None:
    sys.path.insert(0, tree)
    from beam_nominal.stream import NominalStream
    from benchmarks.bench_stream import Server, _shapes
    from benchmarks.callgrind_stream import EncodeAndDrop

    server = Server(Path(tempfile.mkdtemp()) / "data", http=True) if http else None
    points, write = _shapes(scale)[shape]
    try:
        for k in range(streams):
            # The first stream warms the process up (imports, allocator growth) and is not measured.
            target: Any = server.http_url if server else EncodeAndDrop(wire)
            options = {"format": wire} if server else {}
            before = resource.getrusage(resource.RUSAGE_SELF)
            stream = NominalStream(target, dataset_rid=f"ri.bench.client-cpu.{k}", linger=None, **options)
            write(stream)
            acked = stream.close().points
            after = resource.getrusage(resource.RUSAGE_SELF)
            if acked != points:
                raise SystemExit(f"{shape}: {acked} of {points} points acknowledged")
            if k:
                kernel = after.ru_stime - before.ru_stime
                cpu = after.ru_utime - before.ru_utime + kernel
                faults = after.ru_minflt - before.ru_minflt
                print(cpu / points * 1e9, kernel / points * 1e9, faults / points)
    finally:
        if server:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], float(argv[3]), argv[4], int(argv[5]), argv[6] == "http")
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trees", nargs="+", default=["."], help="source checkouts to compare")
    ap.add_argument("--shapes", nargs="+", default=["grouped", "deep", "float_array_64"])
    ap.add_argument("--runs", type=int, default=7, help="processes per tree and shape")
    ap.add_argument("--streams", type=int, default=2, help="streams a process writes, the first not measured")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--wire", choices=("row", "columnar"), default="row")
    ap.add_argument("--http", action="store_true", help="send to a beam-nominal serve subprocess over HTTP")
    args = ap.parse_args(argv)
    if args.streams < 2:
        ap.error("--streams must be at least 2 (the first is not measured)")
    trees = [str(Path(t).resolve()) for t in args.trees]
    # The shapes and the dropping target are this checkout's; the beam_nominal each child
    # imports is its tree's (put first on its path before any import of it).
    here = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": here}
    how = f"sent over HTTP ({args.wire})" if args.http else f"HTTP {args.wire} bodies made and dropped"
    print(f"client CPU ns / of it the kernel's / page faults a point, {how}, medians over")
    print(f"{args.runs} processes x {args.streams - 1} measured streams\n")
    print("| shape | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for shape in args.shapes:
        got: dict[str, list[list[float]]] = {t: [] for t in trees}
        for run in range(args.runs):
            for tree in trees if run % 2 == 0 else trees[::-1]:
                cmd = [sys.executable, "-m", "benchmarks.client_cpu", "--child", tree, shape, str(args.scale)]
                cmd += [args.wire, str(args.streams), "http" if args.http else "drop"]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
                got[tree] += [list(map(float, line.split())) for line in out.splitlines()]
        med = statistics.median
        cells = [
            f"{med(r[0] for r in got[t]):,.0f} / {med(r[1] for r in got[t]):,.0f} / {med(r[2] for r in got[t]):.3f}"
            for t in trees
        ]
        print(f"| {shape} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
