"""NominalStream over HTTP against a real LocalServer, with faults injected by aiohttp middlewares.

The middlewares run inside the server after its token check, so every fault is a real HTTP answer
(or a real cut connection) on loopback, and what the server stored is read back from its files.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from _first_contact import http_probe
from aiohttp import web

from beam_nominal._wire import metadata as md
from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream
from beam_nominal.targets.http import HttpTarget

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.http-faults-1"
T = 1_700_000_000_000_000_000
FAST = {"linger": None, "initial_backoff": 0.01, "max_backoff": 0.05}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Faults:
    """An aiohttp middleware that answers write requests as a test tells it to.

    ``plan(n, request)`` is called for the n-th write attempt (1-based) and returns what to do:
    ``None`` (serve it), ``("status", code, headers)`` (answer without storing), ``"stall"`` (store
    it, then hold the answer until the test ends), ``"cut"`` (store it, then drop the connection
    without answering). Attempts are recorded with their idempotency key and arrival time.
    """

    def __init__(self, plan: Callable[[int, web.Request], Any]) -> None:
        self.plan = plan
        self.lock = threading.Lock()
        self.attempts: list[tuple[str, str, float]] = []
        self.release = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST" or http_probe(request):
            return await handler(request)
        self.loop = asyncio.get_running_loop()
        with self.lock:
            self.attempts.append((request.path, request.headers.get(md.HTTP_IDEMPOTENCY_KEY, ""), time.monotonic()))
            n = len(self.attempts)
        action = self.plan(n, request)
        if action is None:
            return await handler(request)
        if isinstance(action, tuple):
            _, status, headers = action
            return web.json_response({"error": "injected"}, status=status, headers=headers)
        if action == "echo-auth":
            # A proxy that quotes the request back in its refusal.
            return web.Response(status=401, text=f"you sent {request.headers.get('Authorization')}")
        response = await handler(request)
        if action == "drip":
            # Stored; the answer's body then arrives a byte at a time, past any deadline.
            assert isinstance(response, web.Response)
            drip = web.StreamResponse(status=200, headers={"Content-Length": "1000"})
            await drip.prepare(request)
            for _ in range(1000):
                await drip.write(b" ")
                if self.release.is_set():
                    break
                await asyncio.sleep(0.05)
            return drip
        if action == "stall":
            # Longer than the client's attempt deadline; released when the test ends.
            await asyncio.wait_for(self.release.wait(), 60)
            return response
        assert action == "cut"
        assert request.transport is not None
        request.transport.abort()
        return response

    def stop(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.release.set)


def _count(server: LocalServer, channel: str = "a") -> int:
    return int(LocalStore(server.store.data_dir).read(RID, channel).num_rows)


def _series(server: LocalServer, channel: str = "a") -> list[float]:
    return LocalStore(server.store.data_dir).read(RID, channel).column("value").to_pylist()  # type: ignore[no-any-return]


def _serve(tmp_path: Path, faults: Faults, **kw: Any) -> LocalServer:
    return LocalServer(tmp_path / "data", http_port=0, http_middlewares=[faults.middleware], **kw).start()


@pytest.mark.parametrize("fmt", ["row", "columnar"])
def test_503_for_the_first_attempts_then_every_point_once(tmp_path: Path, fmt: str) -> None:
    faults = Faults(lambda n, _r: ("status", 503, {}) if n <= 3 else None)
    server = _serve(tmp_path, faults)
    try:
        with NominalStream(server.http_url, dataset_rid=RID, format=fmt, max_attempts=5, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 1000), np.arange(1000, dtype=np.float64))
        report = s.close()
        assert report.points == 1000 and report.retries == 3
        assert _series(server) == [float(i) for i in range(1000)]
        assert len({key for _, key, _ in faults.attempts}) == 1, "every attempt carries the same key"
    finally:
        server.stop()


def test_429_with_retry_after_is_waited_for(tmp_path: Path) -> None:
    faults = Faults(lambda n, _r: ("status", 429, {"Retry-After": "1"}) if n == 1 else None)
    server = _serve(tmp_path, faults)
    try:
        with NominalStream(server.http_url, dataset_rid=RID, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 10), np.ones(10))
        assert s.close().retries == 1 and _count(server) == 10
        (_, k1, t1), (_, k2, t2) = faults.attempts
        # Backoff alone would retry after at most 10 ms.
        assert k1 == k2 and t2 - t1 >= 0.95
    finally:
        server.stop()


def test_an_answer_stalled_past_the_deadline_after_the_commit_is_stored_once(tmp_path: Path) -> None:
    faults = Faults(lambda n, _r: "stall" if n == 1 else None)
    server = _serve(tmp_path, faults)
    try:
        with NominalStream(server.http_url, dataset_rid=RID, attempt_timeout=0.5, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 500), np.arange(500, dtype=np.float64))
        report = s.close()
        assert report.points == 500 and report.retries == 1
        assert _series(server) == [float(i) for i in range(500)]
    finally:
        faults.stop()
        server.stop()


@pytest.mark.parametrize("fmt", ["row", "columnar"])
def test_a_connection_cut_after_the_commit_is_stored_once(tmp_path: Path, fmt: str) -> None:
    faults = Faults(lambda n, _r: "cut" if n <= 2 else None)
    server = _serve(tmp_path, faults)
    try:
        with NominalStream(
            server.http_url, dataset_rid=RID, format=fmt, max_request_points=400, max_in_flight=1, **FAST
        ) as s:
            s.enqueue_batch("a", np.arange(T, T + 1000), np.arange(1000, dtype=np.float64))
        report = s.close()
        assert report.points == 1000 and report.requests == 3 and report.retries == 2
        assert _series(server) == [float(i) for i in range(1000)]
    finally:
        server.stop()


def test_requests_refused_to_the_end_give_the_exact_undelivered_count(tmp_path: Path) -> None:
    # The first two requests the server sees are refused on every attempt; the others are stored.
    refused: set[str] = set()

    def plan(_n: int, request: web.Request) -> Any:
        key = request.headers[md.HTTP_IDEMPOTENCY_KEY]
        if key in refused or len(refused) < 2:
            refused.add(key)
            return ("status", 503, {})
        return None

    faults = Faults(plan)
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(
            server.http_url, dataset_rid=RID, max_attempts=3, max_request_points=300, max_in_flight=1, **FAST
        )
        s.enqueue_batch("a", np.arange(T, T + 1000), np.ones(1000), tags={"k": "v"})
        s.enqueue("b", T, 1.0)
        with pytest.raises(DeliveryError) as info:
            s.close()
        stored = sum(i.count for i in server.store.list_series(RID))
        err = info.value
        assert len(refused) == 2 and sum(key in refused for _, key, _ in faults.attempts) == 2 * 3
        assert 0 < stored < 1001 and err.points == 1001 - stored and err.report.points == stored
        assert "HTTP 503" in err.reasons[SeriesKey.of("a", {"k": "v"})]
    finally:
        server.stop()


def test_a_permanent_refusal_is_not_retried_and_quotes_the_server(tmp_path: Path) -> None:
    faults = Faults(lambda _n, _r: ("status", 422, {}))
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(server.http_url, dataset_rid=RID, max_attempts=5, **FAST)
        s.enqueue("a", T, 1.0)
        with pytest.raises(DeliveryError) as info:
            s.close()
        assert len(faults.attempts) == 1 and info.value.points == 1
        reason = info.value.reasons[SeriesKey.of("a")]
        assert "HTTP 422" in reason and "injected" in reason
    finally:
        server.stop()


def _no_columnar(_n: int, request: web.Request) -> Any:
    return ("status", 404, {}) if request.path.endswith(md.HTTP_WRITE_COLUMNAR_PATH) else None


def test_columnar_falls_back_to_row_when_allowed_and_loses_nothing(tmp_path: Path) -> None:
    faults = Faults(_no_columnar)
    server = _serve(tmp_path, faults)
    target = HttpTarget(server.http_url, dataset_rid=RID, format="columnar", fallback_to_row=True)
    try:
        with NominalStream(target, dataset_rid=RID, max_request_points=100, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 1000), np.arange(1000, dtype=np.float64))
        assert s.close().points == 1000 and target.format == "row"
        assert _series(server) == [float(i) for i in range(1000)]
        paths = [p for p, _, _ in faults.attempts]
        assert paths[0].endswith(md.HTTP_WRITE_COLUMNAR_PATH) and paths.count(paths[0]) <= 3
        assert sum(p.endswith(f"/nominal/{RID}") for p in paths) == 10
    finally:
        target.close()
        server.stop()


def test_columnar_without_fallback_fails_clearly_and_stores_nothing(tmp_path: Path) -> None:
    faults = Faults(_no_columnar)
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(server.http_url, dataset_rid=RID, format="columnar", **FAST)
        s.enqueue_batch("a", np.arange(T, T + 10), np.ones(10))
        with pytest.raises(DeliveryError) as info:
            s.close()
        assert info.value.points == 10
        reason = info.value.reasons[SeriesKey.of("a")]
        assert "HTTP 404" in reason and "format='row'" in reason and "Nothing was stored" in reason
        assert server.store.list_series(RID) == []
    finally:
        server.stop()


def test_a_grpc_target_answered_unimplemented_names_the_http_url() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        # Found at the first contact, when the stream opens.
        with pytest.raises(TargetError) as info:
            NominalStream(f"grpc://127.0.0.1:{port}", dataset_rid=RID, **FAST)
        reason = str(info.value)
        assert "UNIMPLEMENTED" in reason and "target='http://127.0.0.1/api'" in reason
    finally:
        server.stop(0)


def test_an_answer_dripped_past_the_deadline_ends_the_attempt_at_the_deadline(tmp_path: Path) -> None:
    faults = Faults(lambda n, _r: "drip" if n == 1 else None)
    server = _serve(tmp_path, faults)
    try:
        target = HttpTarget(server.http_url, dataset_rid=RID)
        with NominalStream(target, dataset_rid=RID, attempt_timeout=1.0, **FAST) as s:
            s.enqueue_batch("a", np.arange(T, T + 100), np.ones(100))
            started = time.monotonic()
        # The status came first: the request is acknowledged at the deadline, not 50 s later.
        assert s.close().points == 100 and time.monotonic() - started < 10
        assert _count(server) == 100
        target.close()
    finally:
        faults.stop()
        server.stop()


def test_a_token_read_from_a_file_works_and_no_token_ever_shows(tmp_path: Path) -> None:
    secret = "tok-SECRET-1"
    (tmp_path / "token").write_text(secret + "\n")
    with LocalServer(tmp_path / "data", http_port=0, token=secret) as server:
        with NominalStream(server.http_url, dataset_rid=RID, token=(tmp_path / "token").read_text(), **FAST) as s:
            s.enqueue("a", T, 1.0)
        assert s.close().points == 1
        with pytest.raises(TargetError) as refused:  # at the first contact
            NominalStream(server.http_url, dataset_rid=RID, token=secret + "\r\nX-Evil: 1", **FAST)
        assert "token holds characters" in str(refused.value) and secret not in str(refused.value)
        # A token that turns bad later (a callable) fails its requests the same way.
        tokens = iter([secret, secret + "\r\nX-Evil: 1"])
        bad = NominalStream(server.http_url, dataset_rid=RID, token=lambda: next(tokens), **FAST)
        bad.enqueue("a", T + 1, 2.0)
        with pytest.raises(DeliveryError) as info:
            bad.close()
        assert "token holds characters" in str(info.value.reasons) and secret not in str(info.value)
        assert secret not in repr(info.value.reasons)


def test_a_refusal_that_echoes_the_request_does_not_leak_the_token(tmp_path: Path) -> None:
    secret = "tok-SECRET-2"
    faults = Faults(lambda _n, _r: "echo-auth")
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(server.http_url, dataset_rid=RID, token=secret, **FAST)
        s.enqueue("a", T, 1.0)
        with pytest.raises(DeliveryError) as info:
            s.close()
        reason = info.value.reasons[SeriesKey.of("a")]
        assert "HTTP 401" in reason and "Bearer <token>" in reason and secret not in reason
    finally:
        server.stop()


def test_a_request_refused_as_too_large_goes_in_halves_each_with_its_own_key(tmp_path: Path) -> None:
    # A body limit between a 10-point request and its 5-point halves: refused once, then the
    # halves are taken; nothing of the refused request was stored, each half has its own key.
    sizes: list[int] = []

    def plan(_n: int, request: web.Request) -> Any:
        sizes.append(request.content_length or 0)
        return ("status", 413, {}) if request.content_length and request.content_length >= 100 else None

    faults = Faults(plan)
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(server.http_url, dataset_rid=RID, **FAST)
        s.enqueue_batch("a", np.arange(T, T + 10), np.arange(10.0))
        report = s.close()
        assert report.points == 10 and report.requests == 2 and report.failed_points == 0
        assert _series(server) == list(np.arange(10.0))
        assert len(faults.attempts) == 3 and len({key for _, key, _ in faults.attempts}) == 3
        assert sizes[0] >= 100 > max(sizes[1:])
    finally:
        server.stop()


def test_a_point_refused_as_too_large_alone_fails_naming_the_limit(tmp_path: Path) -> None:
    faults = Faults(lambda _n, _r: ("status", 413, {}))
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(server.http_url, dataset_rid=RID, **FAST)
        s.enqueue_batch("a", np.arange(T, T + 10), np.ones(10))
        with pytest.raises(DeliveryError) as info:
            s.close()
        reason = info.value.reasons[SeriesKey.of("a")]
        assert "single point larger than the target takes" in reason and "HTTP 413" in reason
        assert info.value.points == 10 and info.value.report.points == 0
        # 10 points in halves down to single points: every part was refused, none twice (a
        # retried part would not be smaller), and parts as big as a refused one never left.
        assert len(faults.attempts) == len({key for _, key, _ in faults.attempts}) <= 1 + 2 + 4 + 8
    finally:
        server.stop()


def test_stop_none_does_not_wait_for_a_request_in_progress(tmp_path: Path) -> None:
    held = threading.Event()

    def plan(_n: int, _r: web.Request) -> Any:
        held.set()
        return "stall"

    faults = Faults(plan)
    server = _serve(tmp_path, faults)
    try:
        s = NominalStream(server.http_url, dataset_rid=RID, attempt_timeout=60, max_attempts=1, **FAST)
        s.enqueue("a", T, 1.0)
        outcome: list[BaseException] = []

        def close() -> None:
            try:
                s.close(timeout=30)
            except DeliveryError as exc:  # the held request was cut: not delivered, and said so
                outcome.append(exc)

        sender = threading.Thread(target=close, daemon=True)
        sender.start()
        assert held.wait(30)
        started = time.monotonic()
        server.stop(None)  # gRPC's stop(None) aborts at once; HTTP must not wait for the held request
        assert time.monotonic() - started < 10
        sender.join(30)
        assert [e.points for e in outcome] == [1]
    finally:
        faults.stop()
        server.stop()
