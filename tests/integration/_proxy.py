"""A loopback TCP proxy that injects connection faults between a client and a real server.

Real sockets both ways; every byte is forwarded as is unless a fault says otherwise. Faults, each
for a number of connections (or responses) and then off, so a client that retries gets through:

- ``drop_connections(n, after_bytes)``: the next ``n`` connections are closed (reset) once
  ``after_bytes`` bytes went from the client to the server (0: at once, before anything);
- ``stall(seconds)``: nothing is forwarded either way for ``seconds`` (connections stay open;
  what arrived meanwhile is delivered afterwards, as after a network partition heals);
- ``cut_responses(n)``: the next ``n`` responses are cut: the connection is closed when the
  server starts answering a request, i.e. after the server committed it, so the client sees a
  failure for a write that is stored and must retry it (``protocol`` says how a response is
  recognised: HTTP/1.1, the first byte from the server on a connection after a request;
  gRPC/HTTP2, the first HEADERS frame the server sends on a request stream).

Counters (``connections``, ``dropped``, ``cut``) say how often each fault fired.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Literal


class FaultProxy:
    def __init__(self, upstream_port: int, protocol: Literal["http", "grpc"], host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.protocol = protocol
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, 0))
        self.port: int = self._listener.getsockname()[1]
        self._drop_left = 0
        self._drop_after = 0
        self._cut_left = 0
        self._stall_until = 0.0
        self._closed = False
        self._conns: list[socket.socket] = []
        self.connections = self.dropped = self.cut = 0
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    # -- faults ------------------------------------------------------------------------------

    def drop_connections(self, n: int, after_bytes: int = 0) -> None:
        with self._lock:
            self._drop_left, self._drop_after = n, after_bytes

    def _take_drop(self) -> bool:
        """One armed mid-request drop, taken when a connection crosses the byte count."""
        with self._lock:
            if self._drop_left > 0:
                self._drop_left -= 1
                self.dropped += 1
                return True
            return False

    def cut_responses(self, n: int) -> None:
        with self._lock:
            self._cut_left = n

    def stall(self, seconds: float) -> None:
        with self._lock:
            self._stall_until = time.monotonic() + seconds

    def retarget(self, upstream_port: int) -> None:
        """Send new connections to another port (a restarted server); cuts the open ones."""
        with self._lock:
            self.upstream = (self.upstream[0], upstream_port)
            conns, self._conns = self._conns, []
        for c in conns:
            _close(c)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        _close(self._listener)
        for c in conns:
            _close(c)
        self._thread.join(10)

    # -- forwarding --------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    _close(client)
                    return
                self.connections += 1
                drop_after = self._drop_after
                drop = drop_after == 0 and self._drop_left > 0
                if drop:
                    self._drop_left -= 1
                    self.dropped += 1
                upstream_addr = self.upstream
            if drop:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(upstream_addr, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _reset(client)  # the server is down: the client sees a refused/reset connection
                continue
            with self._lock:
                self._conns += [client, upstream]
            conn = _Conn(self, client, upstream, drop_after or None)
            threading.Thread(target=conn.pump_up, daemon=True).start()
            threading.Thread(target=conn.pump_down, daemon=True).start()

    def _wait_stall(self) -> None:
        while True:
            with self._lock:
                left = self._stall_until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.02))

    def _take_cut(self) -> bool:
        with self._lock:
            if self._cut_left > 0:
                self._cut_left -= 1
                self.cut += 1
                return True
            return False


class _Conn:
    def __init__(
        self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket, drop_after: int | None
    ) -> None:
        self.proxy, self.client, self.upstream, self.drop_after = proxy, client, upstream, drop_after
        self.sent_up = 0
        self.request_pending = False  # HTTP/1.1: a request went up since the last response
        self.down_buf = b""  # gRPC: server-to-client bytes not yet parsed into frames

    def end(self, reset: bool = False) -> None:
        for s in (self.client, self.upstream):
            _reset(s) if reset else _close(s)

    def pump_up(self) -> None:
        try:
            while data := self.client.recv(65536):
                self.proxy._wait_stall()
                if self.drop_after is not None and self.sent_up + len(data) >= self.drop_after:
                    if self.proxy._take_drop():
                        # Mid-request: forward up to the limit, then the connection is gone.
                        self.upstream.sendall(data[: max(0, self.drop_after - self.sent_up)])
                        self.end(reset=True)
                        return
                    self.drop_after = None
                self.sent_up += len(data)
                self.request_pending = True
                self.upstream.sendall(data)
        except OSError:
            pass
        self.end()

    def pump_down(self) -> None:
        try:
            while data := self.upstream.recv(65536):
                self.proxy._wait_stall()
                if self._response_starts(data) and self.proxy._take_cut():
                    self.end(reset=True)
                    return
                self.client.sendall(data)
        except OSError:
            pass
        self.end()

    def _response_starts(self, data: bytes) -> bool:
        if self.proxy.protocol == "http":
            starts = self.request_pending
            self.request_pending = False
            return starts
        # HTTP/2 frames: 3-byte length, type, flags, 4-byte stream id. A HEADERS frame (type 1)
        # on a stream other than 0 is a response beginning; SETTINGS, PING, WINDOW_UPDATE are not.
        buf = self.down_buf + data
        pos, found = 0, False
        while len(buf) - pos >= 9:
            length = int.from_bytes(buf[pos : pos + 3], "big")
            kind = buf[pos + 3]
            (stream,) = struct.unpack(">I", buf[pos + 5 : pos + 9])
            if kind == 1 and stream & 0x7FFF_FFFF:
                found = True
            if len(buf) - pos < 9 + length:
                break
            pos += 9 + length
        self.down_buf = buf[pos:]
        return found


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def _reset(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer or a middlebox dropping state does."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # A thread blocked in recv on this socket keeps the kernel socket alive past close(), so no
    # RST would go out: SHUT_RD wakes it (and sends nothing), then close() resets.
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RD)
    s.close()
