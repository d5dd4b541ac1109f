"""Send cut requests on worker threads: bounded concurrency, retries, an outcome for every request.

Workers call ``target.send``, which encodes the request lazily (``Request.body``), so encoding one
request overlaps sending another. A retryable :class:`~beam_nominal.errors.TargetError` is retried
with exponential backoff and jitter, each attempt under its own deadline, always with the same
request object and therefore the same idempotency key. Every request ends in exactly one reported
:class:`Outcome`; nothing is ever assumed delivered.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.errors import TargetError
from beam_nominal.settings import RetrySettings, UploadSettings
from beam_nominal.targets.base import Request, Target

__all__ = ["Outcome", "Uploader", "WorkerPool"]

_log = logging.getLogger("beam_nominal.uploader")


@dataclass(frozen=True)
class Outcome:
    """How one request ended.

    Attributes:
        acknowledged: the primary target accepted it.
        fallback: the primary failed but the fallback target accepted it.
        reason: why the primary failed ("" when acknowledged).
        retries: attempts beyond the first.
        nbytes: size of the request body (0 if it was never encoded).
        rejected: batches the target refused for good, by index into the request's batches,
            with its reason, that were delivered nowhere. ``acknowledged``/``fallback``/``reason``
            are about the others: the request went again without these.
        refused_to_fallback: batches the target refused for good (by index) that the fallback
            target took instead, as it takes any request the target finally refused.
        parts: the target refused the request as too large (``TargetError.too_large``), so what
            was left of it (its batches less ``rejected`` and ``refused_to_fallback``) went as
            these smaller requests, each with its own outcome; ``acknowledged``/``fallback``/
            ``reason`` are then about none of it.
        already_stored: acknowledged at the first attempt by a target that said it had already
            stored this request (an identical request of an earlier run): nothing new was stored.
            A retry answered so is not counted: its first attempt may have stored it.
    """

    acknowledged: bool
    fallback: bool
    reason: str
    retries: int
    nbytes: int
    rejected: Mapping[int, str] = field(default_factory=dict)
    refused_to_fallback: tuple[int, ...] = ()
    parts: tuple[tuple[Request, Outcome], ...] = ()
    already_stored: bool = False


class WorkerPool:
    """Daemon threads running jobs in FIFO order: up to ``size``, started as needed.

    An :class:`Uploader` makes its own; its sessions (one per Beam bundle) share it, so a
    bundle costs no thread start-up. Jobs never raise (the uploader catches everything).
    """

    def __init__(self, size: int, name: str = "beam-nominal-upload") -> None:
        self._size = size
        self._name = name
        self._cond = threading.Condition()
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def run(self, job: Callable[[], None]) -> None:
        """Queue a job; never blocks."""
        with self._cond:
            if self._closed:
                raise RuntimeError("worker pool is closed")
            self._queue.append(job)
            if self._idle == 0 and self._threads < self._size:
                t = threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True)
                self._threads += 1
                t.start()
            else:
                self._cond.notify()

    def close(self) -> None:
        """Let the threads exit once the queue is empty (daemons: nothing waits on them)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._queue:
                    self._threads -= 1
                    return
                job = self._queue.popleft()
            job()


