"""Send requests to Nominal's HTTP write API (or the local server's HTTP listener).

Two forms, both what Nominal serves under the base URL its clients take (``https://HOST/api``):

- ``row`` (default): ``POST {base}/storage/writer/v1/nominal/{dataset_rid}`` with a
  ``WriteRequestNominal`` body, the endpoint every released Nominal client writes to, so every
  deployment serves it.
- ``columnar``: ``POST {base}/storage/writer/v1/nominal-columnar`` with a
  ``direct_channel_writer.v2.WriteBatchesRequest`` body: one packed column per series, smaller
  and cheaper to encode. A server without it answers 404/415; with ``fallback_to_row=True`` the
  target then switches to ``row`` for good (nothing was stored, so nothing is lost or doubled).

Bodies are zstd level -1 (Nominal's clients send level 1, slower and larger on our bodies).
Every attempt carries the same ``Idempotency-Key`` (a digest of the uncompressed body), so a retry
of a request the server stored but could not acknowledge is stored once by servers that keep keys
(the local one does).
The client is one urllib3 pool: keep-alive connections, safe to share between the uploader's
threads. Retrying is the uploader's job; this module only classifies each answer.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import urllib3
import zstandard

import beam_nominal
from beam_nominal._wire import metadata
from beam_nominal.errors import TargetError
from beam_nominal.targets.base import FIRST_CONTACT_TIMEOUT, UNREACHABLE, Request, TokenSource, first_contact_error

__all__ = ["FORMATS", "HttpTarget", "check_base_url", "check_options", "retry_after_seconds"]

_log = logging.getLogger(__name__)

FORMATS = ("row", "columnar")

#: Answers worth trying again: the server or a proxy is busy, restarting or timed out.
_RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
#: What a server that does not serve the columnar endpoint answers.
_NO_COLUMNAR_STATUS = frozenset({404, 415})
#: Longest part of an error response quoted in an error message.
_MAX_QUOTED = 500
#: Most of an answer read: a local server's refusal names its rejected batches in the body.
_MAX_ANSWER = 1 << 20
#: Level -1 is faster than Nominal's clients' level 1 on our row bodies and compresses them as well
#: or better (docs/benchmarks.md, "HTTP"); every zstd decoder reads it.
_ZSTD_LEVEL = -1


def _encode_row(request: Request) -> bytes | memoryview:
    # Transient: Request.encoded digests and compresses it at once and keeps only the result.
    from beam_nominal._wire.write_nominal import encode_write_nominal_transient

    # The row message names the request's source ``session_name`` (field 2).
    return encode_write_nominal_transient(request.batches, session_name=request.source_name)


def _encode_columnar(request: Request) -> bytes:
    from beam_nominal._wire.write_batches_v2 import encode_write_batches_v2

    body: bytes = encode_write_batches_v2(request.dataset_rid, request.batches)
    return body


_ENCODERS: dict[str, Callable[[Request], bytes | memoryview]] = {"row": _encode_row, "columnar": _encode_columnar}


def check_base_url(base_url: str) -> urllib.parse.SplitResult:
    """``base_url`` split, if it can be Nominal's base URL: checked where a user gives it.

    Raises:
        ValueError: not ``http(s)://HOST[:PORT][/PATH]``, or with credentials, a query or a
            fragment (credentials are never echoed).
    """
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.username is not None or parsed.password is not None:
        # Never echo it: the part before the host is a secret, and the URL would show in display
        # data and logs.
        raise ValueError(
            f"HTTP target URL must not carry credentials ({parsed.scheme}://…@{parsed.hostname}): give token="
        )
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"HTTP target URL must be http(s)://HOST[:PORT][/PATH], got {base_url!r}")
    if parsed.query or parsed.fragment:
        raise ValueError(f"HTTP target URL must not have a query or fragment: {base_url!r}")
    return parsed


def check_options(format: str, fallback_to_row: object) -> None:
    """Raises ValueError / TypeError for a ``format`` or ``fallback_to_row`` HttpTarget cannot take."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if not isinstance(fallback_to_row, bool):
        raise TypeError(f"fallback_to_row must be a bool, got {fallback_to_row!r}")


