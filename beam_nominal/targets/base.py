"""The target contract: one method that either acknowledges a whole request or raises."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from beam_nominal._wire.batch import DoubleBatches, SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal._wire.metadata import idempotency_key
from beam_nominal.errors import TargetError

_TIMESTAMPS = operator.attrgetter("timestamps")

#: Seconds a first contact (:func:`first_contact`) may take: a refused connection, an unknown host,
#: a certificate or a token that is wrong answer in milliseconds; this bounds a server that is slow.
FIRST_CONTACT_TIMEOUT = 10.0

#: What the system says when nothing accepts a connection at the address (errno text, the same in
#: gRPC's messages): at first contact a wrong URL or a server not running, not an outage. A
#: connection accepted and then reset is neither, and stays retryable.
UNREACHABLE = ("Connection refused", "No route to host", "Network is unreachable")

#: A token, or a callable returning the current token (called per request so it can refresh).
TokenSource = str | Callable[[], str] | None


@dataclass(frozen=True, eq=False)
class Request:
    """One request's worth of series, cut by the packer.

    Encoding is lazy and cached: the uploader's worker threads call :attr:`body` off the enqueue
    path, and targets that store columns (Avro) never pay for protobuf encoding.
    """

    dataset_rid: str
    batches: Sequence[SeriesBatch]
    source_name: str | None = None
    #: Sequence number within its stream, for logs and deterministic naming.
    seq: int = 0
    #: The packer's estimate of the buffered bytes this request took off its stream's budget,
    #: which the budget gets back when the request is settled. 0 for a request not cut from a
    #: buffer, such as a part of a request split after a refusal: the bytes are the split
    #: request's, released when it is settled.
    buffered_bytes: int = field(default=0, kw_only=True, repr=False)
    points: int = field(init=False)

    def __post_init__(self) -> None:
        batches = self.batches
        # len(timestamps) is len(batch), without a Python-level call per batch: requests cut
        # from wide records carry thousands of them.
        points = batches.points if isinstance(batches, DoubleBatches) else sum(map(len, map(_TIMESTAMPS, batches)))
        object.__setattr__(self, "points", points)

    @functools.cached_property
    def body(self) -> bytes:
        return encode_request(self.dataset_rid, self.batches, self.source_name)

    @functools.cached_property
    def key(self) -> str:
        """Idempotency key: a digest of the body, identical for every retry of this request."""
        return idempotency_key(self.body)

    @functools.cached_property
    def _forms(self) -> dict[str, tuple[bytes, str]]:
        return {}

    def encoded(
        self,
        form: str,
        encode: Callable[[Request], bytes | memoryview],
        compress: Callable[[bytes | memoryview], bytes] | None = None,
    ) -> tuple[bytes, str]:
        """This request in another wire form (e.g. an HTTP body) and that form's idempotency key.

        Encoded once per form: a retry of the request, on whichever worker, sends the same bytes
        with the same key. ``encode`` must be deterministic; what it returns is used before this
        returns and not kept (it may be a view of a reused buffer). The key is the digest of
        those bytes, before ``compress``: a retried bundle on a worker with another compressor
        version sends other bytes but the same key.
        """
        cached = self._forms.get(form)
        if cached is None:
            raw = encode(self)
            key = idempotency_key(raw)
            cached = self._forms[form] = (bytes(raw) if compress is None else compress(raw), key)
        return cached

    @property
    def encoded_bytes(self) -> int:
        """Bytes of the wire forms encoded so far (0 if a target never encoded it, as Avro's)."""
        body = self.__dict__.get("body")
        size = len(body) if isinstance(body, bytes) else 0
        return size + sum(len(b) for b, _ in self.__dict__.get("_forms", {}).values())


@runtime_checkable
class Target(Protocol):
    """Where requests go. Implementations must be safe to call from several threads at once.

    ``send`` returns only when the destination has durably accepted the whole request, and raises
    :class:`~beam_nominal.errors.TargetError` otherwise (``retryable`` set as appropriate). It
    must give up by ``timeout`` seconds when one is given. It may return True when the destination
    answered that it had already stored this very request (its idempotency key, for the same points)
    and stored nothing again; None or False otherwise.

    A target may also have ``probe(dataset_rid, timeout)``, the first contact
    (:func:`first_contact`).
    """

    def send(self, request: Request, timeout: float | None = None) -> bool | None: ...

    def close(self) -> None: ...


def first_contact(target: object, dataset_rid: str, timeout: float = FIRST_CONTACT_TIMEOUT) -> None:
    """Check, before any data is sent, that ``target`` can take ``dataset_rid``'s requests at all.

    Calls the target's ``probe(dataset_rid, timeout)`` if it has one (targets without, such as a
    local Avro file, have nothing to check beyond their construction). A probe sends one request
    without points (stored as nothing) and raises a permanent
    :class:`~beam_nominal.errors.TargetError` for what retrying cannot fix: a refused connection,
    an unknown host, a TLS failure, a refused token, an unknown dataset or endpoint. An answer that
    may be an outage (a timeout, 502/503, UNAVAILABLE without a refused connection) passes: the
    uploader's retry budget rides it out. After one real answer the target remembers it, so later
    streams on it (or DoFn instances sharing it) and outages after that send nothing more and fail
    nothing sooner. A Beam bundle makes no first contact: its DoFn instance made it in ``setup``.
    """
    probe = getattr(target, "probe", None)
    if callable(probe):
        probe(dataset_rid, timeout)


def first_contact_error(where: str, why: str, check: str, code: str) -> TargetError:
    """The permanent error a probe raises: the target (a URL without secrets), what happened, what
    to check."""
    message = f"{where}: first contact failed: {why}; {check}. Nothing was written."
    return TargetError(message, retryable=False, code=code)
