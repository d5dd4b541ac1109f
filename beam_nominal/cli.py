"""``beam-nominal``: run the local ingest server, or inspect what one stored.

    beam-nominal serve --data-dir DIR [--host 127.0.0.1] [--port 50051] [--http-port N]
                       [--token-file F | --token T] [--tls-cert F --tls-key F] [--insecure]
    beam-nominal inspect (--data-dir DIR | --target URL) [--dataset RID] [--channel C ...] [--token T]
                         [--format table|csv|json] [--plot FILE.png]

``serve`` prints exactly one line once it accepts calls, ``listening on grpc://HOST:PORT``, or with
``--http-port`` ``listening on grpc://HOST:PORT and http://HOST:PORT/api`` (the second URL is the
base URL Nominal's HTTP clients take; ``grpcs``/``https`` with TLS), and stops gracefully on
SIGINT/SIGTERM. The token may also come from the ``NOMINAL_TOKEN`` variable or, for ``serve``, a
file (``--token-file``): both keep it out of ``ps``, which shows ``--token``. On an interface other
than loopback, ``serve`` refuses to start without a token, and with a token but without TLS
(``--tls-cert``/``--tls-key``, which serve both listeners), unless ``--insecure`` says so.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, TextIO

__all__ = ["main"]

_TOKEN_ENV = "NOMINAL_TOKEN"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="beam-nominal", description="Run the local ingest server, or inspect what one stored."
    )
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the local ingest server")
    s.add_argument("--data-dir", required=True, help="where datasets are stored (created if missing)")
    s.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback)")
    s.add_argument("--port", type=int, default=50051, help="port; 0 picks a free one (default: 50051)")
    s.add_argument("--http-port", type=int, help="also serve Nominal's HTTP write API on this port; 0 picks a free one")
    s.add_argument(
        "--token",
        help=f"require 'authorization: Bearer TOKEN' (default: ${_TOKEN_ENV}); visible in ps: prefer --token-file",
    )
    s.add_argument("--token-file", help="read the token from this file (its first line)")
    s.add_argument("--tls-cert", help="PEM certificate chain; with --tls-key serves grpcs:// and https://")
    s.add_argument("--tls-key", help="PEM private key")
    s.add_argument(
        "--insecure",
        action="store_true",
        help="serve on an interface other than loopback without a token, or a token without TLS",
    )
    s.add_argument("--grace", type=float, default=30.0, help="seconds in-flight calls get at shutdown")

    i = sub.add_parser("inspect", help="list stored series (and points of one channel)")
    src = i.add_mutually_exclusive_group(required=True)
    src.add_argument("--data-dir", help="read a data directory directly")
    src.add_argument("--target", help="read through a running server, grpc://HOST:PORT")
    i.add_argument("--dataset", help="only this dataset rid")
    i.add_argument(
        "--channel",
        action="append",
        help="also print the first and last points of this channel (repeat for more)",
    )
    i.add_argument("--points", type=int, default=5, help="points shown at each end with --channel")
    i.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default), or csv / json for scripts: the series, or with --channel every point",
    )
    i.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw the --channel channels into a PNG, one panel each (needs the plot extra: matplotlib)",
    )
    i.add_argument("--token", help=f"bearer token for --target (default: ${_TOKEN_ENV})")
    i.add_argument("--ca-cert", help="PEM root certificate for a grpcs:// --target (default: system roots)")
    return p


def _serve(args: argparse.Namespace) -> int:
    from beam_nominal.server import LocalServer
    from beam_nominal.server._malloc import keep_freed_memory

    # This process is only the server: let request-sized buffers be reused across requests.
    keep_freed_memory()

    if (args.tls_cert is None) != (args.tls_key is None):
        print("beam-nominal serve: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if args.token and args.token_file:
        print("beam-nominal serve: give --token or --token-file, not both", file=sys.stderr)
        return 2
    token = args.token or os.environ.get(_TOKEN_ENV) or None
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip() or None
        except OSError as exc:
            print(f"beam-nominal serve: cannot read --token-file: {exc}", file=sys.stderr)
            return 2
        if token is None:
            print(f"beam-nominal serve: --token-file {args.token_file} is empty", file=sys.stderr)
            return 2
    refusal = _exposure(args.host, token is not None, args.tls_cert is not None, args.insecure)
    if refusal:
        print(f"beam-nominal serve: {refusal}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server = LocalServer(
        args.data_dir,
        host=args.host,
        port=args.port,
        token=token,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        http_port=args.http_port,
    )
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        print(f"beam-nominal serve: {exc}", file=sys.stderr)
        return 1
    http = f" and {server.http_url}" if args.http_port is not None else ""
    print(f"listening on {server.target}{http}", flush=True)
    # Event.wait with a timeout wakes up for signals on every platform.
    while not stop.wait(1.0):
        pass
    # Acknowledged writes are already durable; the grace only lets calls in progress finish.
    server.stop(grace=args.grace)
    return 0


def _is_loopback(host: str) -> bool:
    """Whether ``host`` binds loopback only: a loopback address, or a name all of whose addresses
    are loopback (``localhost``). A name that does not resolve is not loopback."""
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def _exposure(host: str, token: bool, tls: bool, insecure: bool) -> str | None:
    """Why ``serve`` refuses to start on ``host`` as configured (None: it may start).

    Protected by default: beyond loopback, anyone who can reach the machine could write into (and
    read back) every dataset without a token, and a token without TLS crosses the network in
    clear (TLS covers both listeners). ``--insecure`` says the user means it; it is then warned.
    """
    if _is_loopback(host):
        return None
    if not token:
        why = (
            f"--host {host} is reachable beyond this machine and no token is set: anyone who can reach it could "
            "write into and read back every dataset. Give a token (--token-file FILE, or NOMINAL_TOKEN) and "
            "--tls-cert FILE --tls-key FILE, or add --insecure if an open server is what you mean"
        )
    elif not tls:
        why = (
            f"--host {host} is reachable beyond this machine and the token would cross the network in clear. Give "
            "--tls-cert FILE --tls-key FILE (both listeners, gRPC and HTTP, use them), or add --insecure if "
            "that is what you mean"
        )
    else:
        return None
    if insecure:
        print(f"beam-nominal serve: warning (--insecure): {why.split('. ')[0]}", file=sys.stderr)
        return None
    return why


def _iso(ns: int) -> str:
    secs, frac = divmod(ns, 1_000_000_000)
    base = dt.datetime.fromtimestamp(secs, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{frac:09d}Z"


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    import grpc

    from beam_nominal.server import LocalStore, RemoteStore

    store: LocalStore | RemoteStore
    if args.target:
        roots = None
        if args.ca_cert:
            with open(args.ca_cert, "rb") as f:
                roots = f.read()
        store = RemoteStore(
            args.target, token=args.token or os.environ.get(_TOKEN_ENV) or None, root_certificates=roots
        )
    else:
        if not os.path.isdir(args.data_dir):
            print(f"beam-nominal inspect: no directory {args.data_dir}", file=sys.stderr)
            return 1
        store = LocalStore(args.data_dir)
    try:
        if args.plot and not args.channel:
            print("beam-nominal inspect: --plot needs --channel (one or more)", file=sys.stderr)
            return 2
        datasets = [args.dataset] if args.dataset else store.list_datasets()
        rows = [["dataset", "channel", "tags", "type", "count", "first", "last"]]
        shown = []
        for rid in datasets:
            for s in store.list_series(rid):
                if args.channel is not None and s.channel not in args.channel:
                    continue
                tags = ",".join(f"{k}={v}" for k, v in sorted(s.tags.items()))
                rows.append(
                    [
                        rid,
                        s.channel,
                        tags,
                        s.value_type.value,
                        str(s.count),
                        _iso(s.min_timestamp_ns),
                        _iso(s.max_timestamp_ns),
                    ]
                )
                shown.append(s)
        if not shown:
            print("no series", file=sys.stderr if args.format != "table" else out)
            return 1 if args.plot else 0
        if args.channel is not None:
            # Panels and points in the order the channels were asked for.
            shown.sort(key=lambda s: args.channel.index(s.channel))
        if args.plot:
            from beam_nominal._plot import plot_series

            try:
                panels = plot_series(store, shown, args.plot, title=", ".join(sorted({s.dataset_rid for s in shown})))
            except ImportError as exc:
                print(f"beam-nominal inspect: {exc}", file=sys.stderr)
                return 1
            print(f"wrote {args.plot}: {panels} panels ({', '.join(dict.fromkeys(s.channel for s in shown))})")
            return 0
        if args.format != "table":
            _machine_output(store, shown, args.format, args.channel is not None, out)
            return 0
        _table(rows, out)
        if args.channel is not None:
            for s in shown:
                table = store.read(s.dataset_rid, s.channel, s.tags)
                ts = table.column("timestamp").to_pylist()
                vals = table.column("value").to_pylist()
                n = args.points
                idx = list(range(len(ts))) if len(ts) <= 2 * n else [*range(n), -1, *range(len(ts) - n, len(ts))]
                tags = ",".join(f"{k}={v}" for k, v in sorted(s.tags.items()))
                print(f"\n{s.dataset_rid} {s.channel}{' ' + tags if tags else ''}", file=out)
                for k in idx:
                    print("  ..." if k < 0 else f"  {_iso(ts[k])}  {vals[k]!r}", file=out)
    except grpc.RpcError as exc:
        print(f"beam-nominal inspect: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"beam-nominal inspect: {exc}", file=sys.stderr)
        return 1
    finally:
        if isinstance(store, RemoteStore):
            store.close()
    return 0


def _json_value(v: Any) -> Any:
    # JSON has no NaN or infinity: those become strings; integers stay exact (Python's json).
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    return v


def _machine_output(store: Any, shown: Sequence[Any], fmt: str, points: bool, out: TextIO) -> None:
    """Series (or, with ``points``, every point of them) as CSV or JSON for scripts."""
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        if points:
            w.writerow(["dataset", "channel", "tags", "type", "timestamp_ns", "timestamp", "value"])
        else:
            w.writerow(["dataset", "channel", "tags", "type", "count", "first_ns", "last_ns", "first", "last"])
    docs = []
    for s in shown:
        tags = json.dumps(dict(sorted(s.tags.items())))
        vt = s.value_type.value
        if not points:
            row = [s.dataset_rid, s.channel, tags, vt, s.count, s.min_timestamp_ns, s.max_timestamp_ns]
            if fmt == "csv":
                w.writerow([*row, _iso(s.min_timestamp_ns), _iso(s.max_timestamp_ns)])
            else:
                names = ("dataset", "channel", "tags", "type", "count", "first_ns", "last_ns")
                docs.append(dict(zip(names, row, strict=True)))
                docs[-1]["tags"] = dict(s.tags)
            continue
        table = store.read(s.dataset_rid, s.channel, s.tags)
        ts = table.column("timestamp").to_pylist()
        vals = table.column("value").to_pylist()
        if fmt == "csv":
            for t, v in zip(ts, vals, strict=True):
                cell = json.dumps(_json_value(v)) if isinstance(v, (list, dict)) else v
                w.writerow([s.dataset_rid, s.channel, tags, vt, t, _iso(t), cell])
        else:
            docs.append(
                {
                    "dataset": s.dataset_rid,
                    "channel": s.channel,
                    "tags": dict(s.tags),
                    "type": vt,
                    "points": [[t, _json_value(v)] for t, v in zip(ts, vals, strict=True)],
                }
            )
    if fmt == "json":
        json.dump(docs, out, allow_nan=False)
        out.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``beam-nominal`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    try:
        return _inspect(args, sys.stdout)
    except BrokenPipeError:
        # `inspect ... | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
