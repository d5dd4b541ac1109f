"""Typed, validated settings for :class:`~beam_nominal.stream.NominalStream`.

Every class is a frozen dataclass checked in ``__post_init__``; a bad value raises ``ValueError``
(or ``TypeError``) naming the field and showing the value. The defaults' figures are in
``docs/benchmarks.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["BatchSettings", "RetrySettings", "StreamSettings", "UploadSettings", "resolve"]

_MIB = 1024 * 1024


def _positive_int(owner: str, name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value!r}")


def _seconds(owner: str, name: str, value: object, *, allow_none: bool, allow_zero: bool = False) -> None:
    if value is None:
        if allow_none:
            return
        raise ValueError(f"{owner}.{name} must be a number of seconds, got None")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}.{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{owner}.{name} must be a finite number of seconds > 0, got {value!r}")


@dataclass(frozen=True)
class BatchSettings:
    """How buffered points are cut into requests.

    Attributes:
        max_request_bytes: estimated encoded size at which a request is cut: large enough to
            amortise a call's fixed cost, small enough to overlap encoding and sending, and within
            gRPC's default 4 MiB message limit.
        max_request_points: most points in one request, whatever their size.
        linger: seconds a partial buffer may wait before a background cut, for interactive use.
            ``None`` disables the timer so that request boundaries depend only on the data (the
            Beam path runs this way).
    """

    max_request_bytes: int = 4 * _MIB
    max_request_points: int = 1_000_000
    linger: float | None = 0.25

    def __post_init__(self) -> None:
        _positive_int("BatchSettings", "max_request_bytes", self.max_request_bytes, 1024)
        _positive_int("BatchSettings", "max_request_points", self.max_request_points)
        _seconds("BatchSettings", "linger", self.linger, allow_none=True)


@dataclass(frozen=True)
class UploadSettings:
    """Flow control between enqueue and the target.

    Attributes:
        max_in_flight: requests being encoded or sent at once (2-4 lets encoding overlap sending).
        max_buffered_bytes: estimated bytes buffered plus queued plus in flight; beyond it enqueue
            blocks (or raises :class:`~beam_nominal.errors.BackpressureError`). Must be at least
            twice ``BatchSettings.max_request_bytes``.
        block_on_full: block (True) or raise (False) when the buffer budget is used up.
        attempt_timeout: deadline in seconds for one send attempt.
        close_timeout: default bound in seconds on draining at ``close()`` / leaving a ``with``.
    """

    max_in_flight: int = 3
    max_buffered_bytes: int = 64 * _MIB
    block_on_full: bool = True
    attempt_timeout: float = 30.0
    close_timeout: float | None = 300.0

    def __post_init__(self) -> None:
        _positive_int("UploadSettings", "max_in_flight", self.max_in_flight)
        if self.max_in_flight > 64:
            raise ValueError(f"UploadSettings.max_in_flight must be <= 64, got {self.max_in_flight!r}")
        _positive_int("UploadSettings", "max_buffered_bytes", self.max_buffered_bytes, 2048)
        if not isinstance(self.block_on_full, bool):
            raise TypeError(f"UploadSettings.block_on_full must be a bool, got {self.block_on_full!r}")
        _seconds("UploadSettings", "attempt_timeout", self.attempt_timeout, allow_none=False)
        _seconds("UploadSettings", "close_timeout", self.close_timeout, allow_none=True, allow_zero=True)


@dataclass(frozen=True)
class RetrySettings:
    """Retries of retryable target errors: exponential backoff with full jitter.

    The n-th retry waits ``min(max_backoff, initial_backoff * multiplier**(n-1))`` scaled by a
    random factor in ``[1 - jitter, 1]``. A request is given up once ``total_timeout`` seconds
    have passed since its first attempt, or after ``max_attempts`` attempts if that is set.

    Bounded by time, not attempts, by default: 120 s rides out a two-minute outage (a Kafka
    producer's default delivery timeout too), where 8 attempts from 0.1 s gave up after 8-13 s.
    At least one of the two bounds must be set.
    """

    max_attempts: int | None = None
    initial_backoff: float = 0.1
    max_backoff: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.5
    total_timeout: float | None = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts is not None:
            _positive_int("RetrySettings", "max_attempts", self.max_attempts)
        _seconds("RetrySettings", "initial_backoff", self.initial_backoff, allow_none=False, allow_zero=True)
        _seconds("RetrySettings", "max_backoff", self.max_backoff, allow_none=False, allow_zero=True)
        if self.max_backoff < self.initial_backoff:
            raise ValueError(
                f"RetrySettings.max_backoff ({self.max_backoff!r}) is below initial_backoff ({self.initial_backoff!r})"
            )
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, (int, float)):
            raise TypeError(f"RetrySettings.multiplier must be a number, got {self.multiplier!r}")
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1):
            raise ValueError(f"RetrySettings.multiplier must be >= 1, got {self.multiplier!r}")
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, (int, float)):
            raise TypeError(f"RetrySettings.jitter must be a number, got {self.jitter!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"RetrySettings.jitter must be in [0, 1], got {self.jitter!r}")
        _seconds("RetrySettings", "total_timeout", self.total_timeout, allow_none=True)
        if self.max_attempts is None and self.total_timeout is None:
            raise ValueError(
                "RetrySettings(total_timeout=None) needs max_attempts=N (an attempt cap): with neither "
                "bound a request would be retried for ever"
            )

    def backoff(self, retry: int, rand: float) -> float:
        """Delay before retry number ``retry`` (1-based), given ``rand`` uniform in [0, 1)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        return base * (1.0 - self.jitter * rand)


class StreamSettings(NamedTuple):
    """The three settings objects of a stream, checked together by :func:`resolve`."""

    batch: BatchSettings
    upload: UploadSettings
    retry: RetrySettings
    #: The keyword names given (a target's preferred request size yields to ``max_request_bytes``).
    given: frozenset[str]


_OWNERS: dict[str, type[Any]] = {
    f.name: cls for cls in (BatchSettings, UploadSettings, RetrySettings) for f in dataclasses.fields(cls)
}


def resolve(
    batch: BatchSettings | None = None,
    upload: UploadSettings | None = None,
    retry: RetrySettings | None = None,
    *,
    owner: str = "NominalStream",
    **settings: Any,
) -> StreamSettings:
    """Settings objects from optional objects plus keyword fields of any of them, all checked.

    The one place for the stream's setting rules: ``NominalStream(...)`` calls it, and so does
    ``WriteToNominal(...)`` at construction, so a bad setting fails there rather than on every
    worker.

    Raises:
        TypeError: an unknown keyword (``owner`` names who got it) or a value of the wrong type.
        ValueError: a value out of range, or a buffer budget under two requests.
    """
    groups: dict[type[Any], dict[str, Any]] = {}
    for name, value in settings.items():
        cls = _OWNERS.get(name)
        if cls is None:
            raise TypeError(f"{owner} got an unknown setting {name}={value!r:.80}; known: {sorted(_OWNERS)}")
        groups.setdefault(cls, {})[name] = value
    b = _merge(batch, BatchSettings, groups)
    u = _merge(upload, UploadSettings, groups)
    r = _merge(retry, RetrySettings, groups)
    if u.max_buffered_bytes < 2 * b.max_request_bytes:
        raise ValueError(
            f"max_buffered_bytes ({u.max_buffered_bytes}) must be at least twice "
            f"max_request_bytes ({b.max_request_bytes})"
        )
    return StreamSettings(b, u, r, frozenset(settings))


def _merge(given: Any, cls: type[Any], groups: Mapping[type[Any], dict[str, Any]]) -> Any:
    overrides = groups.get(cls, {})
    if given is None:
        return cls(**overrides)
    if not isinstance(given, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(given).__name__}")
    return dataclasses.replace(given, **overrides) if overrides else given
