"""Synthetic vehicle telemetry → WriteToNominal, then a read-back check.

Hundreds of channels at mixed rates: float sensors (10-200 Hz), integer counters, a string flight
phase and status words, float-array spectra; some channels have a gap (an outage) in the middle.
The data is a pure function of ``--seed`` and the channel plan, and :func:`expected_counts`
computes how many points each series must hold from the plan alone (rate x time outside the
gap), so the read-back check does not trust the generator.

Run ``python -m pipelines.synthetic_telemetry --demo`` (what ``make demo`` does): with no
``--target`` it writes to an embedded local server with data under ``./nominal-data``.
Standard Beam options (``--runner``, ``--direct_num_workers`` ...) pass through.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

#: First timestamp of the generated flight (UTC).
START_NS = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * 10**9
FLIGHT_PHASES = ("taxi", "takeoff", "climb", "cruise", "descent", "approach", "landing")
SPECTRUM_WIDTH = 64


@dataclasses.dataclass(frozen=True)
class Channel:
    """One generated channel: its name, kind, rate (points per second) and optional gap."""

    name: str
    kind: str  # "float" | "int" | "string" | "spectrum"
    rate: int
    gap: tuple[int, int] | None = None  # [start, end) seconds without data


def channel_plan(channels: int = 300) -> list[Channel]:
    """The channel list: mostly float sensors, then counters, status strings and spectra."""
    plan = [Channel("flight.phase", "string", 1), Channel("nav.mode", "string", 2)]
    n_spectra = max(1, channels // 75)
    n_int = max(1, channels // 6)
    n_float = max(1, channels - len(plan) - n_spectra - n_int)
    float_rates = (10, 20, 50, 100, 200)
    for i in range(n_float):
        gap = (20 + i % 7, 26 + i % 7) if i % 10 == 3 else None
        plan.append(Channel(f"sensors.s{i:03d}", "float", float_rates[i % len(float_rates)], gap))
    for i in range(n_int):
        plan.append(Channel(f"counters.c{i:03d}", "int", (1, 5, 10)[i % 3], (10, 15) if i % 8 == 5 else None))
    for i in range(n_spectra):
        plan.append(Channel(f"spectra.vib{i}", "spectrum", 5))
    return plan


def _kept(ch: Channel, seconds: int) -> np.ndarray:
    """Indices of points outside the channel's gap, over ``seconds``."""
    k = np.arange(ch.rate * seconds, dtype=np.int64)
    if ch.gap is None:
        return k
    t_s = k // ch.rate
    return k[(t_s < ch.gap[0]) | (t_s >= ch.gap[1])]


def expected_counts(plan: Sequence[Channel], seconds: int, vehicles: int) -> dict[tuple[str, str], int]:
    """Points per (channel, vehicle) from the plan alone: rate x (seconds outside the gap)."""
    out = {}
    for ch in plan:
        gap_s = 0
        if ch.gap is not None:
            gap_s = max(0, min(ch.gap[1], seconds) - min(ch.gap[0], seconds))
        for v in range(vehicles):
            out[(ch.name, f"sim-{v}")] = ch.rate * (seconds - gap_s)
    return out


