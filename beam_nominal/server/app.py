"""The embeddable local server (:class:`LocalServer`) and its read-back client (:class:`RemoteStore`)."""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from concurrent import futures
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
import pyarrow as pa

from beam_nominal._wire import metadata as _md
from beam_nominal._wire._proto.beam_nominal.local.v1 import local_pb2, local_pb2_grpc
from beam_nominal.server.service import (
    CapabilitiesService,
    ReadService,
    TokenInterceptor,
    WriterService,
    info_from_message,
    table_from_read_response,
)
from beam_nominal.server.store import LocalStore, SeriesInfo, _Committer

if TYPE_CHECKING:
    from aiohttp.typedefs import Middleware

    from beam_nominal.server.http import HttpListener

__all__ = ["LocalServer", "RemoteStore", "parse_target"]

_log = logging.getLogger(__name__)

_GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", _md.MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _md.MAX_MESSAGE_BYTES),
]
_TARGET_RE = re.compile(r"(?:(?P<scheme>grpcs?)://)?(?P<address>[^/]+?)/?")


def parse_target(target: str) -> tuple[str, bool]:
    """Split ``grpc://host:port`` / ``grpcs://host:port`` / ``host:port`` into (address, tls).

    Raises:
        ValueError: anything else.
    """
    m = _TARGET_RE.fullmatch(target.strip())
    if m is None or ":" not in m["address"]:
        raise ValueError(f"target {target!r} is not grpc://HOST:PORT or grpcs://HOST:PORT")
    return m["address"], m["scheme"] == "grpcs"


def _ssl_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context from PEM bytes (the ssl module loads certificates from files only)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="beam-nominal-tls-") as d:  # mode 0700: the key stays private
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert, key)
    return ctx


def _read_bytes(path_or_bytes: str | os.PathLike[str] | bytes) -> bytes:
    if isinstance(path_or_bytes, bytes):
        return path_or_bytes
    with open(path_or_bytes, "rb") as f:
        return f.read()


