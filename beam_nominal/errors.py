"""Errors raised by beam_nominal.

::

    BeamNominalError
    ├── TargetError            one send failed; ``retryable`` says whether trying again may help
    ├── DeliveryError          flush/close: some points were not acknowledged (counts per series)
    ├── BackpressureError      enqueue would exceed the buffer budget and blocking is off
    ├── StreamClosedError(RuntimeError)   a write to a closed stream
    └── InputError             a user's value or element that cannot be written as it is
        ├── InvalidValueError(ValueError)   a value out of range or malformed
        │   └── ElementError                an element that cannot be read; ``field`` names the part
        └── InvalidTypeError(TypeError)     a value of a type that has no Nominal type
            └── SeriesTypeError             a value conflicts with its series' pinned type

The classes under ``InputError`` are also a ``ValueError`` or a ``TypeError``, as the checks
that raise them always were, so ``except ValueError``/``except TypeError`` still catch them.
``WriteToNominal`` turns an ``InputError`` (and only that) raised while reading and staging an
element into a ``FailedElement``; any other exception there is a fault of the package and fails
the bundle, which the runner retries.
"""

from __future__ import annotations

from typing import Any


class BeamNominalError(Exception):
    """Base of every error this package raises on purpose."""


class TargetError(BeamNominalError):
    """A target could not accept one request.

    Attributes:
        retryable: True when the same request may succeed later (UNAVAILABLE, RESOURCE_EXHAUSTED,
            DEADLINE_EXCEEDED, ABORTED, a full disk that may drain ...).
        code: a short machine-readable reason, e.g. the gRPC status name or ``HTTP 503``.
        retry_after: seconds the server asked us to wait before trying again (HTTP
            ``Retry-After``), or None; the uploader waits at least this long.
        rejected: batches of the request the server refused for good, by index into
            ``Request.batches``, with the server's reason (empty when it named none). Nothing
            of the request was stored, so the others may be sent again.
        too_large: the request was refused for its size alone (HTTP 413, e.g. a proxy's body
            limit): nothing was stored, and its halves may be taken.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        code: str = "",
        retry_after: float | None = None,
        rejected: dict[int, str] | None = None,
        too_large: bool = False,
    ) -> None:
        super().__init__(message)
        self.too_large = too_large
        self.retryable = retryable
        self.code = code
        self.retry_after = retry_after
        self.rejected = dict(rejected or {})


class DeliveryError(BeamNominalError):
    """``flush``/``close`` ended with points that were not acknowledged.

    Attributes:
        report: the stream's :class:`~beam_nominal.stream.DeliveryReport` at that moment.
        undelivered: points not delivered per series (``SeriesKey`` -> count).
        reasons: why, per series (the last failure seen for it).
        rejected: the part of ``undelivered`` the target refused for good, per series (a value
            type that conflicts with what it stores): sending them again cannot succeed.
    """

    def __init__(
        self,
        message: str,
        *,
        report: Any = None,
        undelivered: dict[Any, int] | None = None,
        reasons: dict[Any, str] | None = None,
        rejected: dict[Any, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.report = report
        self.undelivered = dict(undelivered or {})
        self.reasons = dict(reasons or {})
        self.rejected = dict(rejected or {})

    @property
    def points(self) -> int:
        """Total points not delivered."""
        return sum(self.undelivered.values())


class BackpressureError(BeamNominalError):
    """Raised by enqueue when the buffer is full and the stream is set not to block."""


class InputError(BeamNominalError):
    """A user's value or element that cannot be written as it is: raised on purpose by a check,
    never by a fault of the package."""


class InvalidValueError(InputError, ValueError):
    """A value out of range or malformed: a timestamp beyond int64 ns, an empty channel, text
    that is not valid Unicode, a float with no exact form in its series' type ..."""


class ElementError(InvalidValueError):
    """An element that cannot be read as telemetry; ``field`` names the offending part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class InvalidTypeError(InputError, TypeError):
    """A value of a type that has no Nominal type (a Decimal, a set, an int beyond uint64 ...)."""


class SeriesTypeError(InvalidTypeError):
    """A value whose type differs from the type its series is pinned to."""


class StreamClosedError(BeamNominalError, RuntimeError):
    """A write to a stream that is closing or closed."""
