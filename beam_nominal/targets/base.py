"""The target contract: one method that either acknowledges a whole request or raises."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal._wire.metadata import idempotency_key

_TIMESTAMPS = operator.attrgetter("timestamps")


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
    points: int = field(init=False)

    def __post_init__(self) -> None:
        # len(timestamps) is len(batch), without a Python-level call per batch: requests cut from
        # wide records carry thousands of them.
        object.__setattr__(self, "points", sum(map(len, map(_TIMESTAMPS, self.batches))))

    @functools.cached_property
    def body(self) -> bytes:
        return encode_request(self.dataset_rid, self.batches, self.source_name)

    @functools.cached_property
    def key(self) -> str:
        """Idempotency key: a digest of the body, identical for every retry of this request."""
        return idempotency_key(self.body)


@runtime_checkable
class Target(Protocol):
    """Where requests go. Implementations must be safe to call from several threads at once.

    ``send`` returns only when the destination has durably accepted the whole request, and raises
    :class:`~beam_nominal.errors.TargetError` otherwise (``retryable`` set as appropriate). It
    must give up by ``timeout`` seconds when one is given.
    """

    def send(self, request: Request, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...
