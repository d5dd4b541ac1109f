"""Send requests to Nominal's ``WriteColumnBatches`` gRPC method (or the local server)."""

from __future__ import annotations

import logging
import os
import threading
import urllib.parse
from pathlib import Path

import grpc

from beam_nominal._wire import metadata
from beam_nominal.errors import TargetError
from beam_nominal.targets.base import FIRST_CONTACT_TIMEOUT, UNREACHABLE, Request, TokenSource, first_contact_error

__all__ = ["GrpcTarget", "TokenSource"]

_log = logging.getLogger(__name__)


# CANCELLED is included because we never cancel our own calls: it arrives when the server shuts
# down under an in-flight call, and the idempotency key makes the retry safe either way.
_RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
    }
)


#: gRPC reports a TLS setup that cannot succeed (plaintext server, certificate not trusted,
#: wrong host name) as UNAVAILABLE, like a server that is down; retrying it would only wait out
#: the retry budget. A handshake cut by a restarting server says "Socket closed" or the like,
#: not these, and stays retryable. (HTTP classes certificate errors permanent the same way.)
_TLS_FAILURES = ("SSL_ERROR_SSL", "CERTIFICATE_VERIFY_FAILED", "certificate verify failed")


def _retryable(code: grpc.StatusCode, details: str) -> bool:
    if code == grpc.StatusCode.UNAVAILABLE and any(m in details for m in _TLS_FAILURES):
        return False
    return code in _RETRYABLE


#: What gRPC says when the host has no address: at first contact a wrong URL, not an outage.
_UNKNOWN_HOST = ("DNS resolution failed", "errors resolving", "Domain name not found", "Name or service not known")


def _identity(b: bytes) -> bytes:
    return b


