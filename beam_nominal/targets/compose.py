"""Targets built from targets: a fallback for undelivered requests, and a tee to several places.

Fallback contract (for the uploader)
------------------------------------
:func:`with_fallback` returns a :class:`FallbackTarget`. Its ``send`` goes to the primary only, so
the uploader retries it exactly as it retries any target. When a request is *finally* undelivered
(the primary raised a permanent :class:`~beam_nominal.errors.TargetError`, or retries ran out), the
uploader calls :meth:`FallbackTarget.send_fallback` with it instead of counting it lost::

    try:
        target.send(request, timeout)            # retried per policy
    except TargetError as last:
        if isinstance(target, FallbackTarget):
            target.send_fallback(request, timeout, reason=last)   # raises if the fallback fails too
            # -> report: request delivered to the fallback, not the primary
        else:
            ...                                   # undelivered

``send_fallback`` is called once per request (no retries are needed for a local file; a retryable
error from it may be retried like any send). :attr:`FallbackTarget.fallback_points`,
``fallback_requests`` and ``fallback_location`` feed the stream's report; points that reached the
fallback are not points delivered to the primary, and the report must say which is which.

Tee contract
------------
:class:`TeeTarget` acknowledges a request only when every target has. A failed send is retried only
on the targets that have not yet acknowledged that request (kept per request object, weakly), so a
retry does not duplicate points in a target without idempotency keys, such as an Avro file. The
error aggregates every failure and is retryable only if all of them are.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

from beam_nominal.errors import TargetError
from beam_nominal.targets.base import FIRST_CONTACT_TIMEOUT, Request, Target, first_contact

__all__ = ["FallbackTarget", "TeeError", "TeeTarget", "with_fallback"]


def _close_all(targets: list[Target]) -> None:
    """Close every target even if some fail; re-raise the first failure."""
    first: BaseException | None = None
    for t in targets:
        try:
            t.close()
        except Exception as exc:
            if first is None:
                first = exc
    if first is not None:
        raise first


class FallbackTarget:
    """A primary target plus a fallback for requests the primary finally refused.

    See the module docstring for the contract with the uploader. Thread-safe.

    Args:
        primary: where requests go.
        fallback: where finally undelivered requests go (typically an
            :class:`~beam_nominal.targets.avro.AvroFileTarget`).
    """

    def __init__(self, primary: Target, fallback: Target) -> None:
        self.primary = primary
        self.fallback = fallback
        self._lock = threading.Lock()
        self._points = 0
        self._requests = 0
        self._closed = False

    def send(self, request: Request, timeout: float | None = None) -> bool | None:
        """Send to the primary only; its answer and errors propagate unchanged for the uploader."""
        return self.primary.send(request, timeout)

    def probe(self, dataset_rid: str, timeout: float = FIRST_CONTACT_TIMEOUT) -> None:
        """First contact with both targets: a fallback takes what the primary *finally* refused, so
        a primary that cannot be reached at all (a wrong URL or token) fails here rather than
        sending the whole stream to the fallback."""
        first_contact(self.primary, dataset_rid, timeout)
        first_contact(self.fallback, dataset_rid, timeout)

    def send_fallback(
        self, request: Request, timeout: float | None = None, *, reason: BaseException | None = None
    ) -> None:
        """Deliver a request the primary finally refused to the fallback.

        Args:
            request: the undelivered request.
            timeout: seconds the fallback may take.
            reason: the primary's last error, kept in the raised error's message if the fallback
                fails too.

        Raises:
            TargetError: the fallback refused it as well (``retryable`` as the fallback says).
        """
        try:
            self.fallback.send(request, timeout)
        except TargetError as exc:
            why = f" after the primary failed with: {reason}" if reason is not None else ""
            raise TargetError(
                f"fallback {self.fallback_location} refused {request.points} points{why}; its error: {exc}",
                retryable=exc.retryable,
                code=exc.code,
            ) from exc
        with self._lock:
            self._points += request.points
            self._requests += 1

    @property
    def fallback_points(self) -> int:
        """Points the fallback acknowledged."""
        with self._lock:
            return self._points

    @property
    def fallback_requests(self) -> int:
        """Requests the fallback acknowledged."""
        with self._lock:
            return self._requests

    @property
    def fallback_location(self) -> str:
        """Where fallen-back data is: the fallback's path if it has one, else its repr."""
        path = getattr(self.fallback, "path", None)
        return os.fspath(path) if path is not None else repr(self.fallback)

    def close(self) -> None:
        """Close the primary, then the fallback. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _close_all([self.primary, self.fallback])

    def __repr__(self) -> str:
        return f"FallbackTarget({self.primary!r}, fallback={self.fallback!r})"


def with_fallback(
    primary: Target, fallback: Target | str | os.PathLike[str], *, dataset_rid: str | None = None
) -> FallbackTarget:
    """Wrap ``primary`` so that finally undelivered requests go to ``fallback``.

    Args:
        primary: the target to send to.
        fallback: a target, or a path / ``file://`` URL of an Avro file (appended to if it exists).
        dataset_rid: recorded in a fallback Avro file's metadata; requests for other datasets are
            then refused by it.
    """
    if isinstance(fallback, (str, os.PathLike)):
        from beam_nominal.targets.avro import AvroFileTarget

        fallback = AvroFileTarget(fallback, dataset_rid=dataset_rid)
    return FallbackTarget(primary, fallback)


class TeeError(TargetError):
    """Some of a tee's targets refused a request.

    Attributes:
        failures: ``(index, error)`` for each target that failed, in target order.
    """

    def __init__(self, failures: list[tuple[int, TargetError]], total: int) -> None:
        retryable = all(e.retryable for _, e in failures)
        codes = {e.code for _, e in failures}
        detail = "; ".join(f"target[{i}]: {e}" for i, e in failures)
        super().__init__(
            f"{len(failures)} of {total} targets refused the request: {detail}",
            retryable=retryable,
            code=codes.pop() if len(codes) == 1 else "multiple",
        )
        self.failures = failures


class TeeTarget:
    """Sends every request to all of its targets, in order; acknowledges when all have.

    Args:
        *targets: at least one target.

    Raises:
        ValueError: no targets.
    """

    def __init__(self, *targets: Target) -> None:
        if not targets:
            raise ValueError("TeeTarget needs at least one target")
        self.targets: tuple[Target, ...] = targets
        self._lock = threading.Lock()
        # Which targets already acknowledged a request that failed elsewhere; dropped with the
        # request object, so abandoned requests cost nothing.
        self._acked: weakref.WeakKeyDictionary[Request, frozenset[int]] = weakref.WeakKeyDictionary()
        self._closed = False

    def probe(self, dataset_rid: str, timeout: float = FIRST_CONTACT_TIMEOUT) -> None:
        """First contact with every target, in order: a request is acknowledged only when all
        have taken it, so each must be reachable."""
        for target in self.targets:
            first_contact(target, dataset_rid, timeout)

    def send(self, request: Request, timeout: float | None = None) -> None:
        """Send to every target that has not acknowledged this request yet.

        Raises:
            TeeError: one or more targets failed; retryable only if every failure is.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            done = self._acked.get(request, frozenset())
        failures: list[tuple[int, TargetError]] = []
        acked = set(done)
        for i, target in enumerate(self.targets):
            if i in done:
                continue
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                target.send(request, remaining)
            except TargetError as exc:
                failures.append((i, exc))
            else:
                acked.add(i)
        if not failures:
            with self._lock:
                self._acked.pop(request, None)
            return
        error = TeeError(failures, len(self.targets))
        with self._lock:
            if error.retryable:
                self._acked[request] = frozenset(acked)
            else:
                # A permanent failure is not retried: nothing to remember.
                self._acked.pop(request, None)
        raise error

    def close(self) -> None:
        """Close every target, even if some fail. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _close_all(list(self.targets))

    def __repr__(self) -> str:
        return f"TeeTarget({', '.join(map(repr, self.targets))})"

