"""``beam-nominal``: run the local ingest server, list, inspect or delete what one stored.

    beam-nominal serve --data-dir DIR [--host 127.0.0.1] [--port 50051] [--http-port N]
                       [--token-file F | --token T] [--tls-cert F --tls-key F] [--insecure]
    beam-nominal datasets --data-dir DIR
    beam-nominal inspect (--data-dir DIR | --target URL) [--dataset RID] [--channel C ...] [--tag K=V ...]
                         [--start T] [--end T] [--token T] [--format table|csv|json] [--plot FILE.png]
    beam-nominal delete --data-dir DIR --dataset RID [--channel C ...] [--tag K=V ...] [--yes]

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
        prog="beam-nominal", description="Run the local ingest server; list, inspect or delete what one stored."
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

    d = sub.add_parser("datasets", help="list the datasets of a data directory")
    d.add_argument("--data-dir", required=True, help="the server's data directory")

    x = sub.add_parser("delete", help="delete a dataset, or some of its series, from a data directory")
    x.add_argument("--data-dir", required=True, help="the server's data directory (the server must be stopped)")
    x.add_argument("--dataset", required=True, help="the dataset rid")
    x.add_argument("--channel", action="append", default=[], help="only series of this channel (repeat for more)")
    x.add_argument(
        "--tag", action="append", default=[], metavar="K=V", help="only series with this tag (repeat: all must match)"
    )
    x.add_argument("--yes", action="store_true", help="do not ask before deleting")

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
    i.add_argument(
        "--tag", action="append", default=[], metavar="K=V", help="only series with this tag (repeat: all must match)"
    )
    i.add_argument("--start", help="only points at or after this time: ISO-8601 with a zone, or int ns since the epoch")
    i.add_argument("--end", help="only points before this time: ISO-8601 with a zone, or int ns since the epoch")
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

    store: LocalStore | RemoteStore | _Window
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
    where = args.target or args.data_dir
    source = store
    try:
        if args.plot and not args.channel:
            print("beam-nominal inspect: --plot needs --channel (one or more)", file=sys.stderr)
            return 2
        try:
            wanted = _tags(args.tag)
            start = _time_ns(args.start, "--start")
            end = _time_ns(args.end, "--end")
        except ValueError as exc:
            print(f"beam-nominal inspect: {exc}", file=sys.stderr)
            return 2
        known = store.list_datasets()
        if args.dataset and args.dataset not in known:
            print(f"beam-nominal inspect: no dataset {args.dataset!r} in {where}{_among(known)}", file=sys.stderr)
            return 1
        datasets = [args.dataset] if args.dataset else known
        if start is not None or end is not None:
            store = _Window(store, start, end)
        rows = [["dataset", "channel", "tags", "type", "count", "first", "last"]]
        shown = []
        for rid in datasets:
            for s in store.list_series(rid):
                if args.channel is not None and s.channel not in args.channel:
                    continue
                if any(s.tags.get(k) != v for k, v in wanted.items()):
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
        missing = [c for c in args.channel or () if c not in {s.channel for s in shown}]
        if missing or not shown:
            # Nothing to show is an answer a script must not take for success.
            what = ", ".join(f"channel {c!r}" for c in missing) if missing else "series"
            filters = [f"tag {k}={v}" for k, v in wanted.items()]
            if start is not None or end is not None:
                filters.append(f"points in [{args.start or '-inf'}, {args.end or '+inf'})")
            scope = f"dataset {args.dataset!r}" if args.dataset else where
            with_ = f" with {' and '.join(filters)}" if filters else ""
            print(f"beam-nominal inspect: no {what} in {scope}{with_}", file=sys.stderr)
            return 1
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
        if isinstance(source, RemoteStore):
            source.close()
    return 0


def _tags(pairs: Sequence[str]) -> dict[str, str]:
    """``--tag K=V`` options as a dict.

    Raises:
        ValueError: one without ``=`` or with an empty key.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--tag takes KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _time_ns(text: str | None, option: str) -> int | None:
    """An ``--start``/``--end`` value as int ns: digits are ns since the epoch, anything else
    ISO-8601 with a zone (a naive time is refused, as everywhere in beam_nominal).

    Raises:
        ValueError: neither, naming the option.
    """
    if text is None:
        return None
    from beam_nominal.model import timestamp_ns

    try:
        return int(text) if text.lstrip("-").isdigit() else timestamp_ns(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from None


def _among(known: Sequence[str]) -> str:
    if not known:
        return " (it holds none)"
    shown = ", ".join(repr(k) for k in known[:10])
    return f" (it holds {shown}{', ...' if len(known) > 10 else ''}; beam-nominal datasets lists them)"


class _Window:
    """A store seen through ``[start, end)``: series with no point inside are left out, counts and
    bounds are of the points inside, and reads return only those."""

    def __init__(self, store: Any, start: int | None, end: int | None) -> None:
        self._store, self._start, self._end = store, start, end

    def list_datasets(self) -> list[str]:
        return list(self._store.list_datasets())

    def read(self, dataset_rid: str, channel: str, tags: Any = None) -> Any:
        import pyarrow.compute as pc

        table = self._store.read(dataset_rid, channel, tags)
        ts = table.column("timestamp")
        keep = None
        if self._start is not None:
            keep = pc.greater_equal(ts, self._start)
        if self._end is not None:
            before = pc.less(ts, self._end)
            keep = before if keep is None else pc.and_(keep, before)
        return table if keep is None else table.filter(keep)

    def list_series(self, dataset_rid: str) -> list[Any]:
        import dataclasses

        out = []
        for s in self._store.list_series(dataset_rid):
            if (self._start is not None and s.max_timestamp_ns < self._start) or (
                self._end is not None and s.min_timestamp_ns >= self._end
            ):
                continue
            ts = self.read(dataset_rid, s.channel, s.tags).column("timestamp").to_numpy()
            if ts.size:
                lo, hi = int(ts.min()), int(ts.max())
                out.append(dataclasses.replace(s, count=int(ts.size), min_timestamp_ns=lo, max_timestamp_ns=hi))
        return out


def _datasets(args: argparse.Namespace, out: TextIO) -> int:
    from beam_nominal.server import LocalStore

    if not os.path.isdir(args.data_dir):
        print(f"beam-nominal datasets: no directory {args.data_dir}", file=sys.stderr)
        return 1
    store = LocalStore(args.data_dir)
    rows = [["dataset", "series", "points", "first", "last"]]
    for rid in store.list_datasets():
        series = store.list_series(rid)
        points = sum(s.count for s in series)
        first = _iso(min(s.min_timestamp_ns for s in series)) if series else "-"
        last = _iso(max(s.max_timestamp_ns for s in series)) if series else "-"
        rows.append([rid, str(len(series)), str(points), first, last])
    if len(rows) == 1:
        print(f"beam-nominal datasets: no dataset in {args.data_dir}", file=sys.stderr)
        return 1
    _table(rows, out)
    return 0


def _delete(args: argparse.Namespace, out: TextIO) -> int:
    from beam_nominal.server import LocalStore
    from beam_nominal.server._delete import DataDirBusyError, delete, plan

    if not os.path.isdir(args.data_dir):
        print(f"beam-nominal delete: no directory {args.data_dir}", file=sys.stderr)
        return 1
    try:
        wanted = _tags(args.tag)
    except ValueError as exc:
        print(f"beam-nominal delete: {exc}", file=sys.stderr)
        return 2
    store = LocalStore(args.data_dir)
    try:
        todo = plan(store, args.dataset, args.channel, wanted)
    except KeyError as exc:
        known = store.list_datasets()
        hint = "" if args.dataset in known else _among(known)
        print(f"beam-nominal delete: {exc.args[0]}{hint}", file=sys.stderr)
        return 1
    what = (
        f"dataset {todo.dataset_rid!r} ({len(todo.series)} series, {_points(todo.points)})"
        if todo.whole
        else f"{len(todo.series)} series ({_points(todo.points)}) of dataset {todo.dataset_rid!r}"
    )
    print(f"will delete {what} from {args.data_dir}:", file=out)
    for key, count in list(todo.series.items())[:20]:
        print(f"  {key.describe()}  {_points(count)}", file=out)
    if len(todo.series) > 20:
        print(f"  ... and {len(todo.series) - 20} more series", file=out)
    if not args.yes:
        if not sys.stdin.isatty():
            print("beam-nominal delete: not confirmed (no terminal to ask on): add --yes", file=sys.stderr)
            return 1
        answer = input("delete? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing deleted", file=out)
            return 1
    try:
        delete(store.data_dir, todo)
    except DataDirBusyError as exc:
        print(f"beam-nominal delete: {exc}", file=sys.stderr)
        return 1
    print(f"deleted {what}", file=out)
    return 0


def _points(n: int) -> str:
    return f"{n} point" if n == 1 else f"{n} points"


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
    if args.command == "delete":
        return _delete(args, sys.stdout)
    try:
        if args.command == "datasets":
            return _datasets(args, sys.stdout)
        return _inspect(args, sys.stdout)
    except BrokenPipeError:
        # `inspect ... | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
