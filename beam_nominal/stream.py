"""``NominalStream``: write telemetry from Python to Nominal, exactly, fast and bounded.

The stream is a thin facade over buffer -> pack -> encode -> upload -> target::

    with NominalStream("grpc://127.0.0.1:50051", dataset_rid="ri.dataset.x") as stream:
        stream.enqueue("temp", "2024-01-01T00:00:00.000000001Z", 21.5)
        stream.enqueue_batch("volts", timestamps_ns_array, values_array)
        report = stream.flush()

Values keep their type exactly (see :class:`~beam_nominal.model.ValueType`): Python floats are
doubles, Python ints are int64 (or uint64 above 2**63 - 1), bools are int64 0/1, strings are
strings, mappings are structs stored as compact JSON text with sorted keys (so equal mappings give
equal bytes and retried bundles give identical requests). A series is pinned to the type of its
first value; a conflicting value raises :class:`~beam_nominal.errors.SeriesTypeError` and buffers
nothing from that call. As an exception, a non-negative Python int is accepted into a uint64
series.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from beam_nominal._pipeline import interrupt as _interrupt
from beam_nominal._pipeline import values as _values
from beam_nominal._pipeline.buffer import Buffer
from beam_nominal._pipeline.packer import cut_requests
from beam_nominal._pipeline.staging import PointBatch, pack_doubles
from beam_nominal._pipeline.uploader import Outcome, Uploader
from beam_nominal._wire.batch import DoubleBatches, SeriesBatch
from beam_nominal.errors import BackpressureError, DeliveryError, StreamClosedError
from beam_nominal.model import KeyTuple, SeriesKey, ValueType, check_timezone
from beam_nominal.settings import BatchSettings, RetrySettings, StreamSettings, UploadSettings, resolve
from beam_nominal.targets.base import FIRST_CONTACT_TIMEOUT, Request, Target, first_contact

__all__ = ["DeliveryReport", "NominalStream", "StreamState"]

_log = logging.getLogger("beam_nominal.stream")
# Members looked up once: Python 3.11's EnumType runs Python code on every ``ValueType.X``.
_DOUBLE_ARRAY, _STRING_ARRAY, _STRUCT = ValueType.DOUBLE_ARRAY, ValueType.STRING_ARRAY, ValueType.STRUCT

#: Single points a stream stages, at most, before they move into its buffer.
_SETTLE_POINTS = 4096


class StreamState(str, enum.Enum):
    """Where a stream is in its life. Legal transitions, and nothing else::

        OPEN ──close()/leaving `with`/SIGINT/dropped──> CLOSING ──all acknowledged──> CLOSED
                                                        CLOSING ──anything undelivered──> FAILED

    Writes are accepted only while OPEN; in every other state they raise
    :class:`~beam_nominal.errors.StreamClosedError`. CLOSED and FAILED are final.
    """

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(frozen=True)
class DeliveryReport:
    """What a stream delivered so far (cumulative since it opened).

    Attributes:
        points: points acknowledged by the target.
        series: distinct series with at least one acknowledged point.
        requests: requests acknowledged.
        bytes: encoded bytes of acknowledged requests.
        retries: send attempts beyond the first, over all requests.
        elapsed: seconds since the stream opened.
        already_stored_points: of ``points``, those the target said it had already stored, sent
            by an identical earlier request (a re-run of the same input): nothing was stored again.
            Only servers that say so count here (the local server does).
        failed_points: points that were not delivered anywhere.
        fallback_points: points the primary refused that the fallback target took.
        fallback_requests: requests that went to the fallback.
        fallback_path: where the fallback data is, or None without fallback.
    """

    points: int
    series: int
    requests: int
    bytes: int
    retries: int
    elapsed: float
    failed_points: int = 0
    already_stored_points: int = 0
    fallback_points: int = 0
    fallback_requests: int = 0
    fallback_path: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing was lost (points in the fallback are not lost)."""
        return self.failed_points == 0