class GrpcTarget:
    """A :class:`~beam_nominal.targets.base.Target` over one gRPC channel.

    Args:
        url: ``grpc://host:port`` (plaintext, for loopback and private networks) or
            ``grpcs://host[:port]`` (TLS; port 443 by default).
        token: a bearer token, a callable returning one (called for every request), or None to
            read ``NOMINAL_TOKEN`` from the environment (no auth header if unset). Never logged
            nor shown in ``repr``.
        ca_file: PEM file of trusted roots for ``grpcs``; the system roots when None.
        options: extra gRPC channel options.

    Raises:
        ValueError: an unsupported URL.
    """

    def __init__(
        self,
        url: str,
        *,
        token: TokenSource = None,
        ca_file: str | os.PathLike[str] | None = None,
        options: list[tuple[str, object]] | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("grpc", "grpcs") or not parsed.hostname:
            raise ValueError(f"gRPC target URL must be grpc://host:port or grpcs://host[:port], got {url!r}")
        if parsed.scheme == "grpc" and parsed.port is None:
            raise ValueError(f"plaintext gRPC target URL needs a port: {url!r}")
        if parsed.path not in ("", "/"):
            raise ValueError(f"gRPC target URL must not have a path: {url!r}")
        port = parsed.port or 443
        host = parsed.hostname
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.url = f"{parsed.scheme}://{address}"
        opts: list[tuple[str, object]] = [
            ("grpc.max_send_message_length", metadata.MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", metadata.MAX_MESSAGE_BYTES),
            # Reconnect soon after a server comes back: our own retry backoff paces attempts, and
            # gRPC's default reconnect backoff (up to 120 s) would fail them fast meanwhile.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 5000),
            *(options or []),
        ]
        if parsed.scheme == "grpcs":
            roots = Path(ca_file).read_bytes() if ca_file is not None else None
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(roots), options=opts)
        else:
            self._channel = grpc.insecure_channel(address, options=opts)
        if token is None:
            token = os.environ.get("NOMINAL_TOKEN") or None
        self._token = token
        self._call = self._channel.unary_unary(
            metadata.WRITE_COLUMN_BATCHES, request_serializer=_identity, response_deserializer=_identity
        )
        self._closed = False
        self._lock = threading.Lock()
        #: Datasets a probe had a real answer for (see :meth:`probe`).
        self._contacted: set[str] = set()

    def __repr__(self) -> str:
        return f"GrpcTarget({self.url!r}, token={'<set>' if self._token else None})"

    @property
    def http_hint(self) -> str:
        """The HTTP base URL of the same host, in the form Nominal documents (``https://HOST/api``)."""
        address = self.url.split("://", 1)[1]
        host = address.rsplit(":", 1)[0]
        return f"{'https' if self.url.startswith('grpcs') else 'http'}://{host}/api"

    def _auth(self) -> str | None:
        token = self._token() if callable(self._token) else self._token
        return f"Bearer {token}" if token else None

    def send(self, request: Request, timeout: float | None = None, *, first_contact: bool = False) -> bool:
        """Send one request; return when the server acknowledged it: True when it answered that
        it had already stored this request (``metadata.ALREADY_STORED``), else False.

        ``first_contact`` marks the call as :meth:`probe`'s (``metadata.FIRST_CONTACT``).

        Raises:
            TargetError: with ``retryable`` True for UNAVAILABLE, RESOURCE_EXHAUSTED,
                DEADLINE_EXCEEDED, ABORTED and CANCELLED, and ``code`` the status name.
        """
        if self._closed:
            raise TargetError(f"{self!r} is closed", retryable=False, code="CLOSED")
        md: list[tuple[str, str | bytes]] = [(metadata.IDEMPOTENCY_KEY, request.key)]
        try:
            auth = self._auth()
        except Exception as exc:
            raise TargetError(f"token callable failed: {type(exc).__name__}", retryable=True, code="TOKEN") from None
        if auth is not None:
            md.append((metadata.AUTHORIZATION, auth))
        if first_contact:
            md.append((metadata.FIRST_CONTACT, "1"))
        try:
            _, call = self._call.with_call(request.body, timeout=timeout, metadata=tuple(md), wait_for_ready=False)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.UNIMPLEMENTED:
                details = (
                    f"{details}; this deployment does not serve gRPC WriteColumnBatches: Nominal is written "
                    f"over HTTP, use target={self.http_hint!r}"
                )
            raise TargetError(
                f"{self.url}: {code.name}: {details}",
                retryable=_retryable(code, details or ""),
                code=code.name,
                rejected=_rejected(exc),
            ) from None
        except ValueError as exc:  # the channel was closed under us
            raise TargetError(f"{self.url}: {exc}", retryable=False, code="CLOSED") from None
        return any(key == metadata.ALREADY_STORED for key, _ in call.trailing_metadata() or ())

    def probe(self, dataset_rid: str, timeout: float = FIRST_CONTACT_TIMEOUT) -> None:
        """First contact (:func:`~beam_nominal.targets.base.first_contact`): one
        ``WriteColumnBatches`` without batches for ``dataset_rid``, which stores nothing.

        Raises:
            TargetError: permanent, naming the URL and what to check: unknown host, connection
                refused, TLS failure, UNAUTHENTICATED/PERMISSION_DENIED (token), NOT_FOUND
                (dataset), UNIMPLEMENTED (use HTTP). Another UNAVAILABLE or DEADLINE_EXCEEDED
                passes (an outage the uploader rides out).
        """
        if dataset_rid in self._contacted:
            return
        try:
            self.send(Request(dataset_rid, ()), timeout=timeout, first_contact=True)
        except TargetError as exc:
            text = str(exc).removeprefix(f"{self.url}: ")
            if exc.code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
                raise first_contact_error(
                    self.url,
                    f"{exc.code}, the token was refused or lacks access to dataset {dataset_rid!r}",
                    "check token= (or NOMINAL_TOKEN) and the dataset's permissions",
                    exc.code,
                ) from None
            if exc.code == "NOT_FOUND":
                raise first_contact_error(self.url, text, f"check dataset_rid ({dataset_rid!r})", exc.code) from None
            if exc.code == "UNIMPLEMENTED":
                raise first_contact_error(self.url, text, "check the URL", exc.code) from None
            if exc.code == "UNAVAILABLE" and not exc.retryable:
                raise first_contact_error(
                    self.url, text, "check grpc:// versus grpcs://, the certificate and ca_file=", "TLS"
                ) from None
            if exc.code == "UNAVAILABLE" and any(m in text for m in _UNKNOWN_HOST):
                raise first_contact_error(self.url, f"unknown host: {text}", "check the host name", exc.code) from None
            if exc.code == "UNAVAILABLE" and any(m in text for m in UNREACHABLE):
                raise first_contact_error(
                    self.url, text, "check the host and port, and that the server is running", exc.code
                ) from None
            if exc.retryable:
                _log.warning("%s: no answer at first contact (%s); writes retry within their budget", self.url, exc)
                return
            if exc.code == "CLOSED":
                raise
        # Any other answer (OK, or a server refusing a request without points) came from a server
        # that took the connection and the token.
        self._contacted.add(dataset_rid)

    def close(self) -> None:
        """Close the channel; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._channel.close()


def _rejected(exc: grpc.RpcError) -> dict[int, str]:
    """The batches a local server named as refused for good (``metadata.REJECTED_BATCHES``)."""
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for item in trailing or ():
        if item.key == metadata.REJECTED_BATCHES:
            return metadata.parse_rejected(item.value)
    return {}
