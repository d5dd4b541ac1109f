"""files_to_nominal on one big ISO-timestamp CSV: points/s and peak RSS, before and after.

Writes a wide CSV (``--rows`` rows, a ``timestamp`` column of ISO-8601 text with microseconds
and ``Z``, ``--channels`` columns of decimals), then runs ``python -m pipelines.files_to_nominal
--input big.csv --layout wide`` into the embedded local server, each run in a fresh process, the
code under test and a baseline (``--baseline DIR``: a directory holding another checkout's
``pipelines`` package, e.g. ``git archive <commit> pipelines | tar -x -C DIR``) alternating
round by round. Each run's data directory is read back and compared with the generator's values,
series by series, before its figure counts. Prints wall time, points/s, peak RSS (the child's
``ru_maxrss``) and the ratio of medians.

    python benchmarks/bench_files.py --rows 10000000 --baseline /tmp/before --rounds 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

T0_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
STEP_US = 1_000  # one row per millisecond


def values(rows: int, channel: int) -> np.ndarray:
    """Channel ``channel``'s values: quarters, exact as doubles and as short decimal text."""
    i = np.arange(rows, dtype=np.int64)
    return ((i * 7 + channel * 13) % 400_000).astype(np.float64) / 4 - 50_000


def write_csv(path: Path, rows: int, channels: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    chunk = 1_000_000
    with pcsv.CSVWriter(
        str(path),
        pa.schema([("timestamp", pa.string())] + [(f"c{j}", pa.string()) for j in range(channels)]),
        write_options=pcsv.WriteOptions(quoting_style="none"),
    ) as w:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            us = T0_US + (np.arange(start, start + n, dtype=np.int64) * STEP_US)
            ts = pc.strftime(pa.array(us, pa.timestamp("us", tz="UTC")), format="%Y-%m-%dT%H:%M:%SZ")
            cols = [ts]
            for j in range(channels):
                v = values(rows, j)[start : start + n]
                cols.append(pa.array([repr(x) for x in v.tolist()], pa.string()))
            w.write_batch(pa.record_batch(cols, names=["timestamp"] + [f"c{j}" for j in range(channels)]))


def verify(data: Path, rows: int, channels: int) -> None:
    """Every channel read back equals the generator's timestamps and values, point for point."""
    from beam_nominal.beam.transform import DEFAULT_LOCAL_DATASET
    from beam_nominal.server import LocalStore

    store = LocalStore(data)
    ts = (T0_US + np.arange(rows, dtype=np.int64) * STEP_US) * 1000
    for j in range(channels):
        table = store.read(DEFAULT_LOCAL_DATASET, f"c{j}")
        got_t = table.column("timestamp").to_numpy()
        got_v = table.column("value").to_numpy()
        if not (np.array_equal(got_t, ts) and np.array_equal(got_v, values(rows, j))):
            raise SystemExit(f"c{j}: what was read back differs from what was written ({len(got_t)} points)")


def run(code_dir: Path | None, csv_path: Path, rows: int, channels: int, label: str) -> tuple[float, int, str]:
    data = Path(tempfile.mkdtemp(prefix=f"bench-files-{label}-"))
    env = dict(os.environ)
    if code_dir is not None:
        env["PYTHONPATH"] = f"{code_dir}{os.pathsep}{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, "-m", "pipelines.files_to_nominal", "--input", str(csv_path), "--layout", "wide"]
    cmd += ["--data-dir", str(data), "--quiet"]
    log = data.with_suffix(".log")
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        # -m puts the working directory first on sys.path: each run starts in its own checkout.
        cwd = code_dir if code_dir is not None else Path(__file__).resolve().parents[1]
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
        # wait4: this child's own peak RSS (not the largest of all children so far).
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    log.unlink()
    if proc.returncode != 0:
        raise SystemExit(f"{label}: exit {proc.returncode}\n{text[-3000:]}")
    rss_kib = usage.ru_maxrss
    # Read back in a child of its own: a child's ru_maxrss starts from its parent's RSS at fork,
    # so this process stays small (no 80 M points held here) for the next run's figure.
    check = [sys.executable, __file__, "--verify", str(data), "--rows", str(rows), "--channels", str(channels)]
    subprocess.run(check, check=True, cwd=Path(__file__).resolve().parents[1])
    shutil.rmtree(data, ignore_errors=True)
    return elapsed, rss_kib * 1024, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--baseline", type=Path, default=None, help="directory with the baseline's pipelines package")
    ap.add_argument("--csv", type=Path, default=None, help="reuse this file (written if missing)")
    ap.add_argument("--verify", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.verify is not None:
        verify(args.verify, args.rows, args.channels)
        return
    workdir = Path(tempfile.mkdtemp(prefix="bench-files-"))
    csv_path = args.csv or workdir / "big.csv"
    if not csv_path.exists():
        t0 = time.perf_counter()
        write_csv(csv_path, args.rows, args.channels)
        print(
            f"wrote {csv_path} ({csv_path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s", flush=True
        )
    points = args.rows * args.channels
    results: dict[str, list[tuple[float, int]]] = {"after": [], "before": []}
    labels = ["before", "after"] if args.baseline else ["after"]
    for r in range(args.rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        for label in order:
            code = args.baseline if label == "before" else None
            elapsed, rss, text = run(code, csv_path, args.rows, args.channels, label)
            print("\n".join("    " + line for line in text.splitlines() if "  failed " in line or "written" in line))
            results[label].append((elapsed, rss))
            print(
                f"round {r + 1} {label:6}: {elapsed:6.1f} s, {points / elapsed / 1e6:5.2f} M points/s, "
                f"peak RSS {rss / 2**20:,.0f} MiB, verified",
                flush=True,
            )
    med = {k: statistics.median(e for e, _ in v) for k, v in results.items() if v}
    for k, v in results.items():
        if v:
            print(
                f"{k:6}: median {med[k]:.1f} s, {points / med[k] / 1e6:.2f} M points/s, "
                f"max RSS {max(r for _, r in v) / 2**20:,.0f} MiB"
            )
    if "before" in med and med.get("before"):
        print(f"after/before points/s: {med['before'] / med['after']:.2f}x")
    if args.csv is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