class Sender:
    """The engine under a stream and under a Beam bundle: staging, per-series buffer, cuts by
    budget, backpressure, in-flight accounting and one settled outcome per request.

    Driven by one caller thread (a bundle's, or a NominalStream's callers one at a time under
    ``lock``); outcomes arrive from the uploader's threads and are settled under ``lock``. It
    registers no signal handler, starts no thread and never closes what it was given unless told
    to own it: :class:`NominalStream` adds those, :func:`bundle_sender` makes a bare one per
    bundle over a DoFn instance's target and uploader. Holds no reference to a facade, so a
    stream can be collected (and its finaliser drain this) while upload threads hold the sender.
    """

    def __init__(
        self,
        target: Target,
        uploader: Uploader,
        dataset_rid: str,
        batch: BatchSettings,
        upload: UploadSettings,
        *,
        staged: PointBatch,
        source_name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        owns_target: bool = False,
        owns_uploader: bool = False,
    ) -> None:
        self.target = target
        self.owns_target = owns_target
        self.owns_uploader = owns_uploader
        self.dataset_rid = dataset_rid
        self.batch = batch
        self.upload = upload
        self.source_name = source_name
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.close_lock = threading.Lock()
        self.buffer = Buffer()
        #: Checked points not yet in the buffer: every write appends here (see the facade); a
        #: bundle's DoFn appends here itself, so each element's types are checked once.
        self.staged = staged
        self.state = StreamState.OPEN
        #: ``state is OPEN``, as a plain bool for the hot path.
        self.accepting = True
        #: Buffered plus in-flight bytes reached the budget at the last settle or outcome: the
        #: next write goes through wait_room() before buffering anything.
        self.full = False
        #: ``full or not accepting``: the one flag the hot paths test before their slow checks.
        self.gate = False
        self.max_bytes = batch.max_request_bytes
        #: Single points staged (``staged.singles_due``) before they move into the buffer, at most a
        #: request's worth; other writes move once they hold a request's worth of bytes
        #: (``staged.nbytes``): moving wide rows sooner would cut each record into thousands of
        #: one-row batches, later would hide bytes from the budget.
        self.settle_singles = max(1, min(_SETTLE_POINTS, batch.max_request_bytes // 24))
        self.max_points = batch.max_request_points
        self.budget = upload.max_buffered_bytes
        self.seq = 0
        #: seq -> request, for every request cut and not yet ended.
        self.in_flight: dict[int, Request] = {}
        self.in_flight_bytes = 0
        #: Clock time at which the buffer last went from empty to holding points (for linger).
        self.first_buffered_at: float | None = None
        # Counters, updated only when a request ends.
        self.points_acked = 0
        self.points_already_stored = 0
        self.requests_acked = 0
        self.bytes_acked = 0
        self.retries = 0
        self.series_acked: set[KeyTuple] = set()
        self.fallback_points = 0
        self.fallback_requests = 0
        self.failed: dict[SeriesKey, int] = {}
        self.reasons: dict[SeriesKey, str] = {}
        #: The part of ``failed`` the target refused for good (it named the batches).
        self.rejected: dict[SeriesKey, int] = {}
        self.failed_points = 0
        self.raised_failed = 0
        self.final_report: DeliveryReport | None = None
        self.root_uploader = uploader
        #: This sender's view of the uploader: its outcomes come back here, and abandoning it
        #: stops only this sender's requests.
        self.uploader = uploader.session(self.on_done)
        self.linger_stop = threading.Event()
        #: Ctrl+C presses seen while open (see ``_pipeline/interrupt.py``; only a NominalStream
        #: registers its sender), and whether the KeyboardInterrupt they owe the caller has been
        #: raised.
        self.interrupts = 0
        self.interrupt_raised = False
        #: The facade registered this sender with the SIGINT handler.
        self.registered = False
        #: close() is waiting for the last outcomes (a press then cuts it short rather than
        #: owing another KeyboardInterrupt).
        self.draining = False
        #: Requests cut under the lock, to be handed to the uploader after releasing it.
        self._pending_submit: list[Request] = []

    # -- state under the lock --------------------------------------------------------------------

    def check_open(self) -> None:
        if self.take_interrupt():
            raise KeyboardInterrupt
        if not self.accepting:
            raise StreamClosedError(f"stream for {self.dataset_rid} is {self.state.value}: no more writes")

    def wait_room(self) -> None:
        """Backpressure, lock held, before anything of the call is buffered: return once buffered
        plus in-flight bytes are under budget, or raise BackpressureError if not blocking."""
        buf = self.buffer
        self.move_staged()
        if buf.nbytes >= self.max_bytes or buf.points >= self.max_points:
            # Send what can be cut first: in-flight requests are what frees room.
            self.cut_and_register(final=False)
            pending = self.take_submits()
            self.lock.release()
            try:
                self.submit(pending)
            finally:
                self.lock.acquire()
            # The lock was let go: close() may have cut for the last time meanwhile.
            self.check_open()
        while buf.nbytes + self.in_flight_bytes >= self.budget:
            if not self.upload.block_on_full:
                raise BackpressureError(
                    f"{buf.nbytes + self.in_flight_bytes} bytes buffered or in flight, budget "
                    f"{self.budget} (UploadSettings.max_buffered_bytes); block_on_full is off"
                )
            if not self.in_flight:
                break  # nothing will free room: only a single call larger than the budget gets here
            self.wait(None)
            self.check_open()
        self.full = False
        self.gate = not self.accepting

    def move_staged(self) -> None:
        """Lock held: move what the PointBatch holds into the buffer."""
        staged = self.staged
        if staged.points:
            # Types already agree: the batch checks against its own series, the buffer's.
            staged.move_into(self.buffer)

    def cut_and_register(self, final: bool) -> list[Request]:
        self.move_staged()
        requests = cut_requests(
            self.buffer,
            dataset_rid=self.dataset_rid,
            max_bytes=self.max_bytes,
            max_points=self.max_points,
            final=final,
            next_seq=self.seq,
            source_name=self.source_name,
        )
        for r in requests:
            self.in_flight[r.seq] = r
            self.in_flight_bytes += r.buffered_bytes
        self.seq += len(requests)
        self._pending_submit.extend(requests)
        if not self.buffer.points:
            self.first_buffered_at = None
        return requests

    def write(self, add: Callable[..., list[tuple[SeriesBatch, int]] | None], *args: Any) -> None:
        """Every write but ``enqueue`` and ``write_typed`` (which inline these steps):
        backpressure, ``add(*args)`` on the staged batch under the lock, then the move into the
        buffer and the cut when due.

        A column adder (``series_batches``, ``table_batches``) returns its checked (batch, bytes)
        pairs, which go into the buffer at once, so the budget sees them whole; points and rows
        (adders returning None) stay staged until they make a request's worth (or
        _SETTLE_POINTS single points).
        """
        lock = self.lock
        lock.acquire()
        try:
            if self.gate:
                self.check_open()
                if self.full:
                    self.wait_room()
            columns = add(*args)
            if self.first_buffered_at is None:
                self.first_buffered_at = self.clock()
            staged = self.staged
            if columns is not None:
                reqs = self.put_columns(columns)
            elif (
                not staged.singles_due(self.settle_singles)
                and staged.nbytes < self.max_bytes
                and staged.counted < self.max_points
            ):
                return
            else:
                reqs = self.settled()
        finally:
            lock.release()
        if reqs:
            self.submit(reqs)

    def write_typed(self, channel: Any, timestamp: Any, vtype: ValueType, value: Any, tags: Any) -> None:
        """:meth:`write` of ``staged.add_typed`` (one converted point: an array row, a struct),
        its steps inlined as ``enqueue`` inlines them: callers make one call a row."""
        lock = self.lock
        lock.acquire()
        try:
            if self.gate:
                self.check_open()
                if self.full:
                    self.wait_room()
            staged = self.staged
            held = staged.add_typed(channel, timestamp, vtype, value, tags)
            if self.first_buffered_at is None:
                self.first_buffered_at = self.clock()
            # singles_due for the one column the point went to: every write leaves the other
            # under the limit (or settles both), so it need not be read again.
            if held < self.settle_singles and staged.nbytes < self.max_bytes and staged.counted < self.max_points:
                return
            reqs = self.settled()
        finally:
            lock.release()
        if reqs:
            self.submit(reqs)

    def handover(self) -> None:
        """What the caller appended to ``staged`` itself (a bundle's elements, each checked
        whole there) into the buffer, after backpressure; cut what is due and send it."""
        with self.lock:
            if self.gate:
                self.check_open()
                if self.full:
                    self.wait_room()
            reqs = self.settled()
        if reqs:
            self.submit(reqs)

    def settled(self) -> Sequence[Request]:
        """Lock held: settle the buffer's accounting, apply backpressure, cut full requests.

        Returns:
            Requests to submit once the lock is released.
        """
        self.move_staged()
        return self.cut_due()

    def put_columns(self, batches: list[tuple[SeriesBatch, int]]) -> Sequence[Request]:
        """Lock held: :meth:`settled`, with columns the PointBatch checked (``series_batches``
        ...) put straight into the buffer after what the batch holds, which came first."""
        self.move_staged()
        add = self.buffer.add
        for batch, nbytes in batches:
            add(batch.key, batch.value_type, batch.timestamps, batch.values, nbytes)
        return self.cut_due()

    def cut_due(self) -> Sequence[Request]:
        """Lock held, the buffer settled: cut full requests, update the backpressure flags."""
        buf = self.buffer
        if buf.nbytes >= self.max_bytes or buf.points >= self.max_points:
            self.cut_and_register(final=False)
        self.full = buf.nbytes + self.in_flight_bytes >= self.budget
        self.gate = self.full or not self.accepting
        return self.take_submits()

    def take_submits(self) -> Sequence[Request]:
        out = self._pending_submit
        if not out:
            return ()  # most writes cut nothing: no list made for them
        self._pending_submit = []
        return out

    def submit(self, requests: Sequence[Request]) -> None:
        """Outside the lock: the uploader may report an outcome synchronously."""
        for r in requests:
            self.uploader.submit(r)

    def on_done(self, request: Request, outcome: Outcome) -> None:
        with self.lock:
            known = self.in_flight.pop(request.seq, None)
            if known is None:
                return  # already written off by a timed-out close
            self.in_flight_bytes -= known.buffered_bytes
            self._settle(request, outcome)
            self.full = self.buffer.nbytes + self.in_flight_bytes >= self.budget
            self.gate = self.full or not self.accepting
            self.cond.notify_all()

    def _settle(self, request: Request, outcome: Outcome) -> None:
        """Lock held: count every point of ``request`` once, as acknowledged, in the fallback or
        failed; a request sent in parts (refused as too large) through each part's outcome."""
        self.retries += outcome.retries
        batches = request.batches
        split = bool(outcome.rejected or outcome.refused_to_fallback)
        if split:
            for i, why in outcome.rejected.items():
                self._write_off(batches[i], why, rejected=True)
            if outcome.refused_to_fallback:
                # Refused for good by the target, taken by the fallback: in the fallback,
                # as a request of their own.
                self.fallback_points += sum(len(batches[i]) for i in outcome.refused_to_fallback)
                self.fallback_requests += 1
            gone = set(outcome.rejected).union(outcome.refused_to_fallback)
            batches = [b for i, b in enumerate(batches) if i not in gone]
        if outcome.parts:
            # What was left of the request went as these parts: each counts its own points.
            for part, part_outcome in outcome.parts:
                self._settle(part, part_outcome)
            return
        points = sum(len(b) for b in batches) if split else request.points
        if batches and outcome.acknowledged:  # (no batches: every one was refused for good)
            self.points_acked += points
            if outcome.already_stored:
                self.points_already_stored += points
            self.requests_acked += 1
            self.bytes_acked += outcome.nbytes
            self.series_acked.update(batches.keys if isinstance(batches, DoubleBatches) else (b.key for b in batches))
        elif batches and outcome.fallback:
            self.fallback_points += points
            self.fallback_requests += 1
        else:
            for b in batches:
                self._write_off(b, outcome.reason)

    def _write_off(self, batch: SeriesBatch, reason: str, rejected: bool = False) -> None:
        n = len(batch)
        self.failed[batch.key] = self.failed.get(batch.key, 0) + n
        self.reasons[batch.key] = reason
        self.failed_points += n
        if rejected:
            self.rejected[batch.key] = self.rejected.get(batch.key, 0) + n

    def report(self) -> DeliveryReport:
        path = getattr(self.target, "fallback_location", None)
        return DeliveryReport(
            points=self.points_acked,
            series=len(self.series_acked),
            requests=self.requests_acked,
            bytes=self.bytes_acked,
            retries=self.retries,
            elapsed=self.clock() - self.started,
            failed_points=self.failed_points,
            already_stored_points=self.points_already_stored,
            fallback_points=self.fallback_points,
            fallback_requests=self.fallback_requests,
            fallback_path=path if isinstance(path, str) else None,
        )

    def failure(self, what: str) -> DeliveryError | None:
        """A DeliveryError for failures not raised yet (lock held), or None."""
        if self.failed_points == self.raised_failed:
            return None
        self.raised_failed = self.failed_points
        worst = sorted(self.failed.items(), key=lambda kv: -kv[1])
        shown = "; ".join(f"{k.describe()}: {n} points ({self.reasons.get(k, '?')})" for k, n in worst[:5])
        more = f"; and {len(worst) - 5} more series" if len(worst) > 5 else ""
        return DeliveryError(
            f"{what}: {self.failed_points} points of {len(worst)} series were not delivered: {shown}{more}",
            report=self.report(),
            undelivered=dict(self.failed),
            reasons=dict(self.reasons),
            rejected=dict(self.rejected),
        )

    # -- flush / close ---------------------------------------------------------------------------

    def flush(self, timeout: float | None) -> DeliveryReport:
        with self.lock:
            self.cut_and_register(final=True)
            reqs = self.take_submits()
            upto = self.seq
        self.submit(reqs)
        deadline = None if timeout is None else self.clock() + timeout
        with self.lock:
            while any(seq < upto for seq in self.in_flight):
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    pending = [r for s, r in self.in_flight.items() if s < upto]
                    raise self._timeout_error(f"flush timed out after {timeout}s", pending, write_off=False)
                self.wait(remaining)
                if self.take_interrupt():
                    raise KeyboardInterrupt
            err = self.failure("flush")
            if err is not None:
                raise err
            return self.report()

    def _timeout_error(self, what: str, pending: list[Request], write_off: bool) -> DeliveryError:
        counts: dict[SeriesKey, int] = {}
        for r in pending:
            for b in r.batches:
                counts[b.key] = counts.get(b.key, 0) + len(b)
        if write_off:
            for r in pending:
                for b in r.batches:
                    self._write_off(b, what)
            err = self.failure(what)
            assert err is not None
            return err
        total = sum(counts.values())
        shown = "; ".join(f"{k.describe()}: {n} points" for k, n in list(counts.items())[:5])
        return DeliveryError(
            f"{what}: {total} points of {len(counts)} series not yet acknowledged: {shown}",
            report=self.report(),
            undelivered=counts,
            reasons=dict.fromkeys(counts, what),
        )

    def close(self, timeout: float | None) -> DeliveryReport:
        deadline = None if timeout is None else self.clock() + timeout
        acquired = self.close_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout))
        if not acquired:
            with self.lock:
                return self.final_report or self.report()
        try:
            with self.lock:
                if self.final_report is not None:
                    return self.final_report
                self.state = StreamState.CLOSING
                self.accepting = False
                self.gate = True
                self.linger_stop.set()
                self.cut_and_register(final=True)
                reqs = self.take_submits()
                self.cond.notify_all()  # writers blocked on backpressure see CLOSING
            self.submit(reqs)
            error: DeliveryError | None = None
            with self.lock:
                self.draining = True  # a Ctrl+C now cuts this drain short (see mark_interrupted)
                # A second Ctrl+C cuts the drain short: one pressed during it, not one pressed
                # before (the caller caught that one and went on).
                before = self.interrupts
                cut = False
                while self.in_flight and not cut:
                    remaining = None if deadline is None else deadline - self.clock()
                    if remaining is not None and remaining <= 0:
                        break
                    self.wait(remaining)
                    cut = self.interrupts >= 2 and self.interrupts > before
                self.draining = False
                abandoned = list(self.in_flight.values())
                if abandoned:
                    self.in_flight.clear()
                    self.in_flight_bytes = 0
                    self.cond.notify_all()  # a flush waiting on these must not wait on
                    why = "close interrupted by Ctrl+C" if cut else f"close timed out after {timeout}s"
                    error = self._timeout_error(why, abandoned, write_off=True)
                else:
                    error = self.failure("close")
            if abandoned:
                self.uploader.abandon()  # no more attempts or backoff waits for written-off requests
            if self.owns_uploader:
                self.root_uploader.shutdown()
            if self.owns_target:
                try:
                    self.target.close()
                except Exception as exc:
                    _log.warning("closing target %r failed: %s", self.target, exc)
            with self.lock:
                self.state = StreamState.FAILED if self.failed_points else StreamState.CLOSED
                self.final_report = self.report()
                if error is not None:
                    error.report = self.final_report
            if self.registered:
                _interrupt.unregister(self)
            if error is not None:
                raise error
            return self.final_report
        finally:
            self.close_lock.release()

    # -- timers and signals ----------------------------------------------------------------------

    def poll_linger(self) -> None:
        """Cut partial buffers older than ``linger`` (called by the linger thread; tests call it)."""
        linger = self.batch.linger
        if linger is None:
            return
        with self.lock:
            first = self.first_buffered_at
            if not self.accepting or first is None or self.clock() - first < linger:
                return
            self.cut_and_register(final=True)
            reqs = self.take_submits()
        self.submit(reqs)

    def linger_loop(self) -> None:
        linger = self.batch.linger
        assert linger is not None
        while not self.linger_stop.wait(linger / 2):
            try:
                self.poll_linger()
            except Exception:  # pragma: no cover - keep the timer alive, the next flush reports
                _log.exception("background flush failed")

    # -- Ctrl+C (the handler is in _pipeline/interrupt.py) --------------------------------------

    def wait(self, timeout: float | None) -> None:
        """Lock held: wait for an outcome, at most ``timeout``, waking every ``POLL`` seconds so a
        Ctrl+C deferred by the handler is acted on soon (callers check ``interrupts``)."""
        self.cond.wait(_interrupt.POLL if timeout is None else min(timeout, _interrupt.POLL))

    def take_interrupt(self) -> bool:
        """True once for a Ctrl+C not yet raised to the caller (who then raises it). Only in the
        main thread, as Python raises KeyboardInterrupt only there: another thread's write
        finds the stream closed, and the main thread gets the interrupt."""
        if self.interrupts and not self.interrupt_raised and threading.current_thread() is threading.main_thread():
            self.interrupt_raised = True
            _interrupt.raised()
            return True
        return False

    def mark_interrupted(self) -> None:
        # Plain stores, from the handler, possibly between two bytecodes of a locked section:
        # they only stop writes; the next gate, wait slice or close() raises.
        self.interrupts += 1
        if self.interrupt_raised and not self.draining:
            # Another press, not one that cuts a drain short: it owes a KeyboardInterrupt too.
            self.interrupt_raised = False
        self.accepting = False
        self.gate = True
        # The state only with the lock (a close in another thread may be ending); if this
        # thread was interrupted holding it, close() makes the transition instead.
        if self.lock.acquire(blocking=False):
            try:
                if self.state is StreamState.OPEN:
                    self.state = StreamState.CLOSING
            finally:
                self.lock.release()

    def interrupt_owed(self) -> bool:
        return bool(self.interrupts) and not self.interrupt_raised

    def drain_interrupted(self) -> None:
        self.interrupt_raised = True  # the handler raises it
        try:
            self.close(self.upload.close_timeout)
        except Exception as exc:
            _log.error("draining on Ctrl+C: %s", exc)