class Uploader:
    """Delivers requests to one target on a :class:`WorkerPool` (its own of ``max_in_flight``
    threads, or a shared one).

    ``on_done(request, outcome)`` is called exactly once per submitted request, from a worker
    thread (or from :meth:`submit` once stopped). A DoFn instance makes one uploader in
    ``setup``; each bundle's sender takes a :meth:`session` of it, with its own ``on_done`` and
    its own stop, sharing the target, settings and threads.
    """

    def __init__(
        self,
        target: Target,
        upload: UploadSettings,
        retry: RetrySettings,
        on_done: Callable[[Request, Outcome], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], bool] | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self._target = target
        # A FallbackTarget (targets/compose.py) takes requests the primary finally refused.
        self._send_fallback: Callable[..., None] | None = getattr(target, "send_fallback", None)
        self._upload = upload
        self._retry = retry
        self._on_done = on_done if on_done is not None else _unreported
        self._clock = clock
        self._rand = rand
        self._stopped = threading.Event()
        #: Waits ``delay`` seconds; True if the uploader was stopped meanwhile.
        self._sleep = sleep if sleep is not None else self._stopped.wait
        self._owns_pool = pool is None
        self._pool = pool if pool is not None else WorkerPool(upload.max_in_flight)

    def session(self, on_done: Callable[[Request, Outcome], None]) -> Uploader:
        """An uploader over the same target, settings and threads that reports to ``on_done``
        and stops on its own (:meth:`abandon` stops only its requests; it never closes the
        threads, which stay this uploader's)."""
        return Uploader(
            self._target,
            self._upload,
            self._retry,
            on_done,
            clock=self._clock,
            rand=self._rand,
            sleep=None if self._sleep == self._stopped.wait else self._sleep,
            pool=self._pool,
        )

    def submit(self, request: Request) -> None:
        """Queue a request; never blocks (the stream bounds what it submits)."""
        if self._stopped.is_set():
            self._on_done(request, Outcome(False, False, "stream stopped before the request was sent", 0, 0))
            return
        self._pool.run(lambda: self._job(request))

    def abandon(self) -> None:
        """Stop: no new attempts or backoff waits; requests not started end as failed."""
        self._stopped.set()
        self._close_pool()

    def shutdown(self) -> None:
        """No more requests will come (the queued ones still go)."""
        self._close_pool()

    def _close_pool(self) -> None:
        if self._owns_pool:
            self._pool.close()

    def _job(self, request: Request) -> None:
        if self._stopped.is_set():
            outcome = Outcome(False, False, "stream closed before the request was sent", 0, 0)
        else:
            try:
                outcome = self._deliver(request)
            except BaseException as exc:  # never lose the outcome, even on a bug
                outcome = Outcome(False, False, f"internal error: {exc!r}", 0, 0)
        self._on_done(request, outcome)

    def _deliver(self, request: Request) -> Outcome:
        rejected: dict[int, str] = {}
        to_fallback: list[int] = []
        outcome = self._deliver_rest(request, rejected, to_fallback)
        if rejected or to_fallback:
            return replace(outcome, rejected=rejected, refused_to_fallback=tuple(sorted(to_fallback)))
        return outcome

    def _deliver_rest(self, request: Request, rejected: dict[int, str], to_fallback: list[int]) -> Outcome:
        """Send ``request``; when the target refuses some of its batches for good (naming them),
        hand them to the fallback target if there is one (else record them in ``rejected``) and
        send the others as a request of their own (a new body, so a new idempotency key: nothing
        of the refused request was stored)."""
        retry, start = self._retry, self._clock()
        attempt = 0
        #: Indices into the original request's batches of what ``request`` now holds.
        index = list(range(len(request.batches)))
        while True:
            attempt += 1
            timeout = self._upload.attempt_timeout
            if retry.total_timeout is not None:
                timeout = max(0.001, min(timeout, retry.total_timeout - (self._clock() - start)))
            retry_after: float | None = None
            try:
                already_stored = self._target.send(request, timeout=timeout) is True and attempt == 1
                return Outcome(True, False, "", attempt - 1, request.encoded_bytes, already_stored=already_stored)
            except TargetError as exc:
                reason = f"{exc.code or type(exc).__name__}: {exc}"
                if exc.too_large:
                    halves = _halves(request)
                    if halves is None:
                        reason = f"a single point larger than the target takes in one request: {reason}"
                        return self._to_fallback(request, reason, attempt - 1)
                    # Each half is a request of its own (its own body and idempotency key: nothing
                    # of this one was stored), delivered, retried or split again like any.
                    _log.debug("request %d (%d points) too large; sent in halves", request.seq, request.points)
                    parts = tuple((part, self._deliver_part(part)) for part in halves)
                    return Outcome(False, False, "", attempt - 1, 0, parts=parts)
                retryable, retry_after = exc.retryable, exc.retry_after
                refused = exc.rejected
                if any(not 0 <= i < len(index) for i in refused):
                    refused = {}  # a naming that does not fit this request is about no batch of it
                if not retryable and refused:
                    self._refused_for_good(request, index, refused, reason, rejected, to_fallback)
                    index = [j for i, j in enumerate(index) if i not in refused]
                    if not index:
                        return Outcome(False, False, reason, attempt - 1, 0)
                    request = _part(request, [i for i in range(len(request.batches)) if i not in refused])
                    _log.warning(
                        "request %d: %d series refused for good (%s); sending the other %d again",
                        request.seq,
                        len(refused),
                        reason,
                        len(index),
                    )
                    continue
            except Exception as exc:
                reason, retryable = f"{type(exc).__name__}: {exc}", False
            if not retryable:
                break
            if retry.max_attempts is not None and attempt >= retry.max_attempts:
                reason = f"gave up after {attempt} attempts: {reason}"
                break
            delay = retry.backoff(attempt, self._rand())
            if retry_after is not None:
                # The server knows its own load better than our backoff: wait at least as asked
                # (the retry budget below still bounds the whole request).
                delay = max(delay, retry_after)
            if retry.total_timeout is not None and self._clock() - start + delay >= retry.total_timeout:
                reason = f"gave up after {attempt} attempts ({retry.total_timeout}s retry budget): {reason}"
                break
            _log.debug("request %d attempt %d failed (%s); retrying in %.3fs", request.seq, attempt, reason, delay)
            if self._sleep(delay):
                # Abandoned: the stream has written this request off and reported it failed;
                # sending it anywhere now (the fallback included) would deliver it unreported.
                return Outcome(False, False, f"stream closed while retrying: {reason}", attempt - 1, 0)
        return self._to_fallback(request, reason, attempt - 1)

    def _deliver_part(self, part: Request) -> Outcome:
        if self._stopped.is_set():
            # Written off with the stream: sending it now would deliver it unreported.
            return Outcome(False, False, "stream closed before the request was sent", 0, 0)
        return self._deliver(part)

    def _refused_for_good(
        self,
        request: Request,
        index: list[int],
        refused: dict[int, str],
        reason: str,
        rejected: dict[int, str],
        to_fallback: list[int],
    ) -> None:
        """Batches ``refused`` (indices into ``request``) will never be taken by the target: to
        the fallback, like any request the target finally refused, or else written off."""
        if self._send_fallback is None:
            rejected.update((index[i], why) for i, why in refused.items())
            return
        failed_too = self._hand_to_fallback(_part(request, refused), reason)
        if failed_too is None:
            to_fallback.extend(index[i] for i in refused)
        else:
            rejected.update((index[i], why + failed_too) for i, why in refused.items())

    def _to_fallback(self, request: Request, reason: str, retries: int) -> Outcome:
        if self._send_fallback is None:
            return Outcome(False, False, reason, retries, 0)
        failed_too = self._hand_to_fallback(request, reason)
        if failed_too is not None:
            return Outcome(False, False, reason + failed_too, retries, 0)
        return Outcome(False, True, reason, retries, 0)

    def _hand_to_fallback(self, request: Request, reason: str) -> str | None:
        """Send ``request`` to the fallback target: None once it took it, else why it did not
        (to append to the reason)."""
        assert self._send_fallback is not None
        try:
            self._send_fallback(request, self._upload.attempt_timeout, reason=RuntimeError(reason))
        except Exception as exc:
            return f"; fallback failed too: {exc}"
        _log.warning("request %d (%d points) went to the fallback target: %s", request.seq, request.points, reason)
        return None


