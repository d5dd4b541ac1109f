"""Behind a real nginx with ``client_max_body_size 1m`` (the default body limit of many proxies in
front of an API), a stream whose requests are several MiB lands every point: a request refused
with HTTP 413 goes again as halves, each a request of its own (own body, own idempotency key),
bodies as big as a refused one are split without asking, and the limit is logged once. Only a
single point larger than the limit fails, naming why.

nginx is Debian's package (``.ci/run`` installs it); it runs in the foreground as one process with
its configuration, logs and temporary files under the test's tmp directory."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _external import require
from _ports import free_port
from aiohttp import web

from beam_nominal import LocalServer, NominalStream
from beam_nominal._wire import metadata as md
from beam_nominal.errors import DeliveryError
from beam_nominal.model import SeriesKey

pytestmark = pytest.mark.timeout(300)

RID = "ri.behind.nginx"
T = 1_767_225_600_000_000_000
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)

_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 1m;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


class _Keys:
    """Records the idempotency key and body size of every write request the server is sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    @web.middleware
    async def middleware(self, request: web.Request, handler: object) -> web.StreamResponse:
        if request.method == "POST":
            self.seen.append((request.headers.get(md.HTTP_IDEMPOTENCY_KEY, ""), request.content_length or 0))
        return await handler(request)  # type: ignore[operator,no-any-return]


@pytest.fixture
def behind_nginx(tmp_path: Path) -> Iterator[tuple[str, LocalServer, _Keys]]:
    require(NGINX is not None, "nginx is not installed (Debian: apt-get install nginx; .ci/run installs it)")
    assert NGINX is not None
    keys = _Keys()
    with LocalServer(tmp_path / "data", http_port=0, http_middlewares=[keys.middleware]) as server:
        backend = int(server.http_url.rsplit(":", 1)[1].split("/")[0])
        conf_dir = tmp_path / "nginx"
        conf_dir.mkdir()
        port = free_port()
        (conf_dir / "nginx.conf").write_text(_CONF.format(dir=conf_dir, port=port, backend=backend))
        proc = subprocess.Popen(
            [NGINX, "-p", str(conf_dir), "-c", str(conf_dir / "nginx.conf"), "-e", str(conf_dir / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while True:  # until nginx listens (or has exited, saying why)
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "nginx exited"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nginx did not listen within 30 s"
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/api", server, keys
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_two_million_points_land_through_a_one_mib_body_limit(
    behind_nginx: tuple[str, LocalServer, _Keys], caplog: pytest.LogCaptureFixture
) -> None:
    url, server, keys = behind_nginx
    rng = np.random.default_rng(7)
    n = 1_000_000
    ts = T + np.arange(n, dtype=np.int64) * 1_000
    doubles = rng.standard_normal(n)
    ints = rng.integers(-(2**62), 2**62, n, dtype=np.int64)
    with caplog.at_level(logging.WARNING, logger="beam_nominal"):
        with NominalStream(url, dataset_rid=RID, linger=None) as stream:
            stream.enqueue_batch("vib.x", ts, doubles)
            stream.enqueue_batch("count", ts, ints, tags={"unit": "n"})
        report = stream.close()
    assert report.points == 2 * n and report.failed_points == 0, report
    got = server.store.read(RID, "vib.x")
    assert np.array_equal(got.column("timestamp").to_numpy(), ts)
    assert np.array_equal(got.column("value").to_numpy(), doubles)  # bit for bit
    got = server.store.read(RID, "count", {"unit": "n"})
    assert np.array_equal(got.column("timestamp").to_numpy(), ts)
    assert np.array_equal(got.column("value").to_numpy(), ints)
    # Every request that reached the server fit the limit and carried a key of its own.
    stored = [(k, size) for k, size in keys.seen if size > 0]
    assert len(stored) > 2 * n * 16 // (1 << 20)
    assert all(size <= 1 << 20 for _, size in stored)
    assert len({k for k, _ in stored}) == len(stored)
    limit_lines = [r for r in caplog.records if "too large" in r.getMessage()]
    assert len(limit_lines) == 1, [r.getMessage() for r in limit_lines]


def test_only_a_single_point_larger_than_the_limit_fails(behind_nginx: tuple[str, LocalServer, _Keys]) -> None:
    url, server, _ = behind_nginx
    # One string value of 4 MiB of random hex digits (zstd makes it no smaller than 2 MiB): no
    # split makes it fit.
    big = np.random.default_rng(3).bytes(2 << 20).hex()
    stream = NominalStream(url, dataset_rid=RID + ".one", linger=None)
    stream.enqueue_batch("small", T + np.arange(1000), np.arange(1000, dtype=np.float64))
    stream.enqueue("log.text", T, big)
    stream.enqueue("log.text", T + 1, "fits")
    with pytest.raises(DeliveryError) as info:
        stream.close()
    assert info.value.undelivered == {SeriesKey.of("log.text"): 1}
    assert "single point larger than the target takes" in info.value.reasons[SeriesKey.of("log.text")]
    assert info.value.report.points == 1001
    assert server.store.read(RID + ".one", "small").num_rows == 1000
    assert server.store.read(RID + ".one", "log.text").column("value").to_pylist() == ["fits"]
