"""Clients of one ``beam-nominal serve`` process over Nominal's wires, same shapes, interleaved.

Clients, all writing to the same server subprocess on loopback (its CPU is not counted as the
client's; it competes for the same 2 cores in wall time, which counts against every client alike):

- ``nominal-streaming``: nominal-streaming 0.10.5 with ``with_core_consumer`` and the server's
  ``http://127.0.0.1:PORT/api`` as base URL: Nominal's own client on its own wire (HTTP row form);
- ``ours→http-row``: ``NominalStream`` to the same URL, ``format="row"`` (the default);
- ``ours→http-columnar``: the same, ``format="columnar"``;
- ``ours→grpc``: ``NominalStream`` over gRPC ``WriteColumnBatches``.

The shapes are ``bench_stream``'s (wide, deep, grouped, scalar, float arrays 8/64/512, string
arrays 32, one row repeated and rows that differ), written through the API both clients share.
As there, every measurement runs in a fresh process after two unmeasured warm-up runs; rounds
alternate the client order; the table shows medians of points/s (wall time from the first call
to the end of close, i.e. everything acknowledged) and client CPU seconds per million points,
and ratios to nominal-streaming from the same run. Delivery is verified every round by counting
what the server stored for the run's dataset. A second table gives the server's own CPU a point
for each client (from /proc: Linux only): a client whose requests keep the one-core-bound server
busy is measuring the server, not itself.

``--old TREE`` adds ``ours→http-row`` from another checkout (``benchmarks/trees.py``).

Run: ``.venv/bin/python -m benchmarks.bench_http [--rounds 3] [--scale 1.0] [--only deep wide]
[--clients ...] [--request-mib 4] [--old TREE]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import trees
from benchmarks.bench_stream import AT_SCALE, Server, _measure, _shapes, round_spread

CLIENTS = ("nominal-streaming", "ours→http-row", "ours→http-columnar", "ours→grpc")


def _run_nominal_streaming(base_url: str, rid: str, write: Any) -> None:
    from nominal_streaming import NominalDatasetStream, PyNominalStreamOpts

    stream = NominalDatasetStream("bench-token", PyNominalStreamOpts(base_api_url=base_url)).with_core_consumer(rid)
    with stream:
        write(stream)


def _run_ours(url: str, rid: str, write: Any, fmt: str | None) -> None:
    from beam_nominal.stream import NominalStream

    options: dict[str, Any] = {"format": fmt} if fmt else {}
    if os.environ.get("BENCH_REQUEST_MIB"):
        # --request-mib: the request budget under test instead of the target's default.
        options["max_request_bytes"] = int(float(os.environ["BENCH_REQUEST_MIB"]) * 1024 * 1024)
    # linger=None: the Beam path's setting; cuts depend only on the data.
    stream = NominalStream(url, dataset_rid=rid, linger=None, **options)
    write(stream)
    stream.close()


def _child(shape: str, client: str, scale: float, rid: str, grpc_url: str, http_url: str) -> int:
    write = _shapes(scale)[shape][1]

    def run(rid: str) -> None:
        if client == "nominal-streaming":
            _run_nominal_streaming(http_url, rid, write)
        elif client == "ours→grpc":
            _run_ours(grpc_url, rid, write, None)
        else:
            _run_ours(http_url, rid, write, client.removeprefix("ours→http-"))

    for k in range(2):
        run(f"{rid}-warm{k}")
    wall, cpu = _measure(lambda: run(rid))
    print(wall, cpu)
    return 0


def _run_child(
    shape: str, client: str, scale: float, rid: str, server: Server, old: Path | None = None
) -> tuple[float, float]:
    base, is_old = trees.split(client)
    env, cwd = trees.child_env(old if is_old else None)
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_http", "--child", shape, base, str(scale), rid, server.target,
         server.http_url],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd or trees.ROOT,
        env=env,
    ).stdout.split()
    return float(out[0]), float(out[1])


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        shape, client, scale, rid, grpc_url, http_url = argv[1:7]
        return _child(shape, client, float(scale), rid, grpc_url, http_url)
    ap = argparse.ArgumentParser(description="clients of one beam-nominal serve over HTTP row, columnar, gRPC")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the work per shape")
    ap.add_argument("--only", nargs="*", help="shape names to run")
    ap.add_argument("--clients", nargs="*", choices=CLIENTS, default=list(CLIENTS))
    ap.add_argument("--old", type=Path, metavar="TREE", help="also ours→http-row from this checkout")
    ap.add_argument("--request-mib", type=float, help="our clients' max_request_bytes, in MiB (default: the target's)")
    args = ap.parse_args(argv)
    if args.request_mib:
        os.environ["BENCH_REQUEST_MIB"] = str(args.request_mib)
    shapes = _shapes(args.scale)
    shapes = {k: v for k, v in shapes.items() if (k in args.only if args.only else k not in AT_SCALE)}
    clients = tuple(args.clients) + (("ours→http-row" + trees.OLD,) if args.old else ())
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    served: dict[tuple[str, str], list[float]] = {}  # server CPU seconds a run
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "server"
        server = Server(data, http=True)
        try:
            for rnd in range(args.rounds):
                for name, (points, _) in shapes.items():
                    order = clients if rnd % 2 == 0 else clients[::-1]
                    for client in order:
                        tag = "".join(ch if ch.isalnum() else "-" for ch in client)
                        rid = f"ri.bench.{name.replace('_', '-')}.{tag}.{rnd}"
                        s0 = server.cpu_seconds()
                        wall, cpu = _run_child(name, client, args.scale, rid, server, args.old)
                        s1 = server.cpu_seconds()
                        results.setdefault((name, client), []).append((wall, cpu))
                        if s0 is not None and s1 is not None:
                            # The child writes the shape three times (two warm-up runs).
                            served.setdefault((name, client), []).append((s1 - s0) / 3)
                        got = server.count(rid)
                        if got != points:
                            bad.append(f"{client} {name} round {rnd}: {got} of {points} points stored")
                        for r in (rid, f"{rid}-warm0", f"{rid}-warm1"):
                            shutil.rmtree(data / r, ignore_errors=True)
                print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            server.stop()
    base = "nominal-streaming" if "nominal-streaming" in clients else clients[0]
    head = " | ".join(f"{c} M pts/s" + ("" if c == base else " (ratio)") for c in clients)
    print(f"| shape | points | {head} | CPU s / M pts: {', '.join(clients)} |")
    print("|---|---|" + "---|" * len(clients) + "---|")
    for name, (points, _) in shapes.items():
        rate = {c: points / statistics.median(w for w, _ in results[(name, c)]) for c in clients}
        cpu = {c: statistics.median(u for _, u in results[(name, c)]) / points * 1e6 for c in clients}
        cells = [
            f"{rate[c] / 1e6:.2f}" + ("" if c == base else f" ({rate[c] / rate[base]:.2f}x)") for c in clients
        ]
        print(f"| {name} | {points:,} | {' | '.join(cells)} | {', '.join(f'{cpu[c]:.3f}' for c in clients)} |")
    others = [c for c in clients if c != base]
    if others and args.rounds > 1:
        # One round's runs are measured close together: how far their ratio moves from round to
        # round shows how much of a median's ratio the shared cores' load can explain.
        print(f"\nRatio to {base}, round by round (lowest-highest):\n")
        print(f"| shape | {' | '.join(others)} |")
        print("|---|" + "---|" * len(others))
        for name in shapes:
            walls = {c: [w for w, _ in results[(name, c)]] for c in clients}
            print(f"| {name} | {' | '.join(round_spread(walls[base], walls[c]) for c in others)} |")
    if served:
        # A client whose requests cost the server a core's worth of CPU is measuring the server.
        print("\nServer CPU s / M pts (the one serve process, medians over each client's runs):\n")
        print(f"| shape | {' | '.join(clients)} |")
        print("|---|" + "---|" * len(clients))
        for name, (points, _) in shapes.items():
            cells = [f"{statistics.median(served[(name, c)]) / points * 1e6:.3f}" if (name, c) in served else "-"
                     for c in clients]
            print(f"| {name} | {' | '.join(cells)} |")
    print(f"delivery verified: {'all points, every run' if not bad else '; '.join(bad)}")
    print(f"machine: {os.cpu_count()} cores")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
