"""The local server's HTTP listener: Nominal's HTTP write API, over aiohttp.

Routes, each under ``/api`` (so ``http://HOST:PORT/api`` is the base URL Nominal's clients take)
and without it:

- ``POST /storage/writer/v1/nominal/{dataset_rid}``: body ``io.nominal.scout.api.proto.WriteRequestNominal``
  (the row form every released Nominal client posts; the dataset is named by the path);
- ``POST /storage/writer/v1/nominal-columnar``: body ``nominal.direct_channel_writer.v2.WriteBatchesRequest``
  (the dataset is named by the body);
- ``GET /beam-nominal/v1/capabilities``: what the server accepts, for clients to negotiate before
  writing; answered without a token (it says whether one is needed). For example::

      {"server": "beam_nominal.local", "version": "0.1.0",
       "write_formats": ["row", "columnar"],
       "content_encodings": ["identity", "zstd", "gzip", "x-snappy-framed"],
       "idempotency_header": "Idempotency-Key",
       "max_body_bytes": 67108864, "max_decompressed_bytes": 268435456,
       "token_required": true, "durable_acknowledgements": true}

A write takes ``Content-Type: application/x-protobuf`` (``application/octet-stream`` or none also
do), a ``Content-Encoding`` from the list above (``x-snappy-framed`` is the snappy framing format),
``Authorization: Bearer <token>`` when the server has a token, and optionally ``Idempotency-Key``
(or ``x-idempotency-key``): the same ledger as the gRPC API, so a retry is stored once. A key
already stored for other points is refused (422 ``idempotency_key_reused``; gRPC ALREADY_EXISTS).

Answers: 200 with an empty body once the request is durably stored (or its key already was).
Anything else has a JSON body ``{"error": NAME, "detail": TEXT}``: 400 ``invalid_request`` /
``malformed_request`` (bad dataset rid, bad protobuf, bad batches, corrupt compression, a body the
client cut short), 401 ``unauthorized``, 404 ``not_found``, 405 ``method_not_allowed``, 413
``too_large`` (the body, what it decompresses to, or its count of compressed frames past
:data:`MAX_FRAMES`; a compression bomb is refused before it is expanded past the limit),
415 ``unsupported_media_type`` / ``unsupported_content_encoding``, 422 ``idempotency_key_reused``
(a key stored for a request with other points: nothing stored, not retryable), 503 ``unavailable`` /
``storage_error`` with ``Retry-After`` (nothing stored; retry), 500 ``internal``. The decisions for
decoding and commit errors are :func:`~beam_nominal.server.service.classify_write_error`'s, shared
with the gRPC handlers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent import futures
from http import HTTPStatus
from typing import Protocol

import cramjam
import zstandard
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

import beam_nominal
from beam_nominal._wire import metadata as _md
from beam_nominal._wire.batch import DecodedRequest
from beam_nominal._wire.write_batches_v2 import decode_write_batches_v2
from beam_nominal._wire.write_nominal import decode_write_nominal
from beam_nominal.server.service import SERVER_NAME, BearerToken, classify_write_error
from beam_nominal.server.store import InvalidRequestError, _Committer, check_dataset_rid

__all__ = [
    "CONTENT_ENCODINGS",
    "MAX_BODY_BYTES",
    "MAX_FRAMES",
    "BodyTooLargeError",
    "HttpListener",
    "decompress_body",
]

_log = logging.getLogger(__name__)

#: Largest request body taken as sent (compressed); what it expands to is held to
#: ``beam_nominal._wire.metadata.MAX_MESSAGE_BYTES``.
MAX_BODY_BYTES = 64 * 1024 * 1024
CONTENT_ENCODINGS = ("identity", "zstd", "gzip", "x-snappy-framed")
_CONTENT_TYPES = frozenset({"", _md.PROTOBUF_CONTENT_TYPE, "application/octet-stream"})
#: Seconds a client is asked to wait before retrying a 503.
_RETRY_AFTER = "1"

Decoder = Callable[[bytes], DecodedRequest]


# ---------------------------------------------------------------------------------------------
# Content encodings, bounded
# ---------------------------------------------------------------------------------------------


class BodyTooLargeError(ValueError):
    """A body past a decompression limit (what it expands to, or how many frames it has); found
    before it is expanded much further."""


#: Most zstd frames, gzip members or snappy chunks besides those the data needs that a body may
#: have. A client sends one frame (or a snappy chunk per 64 KiB); thousands of empty ones are only
#: work for the server, so they are refused rather than read.
MAX_FRAMES = 4096

# A slice of a body is fed to a decompressor at a time, (budget left / the format's largest
# expansion ratio) bytes of it, so that its output stays within the budget plus one block, and
# so that what it hands back unread past the end of a frame is one slice, not the rest of the
# body. zstd: a block holds at most 128 KiB, and the smallest block that can (an RLE block: a
# 3-byte header and the byte) is 4 bytes, so 32,768-fold. Deflate: a 258-byte match takes 2 bits
# at best, so 1,032-fold.
_ZSTD_MAX_RATIO = 32_768
_DEFLATE_MAX_RATIO = 1_032
_MIN_SLICE = 64
_MAX_SLICE = 64 * 1024


class _FrameDecoder(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    def decompress(self, data: memoryview, /) -> bytes: ...


def _decompress_frames(
    body: bytes, limit: int, new_decoder: Callable[[], _FrameDecoder], max_ratio: int, what: str, frame: str
) -> list[bytes]:
    """Concatenated ``what`` frames (what it calls a ``frame``) decoded to their concatenation, within ``limit``."""
    out: list[bytes] = []
    size, pos, view = 0, 0, memoryview(body)
    for _ in range(MAX_FRAMES):
        d = new_decoder()
        while not d.eof:
            if pos >= len(view):
                raise ValueError(f"{what} data ends inside a {frame}")
            step = min(_MAX_SLICE, max(_MIN_SLICE, (limit - size) // max_ratio))
            chunk = d.decompress(view[pos : pos + step])
            pos += step
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError(f"body decompresses to over {limit} bytes")
            out.append(chunk)
        pos = min(pos, len(view)) - len(d.unused_data)
        if pos >= len(view):
            return out
    raise BodyTooLargeError(f"body has over {MAX_FRAMES} {what} {frame}s")


def _unzstd(body: bytes, limit: int) -> list[bytes]:
    # One context for every frame: a new one per frame costs more than an empty frame's 9 bytes.
    return _decompress_frames(body, limit, zstandard.ZstdDecompressor().decompressobj, _ZSTD_MAX_RATIO, "zstd", "frame")


def _gunzip(body: bytes, limit: int) -> list[bytes]:
    new = functools.partial(zlib.decompressobj, wbits=16 + zlib.MAX_WBITS)
    return _decompress_frames(body, limit, new, _DEFLATE_MAX_RATIO, "gzip", "member")


def _varint(buf: bytes, pos: int, end: int) -> int:
    value = shift = 0
    while pos < end and shift < 64:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        pos, shift = pos + 1, shift + 7
    raise ValueError("snappy chunk's uncompressed length is cut short")


def snappy_framed_size(body: bytes, max_chunks: int | None = None) -> int:
    """What a snappy-framed stream decompresses to, from its chunks' headers (nothing expanded).

    Raises:
        BodyTooLargeError: more than ``max_chunks`` chunks.
        ValueError: not a well-formed chunk sequence, or a reserved unskippable chunk type.
    """
    total, pos, n, chunks = 0, 0, len(body), 0
    while pos < n:
        chunks += 1
        if max_chunks is not None and chunks > max_chunks:
            raise BodyTooLargeError(f"body has over {max_chunks} snappy chunks")
        if pos + 4 > n:
            raise ValueError("snappy chunk header is cut short")
        kind, length = body[pos], int.from_bytes(body[pos + 1 : pos + 4], "little")
        start, end = pos + 4, pos + 4 + length
        if end > n:
            raise ValueError("snappy chunk is cut short")
        if kind in (0x00, 0x01) and length < 4:
            raise ValueError("snappy data chunk has no checksum")
        if kind == 0x00:  # compressed: a CRC, then raw snappy, which starts with its uncompressed length
            total += _varint(body, start + 4, end)
        elif kind == 0x01:  # uncompressed: a CRC, then the data
            total += length - 4
        elif 0x02 <= kind <= 0x7F:
            raise ValueError(f"snappy chunk type {kind:#x} is reserved and unskippable")
        # 0xff (stream identifier), 0xfe (padding), 0x80-0xfd (reserved skippable): no data.
        pos = end
    return total


# A snappy data chunk holds at most 64 KiB, so a body within the limit needs up to limit / 64 KiB
# of them; MAX_FRAMES more are allowed.
_SNAPPY_MAX_CHUNK_DATA = 65_536


def _unsnappy_framed(body: bytes, limit: int) -> list[bytes]:
    size = snappy_framed_size(body, MAX_FRAMES + limit // _SNAPPY_MAX_CHUNK_DATA)
    if size > limit:
        raise BodyTooLargeError(f"body decompresses to {size} bytes, over {limit}")
    try:
        out = bytes(cramjam.snappy.decompress(body, output_len=size))
    except cramjam.DecompressionError as exc:
        raise ValueError(f"not valid snappy-framed data: {exc}") from None
    if len(out) != size:
        raise ValueError(f"snappy chunks declare {size} bytes but hold {len(out)}")
    return [out]


_DECOMPRESSORS: dict[str, Callable[[bytes, int], list[bytes]]] = {
    "zstd": _unzstd,
    "gzip": _gunzip,
    "x-gzip": _gunzip,
    "x-snappy-framed": _unsnappy_framed,
}


def decompress_body(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded from ``encoding`` (a name of :data:`CONTENT_ENCODINGS`), at most ``limit`` bytes.

    Raises:
        BodyTooLargeError: it would decompress to more than ``limit`` bytes.
        ValueError: corrupt or truncated data; an unknown encoding.
    """
    if encoding == "identity":
        if len(body) > limit:
            raise BodyTooLargeError(f"body is {len(body)} bytes, over {limit}")
        return body
    try:
        decompress = _DECOMPRESSORS[encoding]
    except KeyError:
        raise ValueError(f"unknown content encoding {encoding!r}") from None
    try:
        parts = decompress(body, limit)
    except (zlib.error, zstandard.ZstdError) as exc:
        raise ValueError(f"not valid {encoding} data: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ---------------------------------------------------------------------------------------------
# The listener
# ---------------------------------------------------------------------------------------------


class _Refused(Exception):
    """An answer other than 200, raised anywhere below the error middleware."""

    def __init__(
        self,
        status: int,
        error: str,
        detail: str,
        headers: dict[str, str] | None = None,
        rejected: dict[int, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}
        self.rejected = rejected or {}

    def response(self) -> web.Response:
        body: dict[str, object] = {"error": self.error, "detail": self.detail}
        if self.rejected:
            body["rejected_batches"] = _md.rejected_json(self.rejected)
        return web.json_response(body, status=self.status, headers=self.headers)


def _status_name(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_")
    except ValueError:
        return "error"


_ERROR_NAMES = {413: "too_large", 503: "unavailable"}


class HttpListener:
    """Nominal's HTTP write API over a :class:`_Committer`, on its own event loop in a daemon thread.

    Args:
        committer: where writes go (shared with the gRPC server, so one idempotency ledger).
        host: interface to bind.
        port: port to bind; 0 picks a free one (see :attr:`port`).
        token: if set, writes need ``Authorization: Bearer <token>``.
        ssl_context: serve HTTPS with it.
        middlewares: aiohttp middlewares run after the token check, before the handler (the
            fault-injection seam, as ``interceptors`` is for gRPC).
        max_workers: threads that decompress, decode and commit (blocking work, off the loop).
        max_body_bytes: largest body as sent.
        max_decompressed_bytes: largest body once decompressed.
    """

    def __init__(
        self,
        committer: _Committer,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        middlewares: Sequence[Middleware] = (),
        max_workers: int = 8,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_decompressed_bytes: int = _md.MAX_MESSAGE_BYTES,
    ) -> None:
        self._committer = committer
        self.host = host
        self._requested_port = port
        self._token = BearerToken(token) if token is not None else None
        self._ssl = ssl_context
        self._middlewares = list(middlewares)
        self._max_workers = max_workers
        self._max_body = max_body_bytes
        self._max_decompressed = max_decompressed_bytes
        self._capabilities_body = {
            "server": SERVER_NAME,
            "version": beam_nominal.__version__,
            "write_formats": ["row", "columnar"],
            "content_encodings": list(CONTENT_ENCODINGS),
            "idempotency_header": _md.HTTP_IDEMPOTENCY_KEY,
            "max_body_bytes": max_body_bytes,
            "max_decompressed_bytes": max_decompressed_bytes,
            "token_required": token is not None,
            "durable_acknowledgements": True,
        }
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._pool: futures.ThreadPoolExecutor | None = None
        # Requests being handled (touched on the loop only), for a graceful stop.
        self._active = 0
        self._idle: asyncio.Event | None = None

    @property
    def port(self) -> int:
        """The bound port (known once started)."""
        if self._port is None:
            raise RuntimeError("HttpListener is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://HOST:PORT/api`` (``https://`` with TLS): the base URL Nominal's clients take."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._ssl else 'http'}://{host}:{self.port}{_md.HTTP_API_PREFIX}"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> HttpListener:
        """Bind and serve; returns once the port is bound.

        Raises:
            RuntimeError: already started, or the address could not be bound.
        """
        if self._thread is not None:
            raise RuntimeError("HttpListener already started")
        loop = asyncio.new_event_loop()
        self._pool = futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix="beam-nominal-http")
        ready = threading.Event()
        failure: list[BaseException] = []
        thread = threading.Thread(
            target=self._run, args=(loop, ready, failure), name="beam-nominal-http-loop", daemon=True
        )
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            self._pool.shutdown(wait=False)
            self._pool = None
            raise RuntimeError(f"cannot bind {self.host}:{self._requested_port}: {failure[0]}") from None
        self._loop, self._thread = loop, thread
        return self

    def _run(self, loop: asyncio.AbstractEventLoop, ready: threading.Event, failure: list[BaseException]) -> None:
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._bind())
            except BaseException as exc:
                failure.append(exc)
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
                return
            finally:
                ready.set()
            loop.run_forever()
        finally:
            loop.close()

    async def _bind(self) -> None:
        self._idle = asyncio.Event()
        self._idle.set()
        app = web.Application(
            middlewares=[self._track, self._errors, self._auth, *self._middlewares],
            client_max_size=self._max_body,
        )
        for prefix in ("", _md.HTTP_API_PREFIX):
            app.router.add_post(prefix + _md.HTTP_WRITE_NOMINAL_PATH, self._write_row)
            app.router.add_post(prefix + _md.HTTP_WRITE_COLUMNAR_PATH, self._write_columnar)
            app.router.add_get(prefix + _md.HTTP_CAPABILITIES_PATH, self._capabilities)
        # auto_decompress off: aiohttp would expand a body without bound (and knows no snappy);
        # the handler decompresses it against the limit instead.
        runner = web.AppRunner(app, auto_decompress=False, access_log=None, shutdown_timeout=0.1)
        self._runner = runner
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port, ssl_context=self._ssl)
        await site.start()
        self._port = int(runner.addresses[0][1])

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting connections, let requests in progress finish for up to ``grace`` seconds
        (None: not at all, as gRPC's ``stop(None)`` aborts at once).

        Commits already handed to a worker thread may still finish after this returns: the
        committer's gate (closed by its owner after this) bounds them.
        """
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(grace), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        if self._pool is not None:
            # Jobs not yet started would be refused by the closed committer anyway; drop them.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _shutdown(self, grace: float | None) -> None:
        runner = self._runner
        assert runner is not None and self._idle is not None
        for site in list(runner.sites):
            await site.stop()
        try:
            await asyncio.wait_for(self._idle.wait(), 0 if grace is None else grace)
        except asyncio.TimeoutError:
            _log.warning("HttpListener.stop: %d request(s) still running after %s s", self._active, grace)
        await runner.cleanup()

    # -- middlewares -------------------------------------------------------------------------

    @web.middleware
    async def _track(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        assert self._idle is not None
        self._active += 1
        self._idle.clear()
        try:
            return await handler(request)
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except _Refused as refused:
            return refused.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            # aiohttp's own 404 / 405 / 413, or one a middleware raised: the same JSON shape.
            headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
            name = _ERROR_NAMES.get(exc.status) or _status_name(exc.status)
            if isinstance(exc, web.HTTPNotFound | web.HTTPMethodNotAllowed):
                detail = f"{exc.reason}: {request.method} {request.path[:200]}"
            else:
                detail = exc.text or exc.reason
            return _Refused(exc.status, name, detail, headers).response()
        except Exception:
            _log.exception("HTTP %s %s failed", request.method, request.path)
            return _Refused(500, "internal", "internal server error").response()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._token is not None and request.match_info.handler != self._capabilities:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not self._token.accepts(given):
                raise _Refused(
                    401,
                    "unauthorized",
                    "missing or wrong 'Authorization: Bearer <token>' header",
                    {"WWW-Authenticate": "Bearer"},
                )
        return await handler(request)

    # -- handlers ----------------------------------------------------------------------------

    async def _capabilities(self, request: web.Request) -> web.Response:
        return web.json_response(self._capabilities_body)

    async def _write_row(self, request: web.Request) -> web.Response:
        rid = request.match_info["dataset_rid"]
        decode = functools.partial(decode_write_nominal, dataset_rid=rid)
        return await self._write(request, decode, "WriteRequestNominal", rid)

    async def _write_columnar(self, request: web.Request) -> web.Response:
        return await self._write(request, decode_write_batches_v2, "WriteBatchesRequest", None)

    async def _write(self, request: web.Request, decode: Decoder, what: str, rid: str | None) -> web.Response:
        media_type = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media_type not in _CONTENT_TYPES:
            raise _Refused(
                415, "unsupported_media_type", f"Content-Type {media_type!r} is not {_md.PROTOBUF_CONTENT_TYPE}"
            )
        encoding = request.headers.get("Content-Encoding", "").strip().lower() or "identity"
        if encoding != "identity" and encoding not in _DECOMPRESSORS:
            raise _Refused(
                415,
                "unsupported_content_encoding",
                f"Content-Encoding {encoding[:100]!r} is not one of {', '.join(CONTENT_ENCODINGS)}",
            )
        if rid is not None:
            self._check_rid(rid, what)
        if request.content_length is not None and request.content_length > self._max_body:
            raise _Refused(413, "too_large", f"body is {request.content_length} bytes, over {self._max_body}")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _Refused(413, "too_large", f"body is over {self._max_body} bytes") from None
        except OSError as exc:
            # The connection went before the body was all sent: the client's doing (it will not
            # read the answer), not a server fault.
            _log.debug("HTTP %s %s: connection lost reading the body: %s", request.method, request.path[:200], exc)
            raise _Refused(400, "malformed_request", f"the body was cut short: {exc}") from None
        key = request.headers.get(_md.HTTP_IDEMPOTENCY_KEY) or request.headers.get(_md.IDEMPOTENCY_KEY) or None
        stored = await asyncio.get_running_loop().run_in_executor(
            self._pool, self._store, body, encoding, decode, what, key
        )
        return web.Response() if stored else web.Response(headers={_md.ALREADY_STORED: "1"})

    @staticmethod
    def _check_rid(rid: str, what: str) -> None:
        try:
            check_dataset_rid(rid)
        except InvalidRequestError as exc:  # the one error it raises: anything else is a fault of ours
            raise _refused(exc, what) from None

    def _store(self, body: bytes, encoding: str, decode: Decoder, what: str, key: str | None) -> bool:
        """Decompress, decode and commit (in a worker thread); False when the idempotency key was
        already stored for these points (nothing stored again). Raises :class:`_Refused`."""
        try:
            data = decompress_body(body, encoding, self._max_decompressed)
        except BodyTooLargeError as exc:
            raise _Refused(413, "too_large", str(exc)) from None
        except ValueError as exc:
            raise _Refused(400, "malformed_request", str(exc)) from None
        try:
            decoded = decode(data)
        except Exception as exc:
            raise _refused(exc, what) from None
        try:
            return self._committer.commit(decoded.dataset_rid, decoded.batches, key, decoded.source_name)
        except Exception as exc:
            raise _refused(exc, None, decoded.dataset_rid) from None


def _refused(exc: Exception, what: str | None, rid: str | None = None) -> _Refused:
    """The answer to a decoding (``what``: the message) or commit error; re-raises a server fault."""
    refusal = classify_write_error(exc, what, rid)
    if refusal is None:
        raise exc
    headers = {"Retry-After": _RETRY_AFTER} if refusal.retryable else None
    return _Refused(refusal.http_status, refusal.error, refusal.detail, headers, refusal.rejected)