class LocalServer:
    """A local Nominal-compatible ingest server writing Parquet under ``data_dir``.

    Use it as a context manager (``with LocalServer(d) as server: server.target``) or call
    :meth:`start` and :meth:`stop`. An OK reply to a write means its data is on disk, fsynced.

    Args:
        data_dir: where datasets are stored; created if missing.
        host: interface to bind; loopback by default.
        port: port to bind; 0 picks a free one (see :attr:`port`).
        token: if set, every call must carry ``authorization: Bearer <token>``.
        tls_cert: PEM certificate chain (path or bytes); with ``tls_key`` the server speaks TLS.
        tls_key: PEM private key (path or bytes).
        interceptors: extra ``grpc.ServerInterceptor`` s, run after the token check, e.g. to
            inject faults in tests.
        max_workers: request handler threads (per listener).
        http_port: if not None, also serve Nominal's HTTP write API on this port of the same
            host (0 picks a free one; see :attr:`http_url`): same store and idempotency ledger,
            same token, HTTPS with the same certificate. See :mod:`beam_nominal.server.http`.
        http_middlewares: aiohttp middlewares run after the HTTP token check (the HTTP
            fault-injection seam).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tls_cert: str | os.PathLike[str] | bytes | None = None,
        tls_key: str | os.PathLike[str] | bytes | None = None,
        interceptors: Sequence[grpc.ServerInterceptor[Any, Any]] = (),
        max_workers: int = 8,
        http_port: int | None = None,
        http_middlewares: Sequence[Middleware] = (),
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("TLS needs both tls_cert and tls_key")
        self.store = LocalStore(data_dir)
        self.host = host
        self._requested_port = port
        self._token = token
        self._tls = (_read_bytes(tls_key), _read_bytes(tls_cert)) if tls_key and tls_cert else None
        self._interceptors = list(interceptors)
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._port: int | None = None
        self._committer: _Committer | None = None
        self._http_port = http_port
        self._http_middlewares = list(http_middlewares)
        self._http: HttpListener | None = None

    @property
    def port(self) -> int:
        """The bound port (known once started)."""
        if self._port is None:
            raise RuntimeError("LocalServer is not started")
        return self._port

    @property
    def target(self) -> str:
        """``grpc://HOST:PORT`` (``grpcs://`` with TLS) for clients."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'grpcs' if self._tls else 'grpc'}://{host}:{self.port}"

    @property
    def http_port(self) -> int:
        """The HTTP listener's bound port (known once started with ``http_port``)."""
        if self._http is None:
            raise RuntimeError("LocalServer has no HTTP listener (started with http_port?)")
        return self._http.port

    @property
    def http_url(self) -> str:
        """``http://HOST:PORT/api`` (``https://`` with TLS): the base URL Nominal's clients take."""
        if self._http is None:
            raise RuntimeError("LocalServer has no HTTP listener (started with http_port?)")
        return self._http.url

    def start(self) -> LocalServer:
        """Recover the data dir (drop unfinished commits, index the rest), bind and serve.

        Raises:
            RuntimeError: already started, or the address could not be bound.
        """
        if self._server is not None:
            raise RuntimeError("LocalServer already started")
        committer = _Committer(self.store)
        interceptors: list[grpc.ServerInterceptor[Any, Any]] = []
        if self._token is not None:
            interceptors.append(TokenInterceptor(self._token))
        interceptors.extend(self._interceptors)
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self._max_workers, thread_name_prefix="beam-nominal-server"
            ),
            interceptors=interceptors,
            # Without this a second server on the same port would silently share it.
            options=[*_GRPC_OPTIONS, ("grpc.so_reuseport", 0)],
        )
        server.add_generic_rpc_handlers((WriterService(committer).handler(),))
        local_pb2_grpc.add_LocalReadServiceServicer_to_server(ReadService(self.store), server)
        local_pb2_grpc.add_CapabilitiesServiceServicer_to_server(CapabilitiesService(), server)
        host = f"[{self.host}]" if ":" in self.host else self.host
        address = f"{host}:{self._requested_port}"
        try:
            if self._tls is not None:
                port = server.add_secure_port(address, grpc.ssl_server_credentials([self._tls]))
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise RuntimeError(f"cannot bind {address}: {exc}") from None
        if port == 0:
            raise RuntimeError(f"cannot bind {address}")
        http = None
        if self._http_port is not None:
            from beam_nominal.server.http import HttpListener

            try:
                http = HttpListener(
                    committer,
                    self.host,
                    self._http_port,
                    token=self._token,
                    ssl_context=_ssl_context(self._tls[1], self._tls[0]) if self._tls else None,
                    middlewares=self._http_middlewares,
                    max_workers=self._max_workers,
                ).start()
            except (RuntimeError, OSError):  # ssl.SSLError is an OSError
                server.stop(None)
                committer.close()
                raise
        server.start()
        self._server, self._port, self._committer, self._http = server, port, committer, http
        return self

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting calls (gRPC and HTTP), let calls in progress finish for up to ``grace`` seconds, return.

        When this returns, no handler of this server commits anything more: a commit already
        writing is waited for (it is bounded by the disk), later ones are refused with UNAVAILABLE.
        So a new server on the same directory sees every request this one acknowledged.
        """
        server, self._server = self._server, None
        http, self._http = self._http, None
        if server is not None:
            # Both listeners drain at once, and close before the committer, whose gate has the last word.
            stopped = server.stop(grace)
            if http is not None:
                http.stop(grace)
            stopped.wait()
            if self._committer is not None and not self._committer.close():
                _log.warning("LocalServer.stop: a commit was still running after 30 s")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server terminates; True if it did within ``timeout``."""
        server = self._server
        return True if server is None else bool(server.wait_for_termination(timeout))

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class RemoteStore:
    """The :class:`LocalStore` read API over a server's ``LocalReadService``.

    Args:
        target: ``grpc://HOST:PORT`` or ``grpcs://HOST:PORT``.
        token: sent as ``authorization: Bearer <token>``.
        root_certificates: PEM roots for ``grpcs://`` (system roots when None).
    """

    def __init__(self, target: str, token: str | None = None, root_certificates: bytes | None = None) -> None:
        address, tls = parse_target(target)
        if tls:
            self._channel = grpc.secure_channel(
                address, grpc.ssl_channel_credentials(root_certificates), options=_GRPC_OPTIONS
            )
        else:
            self._channel = grpc.insecure_channel(address, options=_GRPC_OPTIONS)
        self._metadata = ((_md.AUTHORIZATION, f"Bearer {token}"),) if token is not None else ()
        self._read = local_pb2_grpc.LocalReadServiceStub(self._channel)

    def list_datasets(self) -> list[str]:
        """Rids of every dataset the server holds, sorted."""
        resp = self._read.ListSeries(local_pb2.ListSeriesRequest(), metadata=self._metadata)
        return sorted({s.dataset_rid for s in resp.series})

    def list_series(self, dataset_rid: str) -> list[SeriesInfo]:
        """Like :meth:`LocalStore.list_series`."""
        resp = self._read.ListSeries(
            local_pb2.ListSeriesRequest(dataset_rid=dataset_rid), metadata=self._metadata
        )
        return [info_from_message(s) for s in resp.series]

    def read(self, dataset_rid: str, channel: str, tags: Mapping[str, str] | None = None) -> pa.Table:
        """Like :meth:`LocalStore.read`.

        Raises:
            KeyError: no such series (the server answered NOT_FOUND).
        """
        req = local_pb2.ReadSeriesRequest(dataset_rid=dataset_rid, channel=channel, tags=dict(tags or {}))
        try:
            resp = self._read.ReadSeries(req, metadata=self._metadata)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise KeyError(exc.details()) from None
            raise
        return table_from_read_response(resp)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
