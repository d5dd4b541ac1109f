# mypy: disable-error-code="no-untyped-call"
"""The DoFns behind WriteToNominal. Private: the public face is :mod:`beam_nominal.beam.transform`.

Life cycle (Beam reuses one instance for many bundles, one instance per concurrent bundle):

* ``__init__``: stores configuration only; the instance is pickled to workers.
* ``setup``: resolves the token and opens the target, shared by every instance of the process
  that has the same target and token (one gRPC channel per process).
* ``start_bundle``: a fresh NominalStream without timer (``linger=None``), so request cut points
  depend only on the bundle's data and a retried bundle re-sends byte-identical requests, which
  carry the same idempotency keys.
* ``process``: adapt and enqueue; the stream cuts requests on its budget, so memory stays bounded
  whatever the bundle size. Bad elements go to the ``failed`` output at once.
* ``finish_bundle``: returns only once every point of the bundle is acknowledged; otherwise raises
  so the runner retries the bundle.
* ``teardown``: releases the target (best effort; never holds data).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_nominal.beam._elements import PENDING_POINTS, ElementWriter, FailedElement, SeriesChunk
from beam_nominal.beam._metrics import MeasuredTarget, SinkMetrics

_LOG = logging.getLogger(__name__)

FAILED_TAG = "failed"

__all__ = [
    "FAILED_TAG",
    "BatchingWriteDoFn",
    "SinkConfig",
    "ToChunksDoFn",
    "WriteChunksDoFn",
    "WriteDoFn",
    "resolve_token",
]


@dataclasses.dataclass(frozen=True)
class SinkConfig:
    """Everything a worker needs, and nothing that cannot be pickled (no channel, no client).

    ``token`` may be a string, a zero-argument callable or a Beam ``Secret``; it is resolved in
    ``setup`` on the worker and kept out of ``repr``.
    """

    target: Any
    dataset_rid: str
    token: Any = dataclasses.field(default=None, repr=False)
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    timestamp_field: str = "timestamp"
    tags: Mapping[str, str] | None = None
    source_name: str | None = None
    #: Keywords for the target a URL names (``format``, ``fallback_to_row`` for HTTP).
    target_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def resolve_token(token: Any) -> str | Callable[[], str] | None:
    """Turn the configured token into what a target takes, on the worker.

    A Beam ``Secret`` is read here (so its value never travels in the pipeline graph); a callable
    is passed on, so the target can call it for fresh tokens.
    """
    if token is None or isinstance(token, str):
        return token
    get_bytes = getattr(token, "get_secret_bytes", None)
    if callable(get_bytes):
        raw = get_bytes()
        return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    if callable(token):
        return token  # type: ignore[no-any-return]
    raise TypeError(f"token must be a str, a callable or an apache_beam Secret, got {type(token).__name__}")


_avro_counter = itertools.count()


def _open_target(
    target: Any, token: str | Callable[[], str] | None, dataset_rid: str, options: Mapping[str, Any]
) -> Any:
    if callable(target) and not isinstance(target, str):
        return target()
    if not isinstance(target, str):
        raise TypeError(f"target must be a URL/path string or a zero-argument factory, got {type(target).__name__}")
    from beam_nominal.targets import target_from_url

    if target.endswith(".avro"):
        # One file per DoFn instance: concurrent writers cannot share an Avro container file.
        stem = target.removeprefix("file://")[: -len(".avro")]
        path = f"{stem}-{os.getpid()}-{next(_avro_counter)}-{uuid.uuid4().hex[:8]}.avro"
        return target_from_url(path, dataset_rid=dataset_rid)
    return target_from_url(target, dataset_rid=dataset_rid, token=token, **options)


class _SharedTargets:
    """Targets shared by every DoFn instance of a process, reference-counted.

    Only string tokens and URL targets are shared (their identity is their value); a callable
    token or a target factory gets its own target per instance.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Any, list[Any]] = {}

    def acquire(self, config: SinkConfig) -> tuple[Any, Any]:
        token = resolve_token(config.token)
        shareable = isinstance(config.target, str) and (token is None or isinstance(token, str))
        if not shareable:
            return _open_target(config.target, token, config.dataset_rid, config.target_options), None
        # Avro files are per writer: two instances appending to one file would interleave blocks.
        if config.target.endswith(".avro"):
            return _open_target(config.target, token, config.dataset_rid, config.target_options), None
        # An HTTP target is per dataset (the rid is in its URL); options change what it sends.
        key = (config.target, hash(token), config.dataset_rid, tuple(sorted(config.target_options.items())))
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = [_open_target(config.target, token, config.dataset_rid, config.target_options), 0]
                self._entries[key] = entry
            entry[1] += 1
            return entry[0], key

    def release(self, target: Any, key: Any) -> None:
        if key is None:
            target.close()
            return
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._entries[key]
        entry[0].close()


