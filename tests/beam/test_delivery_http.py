"""WriteToNominal over HTTP: a bundle that fails after some of its requests were acknowledged,
then is retried whole (as a runner does), stores every point once (tests/beam/test_delivery.py
has the gRPC case). The fault is a real HTTP refusal from an aiohttp middleware in the server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from _first_contact import http_probe
from aiohttp import web
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer

pytestmark = pytest.mark.timeout(300)

BASE = 1_700_000_000_000_000_000
POINTS = 1000


class Faults:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen = 0
        self.fail: set[int] = set()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "POST" and not http_probe(request):
            with self.lock:
                self.seen += 1
                fail = self.seen in self.fail
            if fail:
                raise web.HTTPBadRequest(text="injected fault")
        return await handler(request)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, Faults]]:
    faults = Faults()
    with LocalServer(
        tmp_path_factory.mktemp("http-delivery"), http_port=0, http_middlewares=[faults.middleware]
    ) as srv:
        yield srv, faults


def _series(_: Any) -> Iterator[tuple[str, Any, Any]]:
    ts = BASE + np.arange(POINTS, dtype=np.int64) * 1000
    for i in range(3):
        yield f"retry.{i}", ts, np.arange(POINTS, dtype=np.float64) + i


def _pipeline(target: str, rid: str, fmt: str) -> beam.Pipeline:
    p = beam.Pipeline(runner=FnApiRunner())
    _ = (
        p
        | beam.Impulse()
        | beam.FlatMap(_series)
        | WriteToNominal(target, dataset_rid=rid, format=fmt, max_request_points=100, max_in_flight=1, max_attempts=1)
    )
    return p


@pytest.mark.parametrize("fmt", ["row", "columnar"])
def test_retried_bundle_after_partial_acknowledgement_stores_no_duplicates(
    faulty: tuple[LocalServer, Faults], fmt: str
) -> None:
    server, faults = faulty
    rid = f"ri.test.http-retry.{fmt}"
    with faults.lock:
        faults.fail = {faults.seen + 7}
    with pytest.raises(Exception, match="not delivered") as info:
        _pipeline(server.http_url, rid, fmt).run().wait_until_finish()
    assert "HTTP 400" in str(info.value) and "injected fault" in str(info.value)
    stored_after_failure = sum(s.count for s in server.store.list_series(rid))
    assert 600 <= stored_after_failure < 3 * POINTS
    with faults.lock:
        before_retry = faults.seen
    _pipeline(server.http_url, rid, fmt).run().wait_until_finish()
    with faults.lock:
        assert faults.seen - before_retry == 30  # every request sent again, the acknowledged ones too
    for i in range(3):
        table = server.store.read(rid, f"retry.{i}")
        assert table.column("timestamp").to_numpy().tolist() == (BASE + np.arange(POINTS) * 1000).tolist()
        assert table.column("value").to_numpy().tolist() == (np.arange(POINTS, dtype=np.float64) + i).tolist()
