"""Client memory under a stalled server, by buffer cap, on both wires (docs/reliability.md).

For each cap, a child process (tests/integration/_memory_child.py) runs a ``NominalStream`` with
``max_buffered_bytes=cap`` and its wire's default request size against a loopback proxy that
accepts and then forwards nothing, enqueues 2 MiB batches until an enqueue has blocked for a
second, and reports its RSS growth over its RSS before the stream existed; then closes with a 1 s
timeout.

Also shows what the stream's live requests hold then (columns and encoded bodies, the two things
its budget counts), and the bytes glibc's heaps hold free (resident, not handed back: what the
default dynamic mmap threshold costs). ``--fixed-malloc`` runs the children with glibc's dynamic mmap threshold off,
so freed large buffers go back to the OS and the RSS shows live memory more closely.

Run: ``.venv/bin/python -m benchmarks.stalled_memory [--caps 16 32 64 128] [--fixed-malloc]`` (MiB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from _proxy import FaultProxy  # noqa: E402

from beam_nominal.server import LocalServer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", type=int, nargs="+", default=[16, 32, 64, 128], help="max_buffered_bytes in MiB")
    ap.add_argument("--fixed-malloc", action="store_true", help="MALLOC_MMAP/TRIM_THRESHOLD_=128 KiB, 2 arenas")
    args = ap.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.fixed_malloc:
        env |= {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "2"}
    child = ROOT / "tests" / "integration" / "_memory_child.py"
    head = [
        "wire",
        "cap (MiB)",
        "enqueued before blocking (MiB)",
        "RSS growth (MiB)",
        "growth - cap (MiB)",
        "live requests: columns + encoded (MiB)",
        "malloc free heap (MiB)",
        "blocked",
        "close (s)",
    ]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    with LocalServer(tempfile.mkdtemp(prefix="stalled-"), http_port=0) as srv:
        g, h = FaultProxy(srv.port, "grpc"), FaultProxy(srv.http_port, "http")
        g.stall(10**6)
        h.stall(10**6)
        try:
            for cap in args.caps:
                for wire, url in (("gRPC", f"grpc://127.0.0.1:{g.port}"), ("HTTP", f"http://127.0.0.1:{h.port}/api")):
                    out = subprocess.run(
                        [sys.executable, str(child), url, "ri.stalled", str(cap << 20), "1"],
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=300,
                    )
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    growth = (r["peak_rss"] - r["baseline_rss"]) / 2**20
                    live = f"{r['request_columns_bytes'] / 2**20:.1f} + {r['request_encoded_bytes'] / 2**20:.1f}"
                    free = "-" if r["malloc_free_bytes"] is None else f"{r['malloc_free_bytes'] / 2**20:.0f}"
                    print(
                        f"| {wire} | {cap} | {r['enqueued_bytes'] / 2**20:.0f} | {growth:.1f} | {growth - cap:.1f} "
                        f"| {live} | {free} | {r['blocked']} | {r['close_seconds']:.2f} |",
                        flush=True,
                    )
        finally:
            g.close()
            h.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