def generate_series(
    ch: Channel, index: int, vehicle: int, seconds: int, seed: int, chunk_seconds: int = 10
) -> Iterator[tuple[str, np.ndarray, Any, dict[str, str]]]:
    """Series elements ``(channel, timestamps, values, tags)`` for one channel of one vehicle."""
    rng = np.random.default_rng([seed, index, vehicle])
    tags = {"vehicle": f"sim-{vehicle}"}
    k = _kept(ch, seconds)
    ts = START_NS + k * (10**9 // ch.rate)
    t = k / ch.rate
    if ch.kind == "float":
        values: Any = 20.0 + 5.0 * np.sin(2 * np.pi * t / (30 + index % 17)) + rng.normal(0, 0.3, k.size)
    elif ch.kind == "int":
        values = np.cumsum(rng.integers(0, 4, k.size, dtype=np.int64))
    elif ch.kind == "string":
        if ch.name == "flight.phase":
            phase = np.minimum((t * len(FLIGHT_PHASES) / max(seconds, 1)).astype(np.int64), len(FLIGHT_PHASES) - 1)
            values = [FLIGHT_PHASES[p] for p in phase.tolist()]
        else:
            values = [("AUTO", "MANUAL", "HOLD")[int(x)] for x in rng.integers(0, 3, k.size)]
    else:
        freqs = np.linspace(0, 1, SPECTRUM_WIDTH)
        base = np.exp(-((freqs - 0.3) ** 2) / 0.01)
        values = base[None, :] + rng.random((k.size, SPECTRUM_WIDTH)) * 0.1
    step = ch.rate * chunk_seconds
    for start in range(0, k.size, step):
        yield ch.name, ts[start : start + step], values[start : start + step], tags


def _shard_elements(shard: int, shards: int, seconds: int, vehicles: int, seed: int, channels: int) -> Iterator[Any]:
    plan = channel_plan(channels)
    for index, ch in enumerate(plan):
        if index % shards != shard:
            continue
        for v in range(vehicles):
            yield from generate_series(ch, index, v, seconds, seed)


def build(p: Any, args: argparse.Namespace) -> Any:
    """Add the generator and the sink to pipeline ``p``; returns the WriteToNominal result."""
    import apache_beam as beam

    from beam_nominal.beam import WriteToNominal

    shards = args.shards
    return (
        p
        | "Shards" >> beam.Create(list(range(shards)))
        | "Spread" >> beam.Reshuffle()
        | "Generate" >> beam.FlatMap(_shard_elements, shards, args.seconds, args.vehicles, args.seed, args.channels)
        | "Write"
        >> WriteToNominal(
            args.target,
            dataset_rid=args.dataset_rid,
            token=os.environ.get(args.token_env) if args.token_env else None,
            local_data_dir=args.data_dir,
        )
    )


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.synthetic_telemetry",
        description="Generate realistic vehicle telemetry and write it with WriteToNominal. "
        "Unknown options are Beam pipeline options (--runner, --direct_num_workers, ...).",
    )
    parser.add_argument("--demo", action="store_true", help="the make-demo run: local server, summary, check")
    parser.add_argument("--target", default=None, help="grpc(s)://host:port or .avro path; none = embedded server")
    parser.add_argument("--dataset-rid", default=None, help="dataset to write (default: a new one per run)")
    parser.add_argument("--token-env", default="NOMINAL_TOKEN", help="environment variable holding the token")
    parser.add_argument("--data-dir", default="nominal-data", help="embedded server data directory")
    parser.add_argument("--channels", type=int, default=300, help="channels per vehicle (default 300)")
    parser.add_argument("--vehicles", type=int, default=2, help="vehicles, each a tag value (default 2)")
    parser.add_argument("--seconds", type=int, default=60, help="flight length in seconds (default 60)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shards", type=int, default=4, help="generator shards (parallelism)")
    parser.add_argument("--no-verify", action="store_true", help="skip the read-back check")
    return parser.parse_known_args(argv)


