"""WriteToNominal's CPU a point for ``beam.Row`` elements, point-shaped and wide, for A/B of commits.

Each measurement is a fresh process running ``Impulse | FlatMap(generate) | WriteToNominal`` on
``FnApiRunner`` in process, into a target that makes every request's HTTP body and drops it
(``callgrind_stream.EncodeAndDrop``): the client's whole work but the network. The process's CPU
time (user + system, Beam's own work included) over the points the sink's ``points`` counter
acknowledged, which must be all of them. Shapes:

* ``point_double`` / ``point_int``: ``beam.Row(channel=, timestamp=, value=)`` over 100 channels,
  the element type unknown to Beam (a FlatMap without hints): the compiled path for doubles, the
  element readers for ints;
* ``point_double_schema`` / ``point_int_schema``: the same with the schema declared
  (``with_output_types``): no rows step at all;
* ``wide`` / ``wide_tags``: ``beam.Row(t=, c0..c9=float)`` with the schema declared and
  ``timestamp_field="t"``, read by ``beam/_rows.py`` (before it: as flat wide records);
  ``wide_tags`` adds a text field as a tag field and a channel prefix.

Trees (source checkouts, e.g. ``git worktree add /tmp/base <rev>``, each with its C module built;
default: this one) alternate run by run, the order reversed every other run; medians. A tree
that predates a shape's options is skipped for it.

Run: ``.venv/bin/python -m benchmarks.bench_rows [--trees /tmp/base .] [--shapes ...] [--runs 7]
[--points 1000000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = ("point_double", "point_int", "point_double_schema", "point_int_schema", "wide", "wide_tags")
T0 = 1_767_225_600_000_000_000
WIDE_CHANNELS = 10


def _pipeline(shape: str, n: int) -> tuple[int, dict[str, Any], Any, Any]:
    """(points, WriteToNominal keywords, the generator, the output type or None)."""
    import apache_beam as beam
    from apache_beam.typehints.row_type import RowTypeConstraint

    if shape.startswith("point"):
        float_values = shape.startswith("point_double")

        def points(_: Any) -> Any:
            for i in range(n):
                yield beam.Row(channel=f"ch{i % 100}", timestamp=T0 + i, value=float(i) if float_values else i)

        typed = RowTypeConstraint.from_fields(
            [("channel", str), ("timestamp", int), ("value", float if float_values else int)]
        )
        return n, {}, points, typed if shape.endswith("_schema") else None
    rows = n // WIDE_CHANNELS
    tags = shape == "wide_tags"
    names = [f"c{j}" for j in range(WIDE_CHANNELS)]

    def wide(_: Any) -> Any:
        for i in range(rows):
            fields = {name: float(i + j) for j, name in enumerate(names)}
            if tags:
                yield beam.Row(t=T0 + i, mode="AB"[i % 2], **fields)
            else:
                yield beam.Row(t=T0 + i, **fields)

    schema = [("t", int), *([("mode", str)] if tags else []), *((name, float) for name in names)]
    # timestamp_field named: a tree without the rows reader reads such rows as flat wide records.
    options: dict[str, Any] = {"timestamp_field": "t"}
    if tags:
        options.update(tag_fields=["mode"], channel_prefix="engine.")
    return rows * WIDE_CHANNELS, options, wide, RowTypeConstraint.from_fields(schema)


def _child(tree: str, shape: str, n: int) -> None:
    sys.path.insert(0, tree)
    import logging

    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_nominal.beam import WriteToNominal
    from benchmarks.callgrind_stream import EncodeAndDrop

    logging.disable(logging.WARNING)

    def run(points_wanted: int, options: dict[str, Any], gen: Any, typed: Any) -> tuple[float, int]:
        t = time.process_time()
        with beam.Pipeline(runner=FnApiRunner()) as p:
            make = beam.FlatMap(gen) if typed is None else beam.FlatMap(gen).with_output_types(typed)
            _ = p | beam.Impulse() | make | WriteToNominal(_drop, dataset_rid="ri.bench.rows", **options)
        cpu = time.process_time() - t
        counters = p.result.metrics().query(MetricsFilter().with_name("points"))["counters"]
        return cpu, sum(int(c.committed or c.attempted or 0) for c in counters)

    def _drop() -> Any:
        return EncodeAndDrop("row")

    warm = _pipeline(shape, max(n // 20, 1000))
    try:
        run(*warm)
    except TypeError as exc:  # a tree without the shape's options
        print(f"skip {exc}")
        return
    points, options, gen, typed = _pipeline(shape, n)
    cpu, acked = run(points, options, gen, typed)
    if acked != points:
        raise SystemExit(f"{shape}: {acked} of {points} points acknowledged")
    print(cpu / points * 1e9)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], int(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trees", nargs="+", default=["."], help="source checkouts to compare")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    ap.add_argument("--runs", type=int, default=7, help="processes per tree and shape")
    ap.add_argument("--points", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees]
    here = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": here}
    print(f"CPU ns a point (process, Beam included), medians over {args.runs} processes\n")
    print("| shape | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for shape in args.shapes:
        got: dict[str, list[float]] = {t: [] for t in trees}
        for run in range(args.runs):
            for tree in trees if run % 2 == 0 else trees[::-1]:
                cmd = [sys.executable, "-m", "benchmarks.bench_rows", "--child", tree, shape, str(args.points)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout.split()
                if out and out[0] != "skip":
                    got[tree].append(float(out[-1]))
        cells = [f"{statistics.median(got[t]):,.0f}" if got[t] else "n/a" for t in trees]
        print(f"| {shape} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