def _unreported(request: Request, outcome: Outcome) -> None:
    """The ``on_done`` of an uploader only sessions submit to."""


def _halves(request: Request) -> tuple[Request, Request] | None:
    """``request`` as two requests of half its points each (a series cut where the half falls),
    in order; None for a single point. Depends only on the request, so a retried bundle splits
    the same way."""
    if request.points < 2:
        return None
    half = request.points // 2
    first: list[SeriesBatch] = []
    second: list[SeriesBatch] = []
    seen = 0
    for b in request.batches:
        n = len(b)
        if seen >= half:
            second.append(b)
        elif seen + n <= half:
            first.append(b)
        else:
            k = half - seen
            first.append(SeriesBatch(b.key, b.value_type, b.timestamps[:k], b.values[:k]))
            second.append(SeriesBatch(b.key, b.value_type, b.timestamps[k:], b.values[k:]))
        seen += n
    return (
        Request(request.dataset_rid, first, request.source_name, request.seq),
        Request(request.dataset_rid, second, request.source_name, request.seq),
    )


def _part(request: Request, batches: Iterable[int]) -> Request:
    """The request of some of ``request``'s batches (by index), under the same sequence number."""
    return Request(request.dataset_rid, [request.batches[i] for i in batches], request.source_name, request.seq)