def _finalize(sender: Sender) -> None:
    if sender.final_report is not None:
        return
    message = f"NominalStream for {sender.dataset_rid} was dropped without close(); draining now"
    # Python's default filters hide ResourceWarning: the log says it too.
    _log.warning(message)
    warnings.warn(message, ResourceWarning, stacklevel=2)
    try:
        sender.close(sender.upload.close_timeout)
    except Exception as exc:
        _log.error("draining a dropped NominalStream: %s", exc)


class NominalStream:
    """A buffered, concurrent, exact writer of telemetry to one Nominal dataset.

    Args:
        target: Nominal's base URL ``https://host/api`` (its HTTP write API; ``http://`` for
            plaintext), ``grpc://host:port``, ``grpcs://host[:port]`` (TLS), a path or
            ``file://`` URL ending in ``.avro``, or any object with the
            :class:`~beam_nominal.targets.base.Target` protocol. Targets made from a URL are
            closed with the stream; a target object passed in is left open.
        dataset_rid: the dataset every point goes to.
        token: bearer token, or a callable returning one (called per request), for gRPC URLs;
            defaults to ``NOMINAL_TOKEN``. Never logged or shown.
        fallback: a path / ``file://`` URL of an Avro file, or a target, that takes requests the
            target finally refused (permanent error or retries exhausted). The report counts them
            as ``fallback_points``, not as delivered; flush/close then do not raise for them.
        batch, upload, retry: settings objects; or give their fields directly as keywords
            (``max_request_bytes=``, ``linger=``, ``max_in_flight=``, ``max_attempts=`` ...).
            A target with an int attribute ``preferred_request_bytes`` sets the request size
            unless ``max_request_bytes=`` is given as a keyword (bounded by half the buffer).
        source_name: optional source name carried by every request.
        timezone: the zone naive timestamps are readings in (``"UTC"``, an IANA name such as
            ``"Europe/Berlin"``, a fixed offset ``"+02:00"``); a reading a DST change makes
            ambiguous is refused. ``None`` (default): a naive timestamp (a naive ``datetime`` or
            pandas ``Timestamp``, an ISO string without an offset, a ``datetime64``, an Arrow
            timestamp without a tz, a naive DatetimeIndex) is refused with the fix in the error;
            int ns are UTC by definition.
        ca_file: trusted roots for ``https``/``grpcs`` URLs (system roots by default).
        format: for ``http(s)://`` URLs, ``"row"`` (default: the endpoint every Nominal
            deployment serves) or ``"columnar"``; ``fallback_to_row=True`` lets a columnar
            target switch to row when the server does not serve columnar.
        clock: monotonic clock in seconds (injectable for tests of linger and timeouts).

    Lifecycle: see :class:`StreamState`. Leaving a ``with`` block, even on an exception, closes the
    stream, which drains everything enqueued (bounded by ``close_timeout``); on an exception the
    original exception propagates and a delivery failure is logged and added as a note to it. A
    stream dropped without ``close`` drains from its finaliser and warns ``ResourceWarning``. When
    created in the main thread with Python's default SIGINT handler in place, Ctrl-C stops new
    writes, drains, then raises ``KeyboardInterrupt``; the handler holds only a weak reference and
    is restored on close. All methods are thread-safe; every point lands exactly once.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | Target,
        *,
        dataset_rid: str,
        token: str | Callable[[], str] | None = None,
        fallback: str | os.PathLike[str] | Target | None = None,
        batch: BatchSettings | None = None,
        upload: UploadSettings | None = None,
        retry: RetrySettings | None = None,
        source_name: str | None = None,
        timezone: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        format: str | None = None,
        fallback_to_row: bool = False,
        clock: Callable[[], float] = time.monotonic,
        **settings: Any,
    ) -> None:
        if not isinstance(dataset_rid, str) or not dataset_rid:
            raise ValueError(f"dataset_rid must be a non-empty string, got {dataset_rid!r}")
        batch, upload, retry, given = resolve(batch, upload, retry, **settings)
        check_timezone(timezone, "NominalStream timezone")
        made, owns = _make_target(target, dataset_rid, token, ca_file, format, fallback_to_row)
        batch = _request_size(batch, upload, given, made)
        try:
            if fallback is not None:
                from beam_nominal.targets.compose import with_fallback

                made = with_fallback(made, fallback, dataset_rid=dataset_rid)
                if not owns:
                    # We own the wrapper (and the fallback file), not the primary passed in.
                    made = _CloseOnlyFallback(made)
                owns = True
            first_contact(made, dataset_rid, min(FIRST_CONTACT_TIMEOUT, upload.attempt_timeout))
            uploader = Uploader(made, upload, retry, clock=clock)
            self._sender = sender = Sender(
                made,
                uploader,
                dataset_rid,
                batch,
                upload,
                staged=PointBatch(timezone=timezone),
                source_name=source_name,
                clock=clock,
                owns_target=owns,
                owns_uploader=True,
            )
        except BaseException:
            if owns:
                made.close()
            raise
        if batch.linger is not None:
            threading.Thread(target=sender.linger_loop, name="beam-nominal-linger", daemon=True).start()
        self._finalizer = weakref.finalize(self, _finalize, sender)
        sender.registered = True
        _interrupt.register(sender)

    # -- introspection ---------------------------------------------------------------------------

    @property
    def state(self) -> StreamState:
        """The stream's :class:`StreamState`."""
        return self._sender.state

    @property
    def dataset_rid(self) -> str:
        return self._sender.dataset_rid

    def __repr__(self) -> str:
        c = self._sender
        return f"NominalStream({c.target!r}, dataset_rid={c.dataset_rid!r}, state={c.state.value})"

    def report(self) -> DeliveryReport:
        """The cumulative report now, without flushing."""
        with self._sender.lock:
            return self._sender.report()

    # -- writes ----------------------------------------------------------------------------------
    #
    # One path: every form appends to the sender's PointBatch (``_pipeline/staging.py``) under
    # the lock; the batch checks the call whole and appends all of it or raises having appended
    # nothing. It moves into the buffer after every column, every _SETTLE_POINTS single points
    # or a request's worth of rows, and before every cut (``Sender.move_staged``).

    def enqueue(self, channel: str, timestamp: Any, value: Any, tags: Mapping[str, str] | None = None) -> None:
        """Write one point.

        Args:
            channel: channel name.
            timestamp: int ns, aware datetime, ISO-8601 string, datetime64, pandas/Beam Timestamp.
            value: float, int, bool, str, numpy scalar, a mapping (stored as a JSON struct), or a
                sequence of numbers or of strings (a double or string array).
            tags: optional str -> str tags; None and {} are the same series.

        Raises:
            SeriesTypeError: the value's type differs from the series' pinned type.
            ValueError / TypeError: a bad channel, tags, timestamp or value (``ElementError``
                names the field).
            StreamClosedError: the stream is not open.
            BackpressureError: the buffer is full and ``block_on_full`` is off.
        """
        # Sender.write's steps inlined: callers make one call a point, so each call saved counts.
        c = self._sender
        staged = c.staged
        lock = c.lock
        lock.acquire()  # rather than `with`: cheaper on this path
        try:
            if c.gate:
                c.check_open()
                if c.full:
                    c.wait_room()
            held = 0 if tags else staged.add_fast(channel, timestamp, value)
            if 1 < held < c.settle_singles:
                # Not the first point held: the call that staged the first set first_buffered_at
                # (only a cut clears it, and a cut takes every point held), so no more to do.
                return
            if not held:
                staged.add_point(channel, timestamp, value, tags)
            if c.first_buffered_at is None:
                c.first_buffered_at = c.clock()
            if held:
                if held < c.settle_singles:
                    return
            elif not staged.singles_due(c.settle_singles) and staged.nbytes < c.max_bytes:
                return
            reqs = c.settled()
        finally:
            lock.release()
        if reqs:
            c.submit(reqs)

    def enqueue_batch(self, channel: str, timestamps: Any, values: Any, tags: Mapping[str, str] | None = None) -> None:
        """Write many points of one series.

        Args:
            channel: channel name.
            timestamps: int64 ns / datetime64 array, or a sequence of any accepted timestamp.
            values: a 1-D numpy array or sequence of one type; a 2-D float array (or a sequence of
                float sequences) is a double-array series, one row per timestamp; a sequence of
                str sequences is a string-array series; a sequence of mappings is a struct series.
            tags: optional tags.

        Raises:
            ValueError: lengths differ, or a bad channel/timestamp.
            SeriesTypeError / TypeError: a value type conflict or an unsupported value.
        """
        self._sender.write(self._sender.staged.series_batches, channel, timestamps, values, tags)

    def enqueue_from_dict(
        self, timestamp: Any, channel_values: Mapping[str, Any], tags: Mapping[str, str] | None = None
    ) -> None:
        """Write one wide record: many channels at one timestamp (``None`` values are gaps).

        Records whose channels and value types repeat are buffered as rows and transposed once.

        Raises:
            SeriesTypeError / TypeError / ValueError: a value conflicts or is unsupported;
                nothing from the record is buffered.
        """
        self._sender.write(self._sender.staged.add_record, timestamp, channel_values, tags)

    def enqueue_float_array(
        self, channel: str, timestamp: Any, values: Any, tags: Mapping[str, str] | None = None
    ) -> None:
        """Write one double-array value (a 1-D sequence of numbers)."""
        # A list of floats packed in one pass: float_row's checks cost more than the write.
        row = pack_doubles(values)
        if row is None:
            row = _values.float_row(channel, values)
        self._sender.write_typed(channel, timestamp, _DOUBLE_ARRAY, row, tags)

    def enqueue_string_array(
        self, channel: str, timestamp: Any, values: Sequence[str], tags: Mapping[str, str] | None = None
    ) -> None:
        """Write one string-array value."""
        row = _values.string_row(channel, values)
        self._sender.write_typed(channel, timestamp, _STRING_ARRAY, row, tags)

    def enqueue_struct(
        self, channel: str, timestamp: Any, value: Mapping[str, Any], tags: Mapping[str, str] | None = None
    ) -> None:
        """Write one struct value, stored as compact JSON text with sorted keys."""
        text = _values.struct_json(channel, value)
        self._sender.write_typed(channel, timestamp, _STRUCT, text, tags)

    def enqueue_table(
        self, table: Any, timestamp_column: str = "timestamp", tags: Mapping[str, str] | None = None
    ) -> None:
        """Write a table: one channel per column besides the timestamps.

        A pyarrow ``Table`` or ``RecordBatch``, a pandas or polars DataFrame, a pandas Series
        (one channel, named by its name, timestamped by its DatetimeIndex) or anything with
        ``__arrow_c_stream__``. A pandas DataFrame without a ``timestamp_column`` column is
        timestamped by its index (a DatetimeIndex, or one named ``timestamp_column``).

        A missing value is no point: Arrow/polars nulls, and what pandas calls missing (``NA``,
        ``NaT``, ``None``, ``NaN`` in a numpy float column; ``df.isna()``). Every other value
        lands exactly: nullable ``Int64`` to the last bit, categoricals as their values, pandas
        and polars strings. Timestamps: an Arrow timestamp with a tz (a tz-aware pandas column or
        index, to the ns) or int64 ns; naive ones only with the stream's ``timezone``.

        Raises:
            ValueError: no timestamps, missing or naive ones, a column name that is not a str.
            SeriesTypeError / TypeError: a column conflicts with its series or has no Nominal type;
                nothing from the table is buffered.
        """
        self._sender.write(self._sender.staged.table_batches, table, timestamp_column, tags)

    # -- delivery and lifecycle ------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> DeliveryReport:
        """Send everything buffered and wait until every point enqueued so far has ended.

        Returns:
            The cumulative :class:`DeliveryReport`.

        Raises:
            DeliveryError: points failed since the last error was raised, or ``timeout`` passed
                (the error names how many points of which series, and why).
        """
        return self._sender.flush(timeout)

    def close(self, timeout: float | None = None) -> DeliveryReport:
        """Stop writes, drain, close an owned target. Idempotent; bounded by ``timeout``.

        ``timeout`` defaults to ``UploadSettings.close_timeout``. Requests still unacknowledged
        when it passes are written off as failed (and reported), never waited on longer.

        Raises:
            DeliveryError: points were not delivered (state becomes FAILED).
        """
        sender = self._sender
        if timeout is None:
            timeout = sender.upload.close_timeout
        try:
            report = sender.close(timeout)
        except DeliveryError as exc:
            if sender.take_interrupt():
                raise KeyboardInterrupt from exc
            raise
        finally:
            self._finalizer.detach()
        if sender.take_interrupt():
            raise KeyboardInterrupt  # pressed while this close drained; it has now drained
        return report

    def __enter__(self) -> NominalStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except DeliveryError as delivery:
            _log.error("while handling %s: %s", exc_type.__name__ if exc_type else "?", delivery)
            exc.add_note(f"beam_nominal: also, {delivery}")