def _metrics(result: Any) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, int] = {}
    try:
        query = result.metrics().query(MetricsFilter().with_namespace("beam_nominal"))
    except Exception:  # some runners have no metrics API
        return out
    for c in query["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(c.committed or c.attempted or 0)
    return out


def verify(data_dir: str, dataset_rid: str, expected: dict[tuple[str, str], int]) -> list[str]:
    """Compare stored point counts per series with ``expected``; returns the mismatches."""
    from beam_nominal.server import LocalStore

    got = {(s.channel, s.tags.get("vehicle", "")): s.count for s in LocalStore(data_dir).list_series(dataset_rid)}
    problems = [f"{k}: expected {n}, stored {got.get(k, 0)}" for k, n in expected.items() if got.get(k) != n]
    problems += [f"{k}: not generated, stored {n}" for k, n in got.items() if k not in expected]
    return problems


#: The dataset ``--demo`` writes (and replaces) when no ``--dataset-rid`` is given.
DEMO_DATASET = "ri.beam-nominal.demo"
#: Channels the demo's picture command shows.
PICTURE_CHANNELS = ("sensors.s000", "counters.c000", "flight.phase", "nav.mode")


def _drop_local_dataset(data_dir: str, rid: str) -> None:
    import shutil

    from beam_nominal.server.store import _dir_name

    path = os.path.join(data_dir, _dir_name(rid))
    if os.path.isdir(path):
        print(f"synthetic_telemetry: replacing the previous demo dataset in {os.path.abspath(path)}")
        shutil.rmtree(path)


def _quiet_beam_import_noise(record: logging.LogRecord) -> bool:
    # Importing Beam's IO modules logs a root WARNING about optional GCP client libraries; it
    # says nothing about this job and is the first thing a newcomer would see.
    return "apitools not found" not in record.getMessage()


def _command(name: str) -> str:
    """How to run one of this environment's scripts from the current directory."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(path):
        return name
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def main(argv: Sequence[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    logging.getLogger().addFilter(_quiet_beam_import_noise)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.dataset_rid is None and args.demo and args.target is None:
        # One fixed name, so README.md's commands work after `make demo`; each run replaces it
        # (the read-back check compares exact counts).
        args.dataset_rid = DEMO_DATASET
        _drop_local_dataset(args.data_dir, DEMO_DATASET)
    elif args.dataset_rid is None:
        args.dataset_rid = "ri.beam-nominal.demo." + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    options = PipelineOptions(beam_args)
    runner: Any = None
    if not any(a.startswith("--runner") for a in beam_args):
        # FnApiRunner runs in-process with no download (DirectRunner would first fetch Prism).
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner = FnApiRunner()
    plan = channel_plan(args.channels)
    expected = expected_counts(plan, args.seconds, args.vehicles)
    total = sum(expected.values())
    print(
        f"synthetic_telemetry: {len(plan)} channels x {args.vehicles} vehicles, {args.seconds} s, "
        f"{total:,} points -> {args.target or 'embedded local server'} (dataset {args.dataset_rid})"
    )
    t0 = time.perf_counter()
    p = beam.Pipeline(runner=runner, options=options)
    build(p, args)
    result = p.run()
    result.wait_until_finish()
    elapsed = time.perf_counter() - t0
    m = _metrics(result)
    points = m.get("points", 0)
    print(
        f"done in {elapsed:.1f} s: points {points:,}, series {m.get('series', 0):,}, "
        f"requests {m.get('requests', 0):,}, bytes {m.get('bytes', 0):,}, "
        f"{points / elapsed / 1e6:.2f} M points/s (pipeline start-up included), "
        f"failed elements {m.get('failed_elements', 0)}"
    )
    if args.target is not None or args.no_verify:
        return 0
    data_dir = os.path.abspath(args.data_dir)
    problems = verify(data_dir, args.dataset_rid, expected)
    if problems:
        print(f"READ-BACK CHECK FAILED ({len(problems)} series):", *problems[:20], sep="\n  ", file=sys.stderr)
        return 1
    print(f"read-back check: all {len(expected)} series hold exactly the generated {total:,} points")
    inspect, python = _command("beam-nominal"), _command("python")
    data = os.path.relpath(data_dir) if not os.path.relpath(data_dir).startswith("..") else data_dir
    rid = args.dataset_rid
    print(
        f"\nData: {data_dir} (dataset {rid}). Look at it:\n"
        f"  {inspect} inspect --data-dir {data} --dataset {rid}\n"
        f"  {inspect} inspect --data-dir {data} --dataset {rid} --channel flight.phase\n"
        f"  {inspect} inspect --data-dir {data} --dataset {rid} --channel counters.c000 --format csv\n"
        f'  {python} -c "from beam_nominal.server import LocalStore; '
        f"print(LocalStore({data!r}).read({rid!r}, 'sensors.s000', {{'vehicle': 'sim-0'}}).slice(0, 5))\""
    )
    channels = " ".join(f"--channel {c}" for c in PICTURE_CHANNELS)
    if _has_matplotlib():
        picture = os.path.join(data, f"{rid}.png")
        print(f"  {inspect} inspect --data-dir {data} --dataset {rid} {channels} --plot {picture}")
    else:
        print(f"  pictures: {_command('pip')} install -e '.[plot]', then inspect ... --plot FILE.png (README.md)")
    print("  DuckDB over the Parquet files: README.md, 'Query the data with DuckDB'")
    return 0


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


if __name__ == "__main__":
    sys.exit(main())
