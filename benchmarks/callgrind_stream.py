"""Instructions per point of ``NominalStream``'s write calls, counted by callgrind.

``bench_stream``'s shapes (the same Python calls), written by one process into a stream whose
target drops each request unencoded: what the caller's thread and the stream's own machinery
(staging, buffer, cuts) cost, without the wire (see ``bench_http_parts`` for that). Each shape
runs at two sizes after a small warm-up write; the difference divided by the difference in
points is what one more point costs, start-up and imports cancelled out. Counts are the same on
a loaded machine, so two commits can be compared where wall times wander: run it from each
commit's worktree (``cd <worktree> && <venv>/bin/python -m benchmarks.callgrind_stream``).

``--wire row`` (or ``columnar``) has the target make each request's HTTP body as the HTTP target
does (encode, zstd) before dropping it: the client's work but the network and the upload threads'
HTTP calls.

Run: ``.venv/bin/python -m benchmarks.callgrind_stream [--only grouped scalar] [--scale 0.05] [--wire row]``
(needs valgrind; ~1 min a shape, two runs at a time).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class Drop:
    """A target that takes every request and sends nothing."""

    def send(self, request: Any, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass


class EncodeAndDrop(Drop):
    """A target that makes each request's HTTP body (``format``: row or columnar, zstd) as the
    HTTP target does, with its own code, and sends nothing: the client's whole work but the
    network. It asks for the HTTP target's request size."""

    def __init__(self, form: str) -> None:
        from beam_nominal.targets.http import HttpTarget

        self._http = HttpTarget("http://127.0.0.1:9/api", dataset_rid="ri.bench.callgrind", format=form)
        self._form = form
        self.preferred_request_bytes = HttpTarget.preferred_request_bytes

    def send(self, request: Any, timeout: float | None = None) -> None:
        self._http._body(request, self._form)


def _target(wire: str) -> Any:
    return Drop() if wire == "none" else EncodeAndDrop(wire)


def _child(shape: str, scale: float, wire: str = "none") -> None:
    from beam_nominal.stream import NominalStream
    from benchmarks.bench_stream import _shapes

    points, write = _shapes(scale)[shape]
    # linger=None: the Beam path's setting; cuts depend only on the data.
    with NominalStream(_target(wire), dataset_rid="ri.bench.warm", linger=None) as warm:
        _shapes(scale / 10)[shape][1](warm)
    stream = NominalStream(_target(wire), dataset_rid="ri.bench.callgrind", linger=None)
    write(stream)
    acked = stream.close().points
    if acked != points:
        raise SystemExit(f"{shape}: {acked} of {points} points acknowledged")
    print(points)


def _count(shape: str, scale: float, wire: str) -> tuple[int, int]:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    cmd += [sys.executable, "-m", "benchmarks.callgrind_stream", "--child", shape, str(scale), wire]
    # One hash seed: set and dict orders (and so allocation patterns) repeat from run to run.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    match = re.search(r"Collected\s*:\s*(\d+)", done.stderr) or re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(match.group(1).replace(",", "")), int(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], float(argv[2]), argv[3])
        return 0
    from benchmarks.bench_stream import _shapes

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", nargs="*", help="shape names of bench_stream (default: all)")
    ap.add_argument("--scale", type=float, default=0.05, help="the smaller run's scale; the larger is 3x")
    ap.add_argument(
        "--wire",
        choices=("none", "row", "columnar"),
        default="none",
        help="none: the target drops each request unencoded; row / columnar: it makes the HTTP body (zstd) first",
    )
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("callgrind_stream needs valgrind (Debian package valgrind), not found on PATH", file=sys.stderr)
        return 2
    shapes = [s for s in _shapes(args.scale) if not args.only or s in args.only]
    jobs = [(shape, size) for shape in shapes for size in (args.scale, 3 * args.scale)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job, args.wire), jobs), strict=True))
    what = "a dropping target" if args.wire == "none" else f"HTTP {args.wire} bodies made and dropped"
    print(f"callgrind, NominalStream to {what}, instructions per point (scales {args.scale} and 3x)\n")
    print("| shape | per point |")
    print("|---|---|")
    for shape in shapes:
        (small, p_small), (large, p_large) = counts[shape, args.scale], counts[shape, 3 * args.scale]
        print(f"| {shape} | {(large - small) / (p_large - p_small):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