def retry_after_seconds(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None if absent or bad."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now())


class HttpTarget:
    """A :class:`~beam_nominal.targets.base.Target` over Nominal's HTTP write API.

    Args:
        base_url: ``https://HOST[:PORT][/PATH]`` or ``http://...``, the base URL Nominal's
            clients take, e.g. ``https://api.gov.nominal.io/api`` or the local server's
            ``http://127.0.0.1:PORT/api``. Endpoint paths are appended to it.
        dataset_rid: the dataset every request goes to (part of the row endpoint's path).
        token: a bearer token, a callable returning one (called per attempt, so it may refresh),
            or None to read ``NOMINAL_TOKEN`` (no header if unset). Never logged nor shown.
        format: ``"row"`` (default) or ``"columnar"``.
        fallback_to_row: with ``format="columnar"``, switch to ``row`` when the server answers
            the columnar endpoint with 404 or 415 instead of failing.
        ca_file: PEM file of trusted roots for ``https`` (the system's by default).
        connect_timeout: seconds to open a connection (bounded by each attempt's deadline).
        max_connections: connections kept open (one per concurrent upload is enough).

    Raises:
        ValueError: a URL that is not ``http(s)://HOST...``, or an unknown format.
    """

    #: In the packer's column-form bytes (a row body is somewhat larger before zstd). Larger
    #: requests amortise per-series costs, but bodies much beyond what Nominal's own client sends
    #: are not known to be accepted (docs/benchmarks.md, "Request size").
    preferred_request_bytes = 8 * 1024 * 1024

    def __init__(
        self,
        base_url: str,
        *,
        dataset_rid: str | None = None,
        token: TokenSource = None,
        format: str = "row",
        fallback_to_row: bool = False,
        ca_file: str | os.PathLike[str] | None = None,
        connect_timeout: float = 10.0,
        max_connections: int = 8,
    ) -> None:
        parsed = check_base_url(base_url)
        check_options(format, fallback_to_row)
        if not isinstance(dataset_rid, str) or not dataset_rid:
            raise ValueError(f"an HTTP target needs a dataset_rid, got {dataset_rid!r}")
        if not (isinstance(connect_timeout, (int, float)) and math.isfinite(connect_timeout) and connect_timeout > 0):
            raise ValueError(f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}")
        self.url = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path.rstrip("/"), "", ""))
        self.dataset_rid = dataset_rid
        quoted_rid = urllib.parse.quote(dataset_rid, safe="")
        self._urls = {
            "row": self.url + metadata.HTTP_WRITE_NOMINAL_PATH.format(dataset_rid=quoted_rid),
            "columnar": self.url + metadata.HTTP_WRITE_COLUMNAR_PATH,
        }
        self._format = format
        self._fallback_to_row = fallback_to_row
        self._connect_timeout = float(connect_timeout)
        if token is None:
            token = os.environ.get("NOMINAL_TOKEN") or None
        self._token = token
        pool_kw: dict[str, Any] = {}
        if ca_file is not None:
            pool_kw["ca_certs"] = os.fspath(ca_file)
        # retries=False: the uploader retries, with backoff and the same idempotency key; urllib3
        # retrying on its own would hide attempts from it and could redirect a POST.
        pool_kw.update(num_pools=2, maxsize=max_connections, block=False, retries=False)
        # Workers behind a proxy set the usual variables (HTTPS_PROXY, NO_PROXY), as for pip.
        proxy = urllib.request.getproxies().get(parsed.scheme)
        if proxy and not urllib.request.proxy_bypass(parsed.hostname or ""):
            self._pool: urllib3.PoolManager = urllib3.ProxyManager(proxy, **pool_kw)
        else:
            self._pool = urllib3.PoolManager(**pool_kw)
        self._headers = {
            "Content-Type": metadata.PROTOBUF_CONTENT_TYPE,
            "Content-Encoding": "zstd",
            "Accept": "application/json",
            "User-Agent": f"beam-nominal/{beam_nominal.__version__}",
        }
        # zstd compressors are not safe to share between threads: one per uploader thread.
        self._local = threading.local()
        self._lock = threading.Lock()
        self._closed = False
        #: A probe had a real answer (see :meth:`probe`).
        self._contacted = False
        #: The smallest body the server refused as too large (HTTP 413), once it has: bodies of
        #: that size or more are refused here without a round trip (see :meth:`send`).
        self._refused_bytes: int | None = None

    @property
    def format(self) -> str:
        """The form requests are sent in now (``columnar`` may have fallen back to ``row``)."""
        return self._format

    def __repr__(self) -> str:
        return f"HttpTarget({self.url!r}, format={self._format!r}, token={'<set>' if self._token else None})"

    def _compress(self, body: bytes | memoryview) -> bytes:
        compressor = getattr(self._local, "zstd", None)
        if compressor is None:
            compressor = self._local.zstd = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
        out: bytes = compressor.compress(body)
        return out

    def _body(self, request: Request, form: str) -> tuple[bytes, str]:
        # Compressed bytes are cached with the form: retries re-send them without recompressing.
        return request.encoded(f"http-{form}+zstd", _ENCODERS[form], self._compress)

    def _current_token(self) -> str | None:
        try:
            token = self._token() if callable(self._token) else self._token
        except Exception as exc:
            raise TargetError(f"token callable failed: {type(exc).__name__}", retryable=True, code="TOKEN") from None
        if not token:
            return None
        # A token read from a file keeps its newline; what is left must fit in a header, and is
        # never quoted in the error (http.client's own message would carry it).
        token = token.strip()
        if not token.isascii() or not token.isprintable() or " " in token:
            raise TargetError(
                "the token holds characters an HTTP header cannot carry (spaces, control or non-ASCII characters)",
                retryable=False,
                code="TOKEN",
            )
        return token

    def _redacted(self, text: str, token: str | None) -> str:
        """Server text as quoted in errors: a proxy echoing the request must not leak the token."""
        return text.replace(token, "<token>") if token else text

    def send(self, request: Request, timeout: float | None = None) -> bool:
        """Send one request; return when the server answered 2xx: True when it said it had already
        stored this request (``metadata.ALREADY_STORED``), else False.

        Raises:
            TargetError: ``retryable`` for connection errors, timeouts and 408/425/429/500/502/
                503/504 (``retry_after`` from the ``Retry-After`` header); permanent for other
                answers, quoting the server's response. ``code`` is ``HTTP <status>`` or the
                transport error's name.
        """
        if request.dataset_rid != self.dataset_rid:
            raise TargetError(
                f"{self!r} writes to dataset {self.dataset_rid!r}, not {request.dataset_rid!r}",
                retryable=False,
                code="DATASET",
            )
        form = self._format
        self._check_size(request, form)
        status, answer, headers = self._post(request, form, timeout)
        text = answer[:_MAX_QUOTED]
        if status in _NO_COLUMNAR_STATUS and form == "columnar":
            if not self._fallback_to_row:
                raise TargetError(
                    f"{self._urls[form]} answered HTTP {status}: this server does not serve Nominal's columnar "
                    f"endpoint; use format='row' (served by every Nominal deployment), or fallback_to_row=True. "
                    f"Nothing was stored. Server said: {text}",
                    retryable=False,
                    code=f"HTTP {status}",
                )
            with self._lock:
                if self._format == "columnar":
                    _log.warning(
                        "%s answered HTTP %d to the columnar endpoint; sending the row form from now on",
                        self.url,
                        status,
                    )
                    self._format = "row"
            form = "row"
            status, answer, headers = self._post(request, form, timeout)
            text = answer[:_MAX_QUOTED]
        if 200 <= status < 300:
            return bool(headers.get(metadata.ALREADY_STORED) == "1")
        where = f"{self._urls[form]}: HTTP {status}"
        if status in _RETRYABLE_STATUS:
            raise TargetError(
                f"{where}: {text}",
                retryable=True,
                code=f"HTTP {status}",
                retry_after=retry_after_seconds(headers.get("Retry-After")),
            )
        if status == 401 or status == 403:
            raise TargetError(f"{where}: the token was refused: {text}", retryable=False, code=f"HTTP {status}")
        if status == 413:
            size = len(self._body(request, form)[0])
            with self._lock:
                first = self._refused_bytes is None
                if first or size < self._refused_bytes:  # type: ignore[operator]
                    self._refused_bytes = size
            if first:
                _log.warning(
                    "%s refused a request of %d bytes (%d points) as too large (HTTP 413: a body limit, often "
                    "a proxy's); requests that big are split from now on (max_request_bytes= sets their size)",
                    self.url,
                    size,
                    request.points,
                )
            raise TargetError(
                f"{where}: the server refused a request of {size:,} bytes ({request.points:,} points) as too "
                f"large. Server said: {text}",
                retryable=False,
                code="HTTP 413",
                too_large=True,
            )
        if 300 <= status < 400:
            raise TargetError(
                f"{where}: redirected to {headers.get('Location')!r}; give that base URL instead",
                retryable=False,
                code=f"HTTP {status}",
            )
        raise TargetError(f"{where}: {text}", retryable=False, code=f"HTTP {status}", rejected=_rejected(answer))

    def probe(self, dataset_rid: str | None = None, timeout: float = FIRST_CONTACT_TIMEOUT) -> None:
        """First contact (:func:`~beam_nominal.targets.base.first_contact`): one row request
        without points to this target's dataset, which the local server and Nominal both answer
        after checking the token and (Nominal) the dataset; nothing is stored.

        Raises:
            TargetError: permanent, naming the URL and what to check: unknown host, connection
                refused, TLS failure, HTTP 401/403 (token), 404 (dataset or base URL), a redirect.
                A timeout or a retryable status passes (an outage the uploader rides out).
        """
        if self._contacted:
            return
        if dataset_rid is not None and dataset_rid != self.dataset_rid:
            raise TargetError(
                f"{self!r} writes to dataset {self.dataset_rid!r}, not {dataset_rid!r}", retryable=False, code="DATASET"
            )
        host = urllib.parse.urlsplit(self.url).netloc
        try:
            status, answer, headers = self._post(Request(self.dataset_rid, ()), "row", timeout, first_contact=True)
        except TargetError as exc:
            text = str(exc).removeprefix(f"{self._urls['row']}: ")
            if exc.code == "NameResolutionError":
                raise first_contact_error(self.url, f"unknown host: {text}", "check the host name", exc.code) from None
            if exc.code == "NewConnectionError" and any(m in text for m in UNREACHABLE):
                raise first_contact_error(
                    self.url,
                    f"nothing accepts connections at {host}: {text}",
                    "check the host and port, and that the server is running",
                    exc.code,
                ) from None
            if exc.code == "SSLError":
                raise first_contact_error(
                    self.url,
                    text,
                    "check http:// versus https://, the server's certificate and host name, and ca_file=",
                    exc.code,
                ) from None
            if not exc.retryable:
                raise
            _log.warning("%s: no answer at first contact (%s); writes will retry within their budget", self.url, exc)
            return
        text = answer[:_MAX_QUOTED]
        if status in (401, 403):
            raise first_contact_error(
                self.url,
                f"HTTP {status}, the token was refused or lacks access to dataset {self.dataset_rid!r}: {text}",
                "check token= (or NOMINAL_TOKEN) and the dataset's permissions",
                f"HTTP {status}",
            )
        if status == 404:
            raise first_contact_error(
                self._urls["row"],
                f"HTTP 404, no dataset {self.dataset_rid!r} or no Nominal write API there: {text}",
                "check dataset_rid and the base URL (Nominal's is https://HOST/api)",
                "HTTP 404",
            )
        if 300 <= status < 400:
            raise first_contact_error(
                self.url,
                f"HTTP {status}, redirected to {headers.get('Location')!r}",
                "give that base URL instead",
                f"HTTP {status}",
            )
        if status in _RETRYABLE_STATUS:
            _log.warning("%s: HTTP %d at first contact; writes will retry within their budget", self.url, status)
            return
        self._contacted = True

    def _check_size(self, request: Request, form: str) -> None:
        """Refuse, as the server would, a body at least as big as one it refused as too large:
        the uploader splits it without a round trip. The same parts come out as if the server
        had been asked, so a retried bundle sends the same requests with the same keys."""
        limit = self._refused_bytes
        if limit is None:
            return
        size = len(self._body(request, form)[0])
        if size >= limit:
            raise TargetError(
                f"{self._urls[form]}: a request of {size:,} bytes ({request.points:,} points) is at least the "
                f"{limit:,} bytes the server refused as too large (HTTP 413)",
                retryable=False,
                code="HTTP 413",
                too_large=True,
            )

    def _post(
        self, request: Request, form: str, timeout: float | None, first_contact: bool = False
    ) -> tuple[int, str, Any]:
        if self._closed:
            raise TargetError(f"{self!r} is closed", retryable=False, code="CLOSED")
        deadline = None if timeout is None else time.monotonic() + timeout
        body, key = self._body(request, form)
        headers = {**self._headers, metadata.HTTP_IDEMPOTENCY_KEY: key}
        if first_contact:
            headers[metadata.FIRST_CONTACT] = "1"
        token = self._current_token()
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connect = self._connect_timeout if timeout is None else min(self._connect_timeout, timeout)
        url = self._urls[form]
        try:
            # Each socket read waits at most ``timeout``; the answer's body is read against the
            # deadline below, so a server dripping it cannot hold the attempt longer.
            resp = self._pool.request(
                "POST",
                url,
                body=body,
                headers=headers,
                timeout=urllib3.Timeout(connect=connect, read=timeout),
                retries=False,
                redirect=False,
                preload_content=False,
            )
        except urllib3.exceptions.SSLError as exc:
            # A certificate that does not verify will not verify on the next attempt either.
            raise TargetError(f"{url}: TLS: {exc}", retryable=False, code="SSLError") from None
        except urllib3.exceptions.HTTPError as exc:
            # Connection refused or cut, a stalled answer: the request may or may not have been
            # stored, and the idempotency key makes trying again safe either way.
            name = type(exc).__name__
            raise TargetError(f"{url}: {name}: {self._redacted(str(exc), token)}", retryable=True, code=name) from None
        except (ValueError, OSError) as exc:
            # http.client refusing a header, a socket error urllib3 did not wrap: the message may
            # quote a header value, so only its kind is kept.
            name = type(exc).__name__
            raise TargetError(f"{url}: {name} while sending the request", retryable=True, code=name) from None
        try:
            text = self._read_answer(resp, deadline)
        finally:
            resp.release_conn()
        return resp.status, self._redacted(text, token), resp.headers

    @staticmethod
    def _read_answer(resp: Any, deadline: float | None) -> str:
        """The first bytes of the answer (for errors), read before ``deadline``; a body
        that is late or long gets its connection closed instead of waited for. The status is
        what counts: the server has decided by the time it sends one."""
        data = b""
        try:
            while len(data) < _MAX_ANSWER and (deadline is None or time.monotonic() < deadline):
                chunk = resp.read1(_MAX_ANSWER - len(data))
                if not chunk:
                    break
                data += chunk
            else:
                resp.close()
        except (urllib3.exceptions.HTTPError, OSError):
            resp.close()
        return data[:_MAX_ANSWER].decode("utf-8", "replace").strip()

    def close(self) -> None:
        """Close the connection pool; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.clear()


def _rejected(text: str) -> dict[int, str]:
    """The batches a local server's JSON error body names as refused for good."""
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return metadata.parse_rejected(body.get("rejected_batches")) if isinstance(body, dict) else {}