SHARED_TARGETS = _SharedTargets()


def _describe(element: Any) -> str:
    text = repr(element)
    return text if len(text) <= 200 else text[:197] + "..."


class _StreamDoFn(beam.DoFn):
    def __init__(self, config: SinkConfig) -> None:
        super().__init__()
        self._config = config
        self._target: Any = None
        self._target_key: Any = None
        self._measured: MeasuredTarget = MeasuredTarget(None)
        self._stream: Any = None
        self._writer: ElementWriter | None = None
        self._write: Any = None
        self._metrics: SinkMetrics | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Config only: a half-used instance must never ship a live stream or channel.
        return {"_config": self._config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_config"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target={self._config.target!r}, dataset_rid={self._config.dataset_rid!r})"

    def display_data(self) -> dict[str, Any]:
        target = self._config.target
        shown = target if isinstance(target, str) else getattr(target, "__qualname__", type(target).__name__)
        return {"target": shown, "dataset_rid": self._config.dataset_rid}

    def setup(self) -> None:
        self._target, self._target_key = SHARED_TARGETS.acquire(self._config)
        self._measured = MeasuredTarget(self._target)
        self._metrics = SinkMetrics()

    def start_bundle(self) -> None:
        from beam_nominal.stream import NominalStream

        settings = dict(self._config.settings)
        # Request boundaries must depend only on the data (see the module docstring).
        settings["linger"] = None
        self._measured.take_samples()
        self._stream = NominalStream(
            self._measured,
            dataset_rid=self._config.dataset_rid,
            source_name=self._config.source_name,
            **settings,
        )
        self._writer = ElementWriter(self._stream, timestamp_field=self._config.timestamp_field, tags=self._config.tags)
        self._write = self._writer.write

    def _fail(self, element: Any, exc: Exception) -> list[TaggedOutput[str, Any]]:
        assert self._metrics is not None
        self._metrics.failed_elements.inc()
        reason = f"element {_describe(element)}: {exc}"
        return [TaggedOutput(FAILED_TAG, FailedElement(element, type(exc).__name__, reason))]

    def finish_bundle(self) -> None:
        from beam_nominal.errors import DeliveryError

        stream, writer = self._stream, self._writer
        self._stream = self._writer = None
        if stream is None or writer is None:
            return
        try:
            writer.drain()
            report = stream.flush()
        except DeliveryError as exc:
            _abandon(stream)
            # The runner retries the bundle; requests already acknowledged are re-sent with the
            # same idempotency keys, so a key-recording server stores them once.
            raise DeliveryError(
                f"WriteToNominal: bundle not delivered to {self._config.target!r} "
                f"(dataset {self._config.dataset_rid!r}); failing the bundle so the runner can retry it: {exc}"
            ) from exc
        except BaseException:
            _abandon(stream)
            raise
        stream.close()
        assert self._metrics is not None
        self._metrics.record(report, self._measured.take_samples())

    def teardown(self) -> None:
        if self._stream is not None:
            _abandon(self._stream)
            self._stream = None
        if self._target is not None:
            target, key = self._target, self._target_key
            self._target = self._target_key = None
            try:
                SHARED_TARGETS.release(target, key)
            except Exception:
                _LOG.warning("WriteToNominal: closing the target failed", exc_info=True)


def _abandon(stream: Any) -> None:
    """Close a stream whose bundle failed, without waiting on undeliverable data."""
    try:
        stream.close(timeout=0)
    except Exception:
        # The bundle already failed with the reason that matters; this one would hide it.
        _LOG.debug("WriteToNominal: closing a failed bundle's stream raised", exc_info=True)


class WriteDoFn(_StreamDoFn):
    """Writes elements of any supported shape; bad ones go to the ``failed`` output."""

    def process(self, element: Any) -> Iterable[TaggedOutput[str, Any]]:
        # Globally windowed input (every batch pipeline unless it windows) goes to
        # BatchingWriteDoFn, so this path need not shave single Python calls off each point.
        try:
            self._write(element)
        except (TypeError, ValueError, KeyError) as exc:
            return self._fail(element, exc)
        return ()


class _Raise:
    """An output that raises ``exc`` when Beam iterates it: how the points generator fails a
    bundle without the exception ending the generator (see :class:`BatchingWriteDoFn`)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __iter__(self) -> Any:
        raise self.exc


def _outputs(first: Any, second: Any) -> Any:
    """Outputs of two writes as one: a list, or the :class:`_Raise` of the first that failed."""
    if type(first) is _Raise:
        return first
    if type(second) is _Raise or not first:
        return second
    return [*first, *second]


#: Sent into the points generator: write what it holds (end of bundle) or drop it (start).
_END_OF_BUNDLE = object()
_START_OF_BUNDLE = object()


class BatchingWriteDoFn(_StreamDoFn):
    """WriteDoFn for a globally windowed input: single points are checked and converted in batches.

    ``process`` is the ``send`` method of a generator (:meth:`_points`), set on the instance the
    way Beam's own ``CallableWrapperDoFn`` (every ``Map`` and ``FlatMap``) sets a builtin as
    ``process``, with :meth:`_inspect_process` giving its argument. Resuming a suspended
    generator costs less than entering a new frame: with the countdown below, the sink spends
    2,696 instructions per point where it spent 3,325 with a ``process`` function
    (``benchmarks/callgrind_points.py``). The generator never dies: whatever its writes raise is
    returned as an output that raises it when Beam iterates it (:class:`_Raise`), so the bundle
    fails and the next bundle finds ``process`` working.

    A ``(channel, int ns, value)`` tuple costs one ``list.extend`` there: its three fields go to
    one flat list (ints, floats and strs are not tracked by the garbage collector; thousands of
    kept tuples would be, at a collection every 700). Every ``PENDING_POINTS`` points (and before
    any other element, and in ``finish_bundle``) go to :meth:`ElementWriter.write_points`
    together. Batch boundaries are element counts, so the stream's calls and cut points still
    depend only on the bundle's data. A bad point is reported when its batch is written, possibly
    thousands of elements later; it is emitted as a ``WindowedValue`` in the global window with
    ``MIN_TIMESTAMP`` (its own timestamp is not known without a per-element timestamp parameter,
    which would slow every element down). Inputs in other windows use :class:`WriteDoFn`, which
    reports every element from its own ``process``.
    """

    def __init__(self, config: SinkConfig) -> None:
        super().__init__(config)
        #: The points collected and not yet written (the generator's list, for tests).
        self._flat: list[Any] = []
        points = self._points()
        next(points)
        self._send = points.send
        self.process = points.send  # type: ignore[method-assign]

    def _inspect_process(self) -> tuple[list[str], list[Any]]:
        # Beam's DoFnSignature asks this for process's arguments (a builtin has no signature).
        return ["element"], []

    def _points(self) -> Any:
        # Builtins as locals: a local load is cheaper than a global one, once per point.
        repeat, type_, tuple_, int_ = itertools.repeat, type, tuple, int
        # What writing a full batch gave: its points went in with earlier elements, so it is
        # returned with the next element (or at the end of the bundle).
        carry: Any = ()
        element = yield ()
        while True:
            flat: list[Any] = []
            self._flat = flat
            # The loop counts the batch's points down: iterating allocates nothing, where len()
            # of the list would make a new int object per point.
            for _ in repeat(None, PENDING_POINTS):
                if type_(element) is tuple_:
                    # Unpacking inside try is cheaper than a len() call, and try costs nothing
                    # when no exception is raised.
                    try:
                        _, ts, _ = element
                    except ValueError:
                        pass
                    else:
                        if type_(ts) is int_:
                            flat.extend(element)
                            element = yield carry
                            carry = ()
                            continue
                # Anything else: the points collected so far go first, so each series keeps the
                # order of its elements.
                if element is _START_OF_BUNDLE:
                    out: Any = ()  # what a failed bundle left is not this bundle's
                else:
                    out = _outputs(carry, self._write_flat(flat) if flat else [])
                    if element is not _END_OF_BUNDLE and type(out) is list:
                        out += self._write_element(element)
                carry = ()
                element = yield out
                break
            else:
                carry = _outputs(carry, self._write_flat(flat))

    def _write_flat(self, flat: list[Any]) -> Any:
        try:
            assert self._writer is not None and self._metrics is not None
            out: list[TaggedOutput[str, Any]] = []
            for element, exc in self._writer.write_points(flat[0::3], flat[1::3], flat[2::3]):
                self._metrics.failed_elements.inc()
                reason = f"element {_describe(element)}: {exc}"
                failed = FailedElement(element, type(exc).__name__, reason)
                out.append(TaggedOutput(FAILED_TAG, WindowedValue(failed, MIN_TIMESTAMP, (GlobalWindow(),))))
            return out
        except BaseException as exc:  # raised when Beam takes the output (see _Raise)
            return _Raise(exc)

    def _write_element(self, element: Any) -> Any:
        try:
            self._write(element)
        except (TypeError, ValueError, KeyError) as exc:
            return self._fail(element, exc)
        except BaseException as exc:
            return _Raise(exc)
        return []

    def start_bundle(self) -> None:
        super().start_bundle()
        self._send(_START_OF_BUNDLE)

    def finish_bundle(self) -> Iterable[TaggedOutput[str, Any]] | None:  # type: ignore[override]
        failed = self._send(_END_OF_BUNDLE) if self._writer is not None else []
        if type(failed) is _Raise:
            failed = list(failed)  # raises
        super().finish_bundle()
        return failed


class WriteChunksDoFn(_StreamDoFn):
    """Writes batches of series chunks made by cross-bundle batching: ``(sharded_key, [chunk])``."""

    def process(self, element: tuple[Any, Iterable[SeriesChunk]]) -> Iterable[TaggedOutput[str, Any]]:
        writer = self._writer
        assert writer is not None
        failed: list[TaggedOutput[str, Any]] = []
        for chunk in element[1]:
            try:
                writer.series(chunk.channel, chunk.timestamps, chunk.values, dict(chunk.tags) or None)
            except (TypeError, ValueError, KeyError) as exc:
                failed.extend(self._fail(chunk, exc))
        return failed


class ToChunksDoFn(beam.DoFn):
    """Reads elements into per-series chunks for cross-bundle batching; checks shapes and timestamps."""

    def __init__(self, config: SinkConfig) -> None:
        super().__init__()
        self._config = config
        self._writer: ElementWriter | None = None
        self._failed_counter: Any = None

    def setup(self) -> None:
        self._writer = ElementWriter(
            _NullStream(), timestamp_field=self._config.timestamp_field, tags=self._config.tags
        )
        self._failed_counter = SinkMetrics().failed_elements

    def process(self, element: Any) -> Iterable[Any]:
        assert self._writer is not None
        try:
            chunks = self._writer.chunks(element)
        except (TypeError, ValueError, KeyError) as exc:
            self._failed_counter.inc()
            reason = f"element {_describe(element)}: {exc}"
            return [TaggedOutput(FAILED_TAG, FailedElement(element, type(exc).__name__, reason))]
        return [(f"{c.channel}\x00{c.tags!r}", c) for c in chunks]


class _NullStream:
    """Placeholder; :meth:`ElementWriter.chunks` swaps in a collector for each element."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("ElementWriter.chunks must be used with a _NullStream")
