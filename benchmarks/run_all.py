"""Run every benchmark in turn, each in its own process, with its default settings (``make bench``).

Each prints its own tables; docs/benchmarks.md says what they measure and keeps their figures.
Together they take about 10 minutes on the 2-core reference machine; run them on a quiet machine,
as they compare wall times.

Run: ``.venv/bin/python -m benchmarks.run_all [--only bench_stream bench_beam]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCHES = (
    "bench_wire",
    "bench_avro",
    "bench_server",
    "bench_stream",
    "bench_http",
    "bench_http_parts",
    "bench_stream_parts",
    "bench_beam",
    "callgrind_points",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=BENCHES, help="benchmarks to run")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    failed = []
    for name in args.only or BENCHES:
        print(f"\n## {name}\n", flush=True)
        rc = subprocess.call([sys.executable, "-m", f"benchmarks.{name}"], cwd=root)
        if rc:
            failed.append(f"{name} (exit {rc})")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