class _CloseOnlyFallback:
    """A FallbackTarget whose close() closes only the fallback (the primary belongs to the caller)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def send(self, request: Request, timeout: float | None = None) -> None:
        self._inner.send(request, timeout)

    def send_fallback(self, request: Request, timeout: float | None = None, *, reason: Any = None) -> None:
        self._inner.send_fallback(request, timeout, reason=reason)

    def probe(self, dataset_rid: str, timeout: float) -> None:
        self._inner.probe(dataset_rid, timeout)

    @property
    def fallback_location(self) -> str:
        return str(self._inner.fallback_location)

    def close(self) -> None:
        self._inner.fallback.close()

    def __repr__(self) -> str:
        return repr(self._inner)


def _make_target(
    target: Any, dataset_rid: str, token: Any, ca_file: Any, format: str | None, fallback_to_row: bool
) -> tuple[Target, bool]:
    from beam_nominal.targets._factory import http_options, target_from_url

    extra: dict[str, Any] = {"ca_file": ca_file} if ca_file is not None else {}
    made = target_from_url(
        target, dataset_rid=dataset_rid, token=token, **extra, **http_options(target, format, fallback_to_row)
    )
    return made, made is not target


def _request_size(batch: BatchSettings, upload: UploadSettings, given: frozenset[str], target: Any) -> BatchSettings:
    """The request size: a target without a message-size limit (a file) may take bigger
    requests, which amortise its per-series costs; one behind a small limit may ask for smaller
    ones (``preferred_request_bytes``). An explicit ``max_request_bytes`` keyword wins."""
    preferred = getattr(target, "preferred_request_bytes", None)
    if isinstance(preferred, int) and "max_request_bytes" not in given:
        size = max(1024, min(preferred, upload.max_buffered_bytes // 2))
        return dataclasses.replace(batch, max_request_bytes=size)
    return batch


def bundle_sender(
    target: Target,
    uploader: Uploader,
    dataset_rid: str,
    settings: StreamSettings,
    staged: PointBatch,
    source_name: str | None = None,
) -> Sender:
    """A bundle's sender over a DoFn instance's ``target`` and ``uploader`` (both made in
    ``setup``, closed in ``teardown``, never by the sender), staging into the instance's
    ``staged`` batch, which the DoFn appends each element to (its types are checked there once).

    No timer (request boundaries depend only on the bundle's data, so a retried bundle re-cuts
    byte-identical requests), no thread, no signal handler: the runner owns the worker process.
    """
    batch = _request_size(settings.batch, settings.upload, settings.given, target)
    return Sender(target, uploader, dataset_rid, batch, settings.upload, staged=staged, source_name=source_name)
