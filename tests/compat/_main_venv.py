"""Helper of the HTTP compatibility tests, run with the MAIN venv (Beam, aiohttp, nominal-streaming).

The compat venv holds Nominal's published classes (protobuf 7) but not our client stack; this
script does what needs the latter and writes plain files the compat tests read:

- ``capture OUT``: a loopback HTTP listener (aiohttp) records every request it is sent, first by
  nominal-streaming 0.10.5, then by our ``HttpTarget`` (row form), both writing ``POINTS``; it
  writes ``OUT/index.json`` (method, path, headers of each request, per client) and the raw
  bodies next to it.
- ``read DATA_DIR RID``: every series a local server stored, as JSON (values tagged by type so
  floats, NaN and big integers survive).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import sys
import threading
from pathlib import Path
from typing import Any

RID = "ri.catalog.main.dataset.capture-1"
TOKEN = "tok-capture-1"
T = 1_767_225_600_000_000_000


def points() -> list[tuple[str, str, int, Any, dict[str, str] | None]]:
    """(method, channel, ns, value, tags): what both clients write, by the method each has."""
    out: list[tuple[str, str, int, Any, dict[str, str] | None]] = []
    for k in range(5):
        out.append(("enqueue", "d.temp", T + k, 20.5 + k, {"rig": "7"}))
        out.append(("enqueue", "s.mode", T + k, f"mode-{k}", None))
        out.append(("enqueue_float_array", "fa.spec", T + k, [float(k), 0.5, -1.25], None))
        out.append(("enqueue_string_array", "sa.flags", T + k, ["a", f"b{k}", ""], None))
        out.append(("enqueue_struct", "st.gps", T + k, {"lat": 51.5 + k, "fix": "3d"}, None))
        out.append(("enqueue_from_dict", "", T + 10 + k, {"w.a": k * 1.5, "w.b": f"x{k}"}, {"unit": "m"}))
    return out


def _write(stream: Any) -> None:
    for method, channel, ts, value, tags in points():
        if method == "enqueue_from_dict":
            stream.enqueue_from_dict(ts, value, tags=tags)
        else:
            getattr(stream, method)(channel, ts, value, tags=tags)


class Listener:
    """Records requests and answers 200, on its own event loop thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        threading.Thread(target=self._run, daemon=True).start()
        if not self.ready.wait(30):
            raise RuntimeError("listener did not start")

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.read()
        self.requests.append(
            {"method": request.method, "path": request.path, "headers": dict(request.headers), "body": body}
        )
        return web.Response(status=200, body=b"{}", content_type="application/json")

    def _run(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # The raw bodies are what is compared: no decompression on the way in.
        runner = web.AppRunner(app, auto_decompress=False)
        self.loop.run_until_complete(runner.setup())
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.loop.run_until_complete(web.SockSite(runner, sock).start())
        self.ready.set()
        self.loop.run_forever()


def capture(out: Path) -> None:
    from nominal_streaming import NominalDatasetStream, PyNominalStreamOpts

    from beam_nominal.stream import NominalStream

    out.mkdir(parents=True, exist_ok=True)
    listener = Listener()
    base = f"http://127.0.0.1:{listener.port}/api"
    theirs = NominalDatasetStream(TOKEN, PyNominalStreamOpts(base_api_url=base)).with_core_consumer(RID)
    with theirs:
        _write(theirs)
    n_theirs = len(listener.requests)
    with NominalStream(base, dataset_rid=RID, token=TOKEN, linger=None) as ours:
        _write(ours)
    index: dict[str, list[dict[str, Any]]] = {"nominal-streaming": [], "beam_nominal": []}
    for i, req in enumerate(listener.requests):
        name = f"body-{i}.bin"
        (out / name).write_bytes(req.pop("body"))
        index["nominal-streaming" if i < n_theirs else "beam_nominal"].append({**req, "body_file": name})
    (out / "index.json").write_text(json.dumps(index, indent=1))


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return {"f": "nan" if math.isnan(v) else v.hex()}
    if isinstance(v, list):
        return [_cell(x) for x in v]
    return v


def read(data_dir: Path, rid: str) -> None:
    from beam_nominal.server import LocalStore

    store = LocalStore(data_dir)
    series = []
    for info in store.list_series(rid):
        table = store.read(rid, info.channel, info.tags)
        series.append(
            {
                "channel": info.channel,
                "tags": info.tags,
                "type": info.value_type.value,
                "timestamps": table.column("timestamp").to_pylist(),
                "values": [_cell(v) for v in table.column("value").to_pylist()],
            }
        )
    json.dump(series, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        capture(Path(sys.argv[2]))
    elif sys.argv[1] == "read":
        read(Path(sys.argv[2]), sys.argv[3])
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")
