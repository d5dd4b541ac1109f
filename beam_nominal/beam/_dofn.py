# mypy: disable-error-code="no-untyped-call"
"""The DoFns behind WriteToNominal. Private: the public face is :mod:`beam_nominal.beam.transform`.

Life cycle (Beam reuses one instance for many bundles, one instance per concurrent bundle):

* ``__init__``: stores configuration only; the instance is pickled to workers.
* ``setup``: resolves the token and opens the target, shared by every instance of the process
  that has the same target and token (one gRPC channel or HTTP pool per process), and the
  instance's ``Uploader`` (its upload threads): what costs, once per instance.
* ``start_bundle``: a fresh ``Sender`` over them (``stream.bundle_sender``): single-threaded,
  no timer, no thread, no signal handler, with its own buffer, request sequence and delivery
  report, so request cut points depend only on the bundle's data and a retried bundle re-sends
  byte-identical requests, which carry the same idempotency keys. It stages into the
  instance's ``PointBatch``, so an element's types are checked once, where it is read.
* ``process``: an ordinary method, compiled (``_fastpath.c``; ``_PythonProcess`` where it is not
  built). A plain point of a known double series is appended in the call itself; any other
  element, by its reader (``_slow``), to the bundle's ``PointBatch``, which checks it whole; a
  bad element is returned at once, as this call's only output, so Beam gives the
  ``FailedElement`` the element's own timestamp and windows (and runners that drop what
  ``finish_bundle`` outputs, such as Dask's, still see it). Every
  ``HANDOVER_POINTS`` points the sender moves the batch into its buffer and cuts requests on
  its budget (blocking while it is full), so memory stays bounded whatever the bundle size.
* ``finish_bundle``: hands the rest over and returns only once every point of the bundle is
  acknowledged; otherwise raises so the runner retries the bundle. The one exception: series
  the target refused for good and named (a value type conflicting with what it stores) while it
  took the rest; a retry cannot help them, so each is output as a ``FailedElement`` (in the
  global window: its points came from many elements) and the bundle succeeds. With an Avro
  prefix target it also outputs the files it made visible (``WrittenFile``, global window).
* ``teardown``: releases the target and the threads (best effort; never holds data).

The DoFn's only output is ``failed``, as its main output: DaskRunner hands each consumer of a
tagged output every output of the ParDo.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import Lineage
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal._pipeline.uploader import Uploader
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.beam._elements import (
    ELEMENT_ERRORS,
    FailedElement,
    Reader,
    failed,
    is_point_fields,
    is_row,
    reader_for,
)
from beam_nominal.beam._metrics import MeasuredTarget, SinkMetrics
from beam_nominal.beam._rows import Field, RowOptions
from beam_nominal.settings import StreamSettings, resolve
from beam_nominal.stream import Sender, bundle_sender
from beam_nominal.targets.avro_prefix import is_prefix
from beam_nominal.targets.base import FIRST_CONTACT_TIMEOUT, first_contact

_LOG = logging.getLogger(__name__)

__all__ = [
    "HANDOVER_BYTES",
    "HANDOVER_POINTS",
    "SinkConfig",
    "ToSeriesBatchesDoFn",
    "WriteSeriesBatchesDoFn",
    "WriteDoFn",
    "batch_key",
    "report_lineage",
    "resolve_token",
]

#: Single floats a bundle's batch collects before the sender takes them into its buffer, and the
#: estimated bytes of anything else (text, arrays, rows, columns): a request's worth.
HANDOVER_POINTS = 32768
HANDOVER_BYTES = 4 * 1024 * 1024


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
    #: The zone naive timestamps are readings in (None: refused); checked by WriteToNominal.
    timezone: str | None = None
    tags: Mapping[str, str] | None = None
    source_name: str | None = None
    #: Keywords for the target a URL names (``format``, ``fallback_to_row`` for HTTP).
    target_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: How wide rows become points (_rows.py), and the input's schema where Beam knows it.
    rows: RowOptions | None = None
    schema: tuple[Field, ...] | None = None


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
        # Avro files are per writer: two instances appending to one file would interleave blocks,
        # and a prefix target holds the files of its instance's current bundle.
        if config.target.endswith(".avro") or is_prefix(config.target):
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


def report_lineage(target: Any, dataset_rid: str) -> Callable[[], None]:
    """What names, in Beam's sink lineage, where a bundle's points went; as Beam's own sinks do.

    A URL target is ``nominal:`<scheme://host[:port]/path>`.`<dataset rid>``` (credentials, query
    and fragment dropped); an Avro target is files, reported like Beam's file sinks report theirs,
    by the glob of the files its writers create. A target factory is opaque: nothing is reported.
    """
    if not isinstance(target, str):
        return lambda: None
    if is_prefix(target):
        # A prefix on any Beam filesystem (a local one as an absolute path), like a file sink's.
        prefix = target.removeprefix("file://")
        if "://" not in prefix:
            prefix = os.path.abspath(prefix) + "/"
        return lambda: FileSystems.report_sink_lineage(prefix + "nominal-*.avro")
    if target.endswith(".avro"):
        files = os.path.abspath(target.removeprefix("file://")[: -len(".avro")]) + "-*.avro"
        return lambda: FileSystems.report_sink_lineage(files)
    url = urllib.parse.urlsplit(target)
    endpoint = f"{url.scheme}://{url.netloc.rpartition('@')[2]}{url.path.rstrip('/')}"
    segments = (Lineage.wrap_segment(endpoint), Lineage.wrap_segment(dataset_rid))
    return lambda: Lineage.sinks().add("nominal", *segments)


class _Writer(Protocol):
    _batch: PointBatch
    _fast_limit: int

    def _slow(self, element: Any) -> Iterable[FailedElement]: ...

    def _handover(self) -> None: ...


class _PythonProcess:
    """``WriteDoFn.process`` where the compiled one (``_fastpath.c``) was not built, as on a
    machine without a C compiler: the same points, with a Python call more a point."""

    def process(self: _Writer, element: Any) -> Iterable[FailedElement]:
        # A tuple is the commonest plain point; other shapes' readers call add_fast themselves.
        if type(element) is tuple and len(element) == 3:
            held = self._batch.add_fast(*element)
            if held:
                if held >= self._fast_limit:
                    self._handover()
                return ()
        return self._slow(element)

    def _bind_fast(self, *what: Any) -> None:
        pass  # this process reads the instance's attributes


if TYPE_CHECKING:
    _ProcessBase = _PythonProcess
else:
    try:
        from beam_nominal._pipeline._fastpath import FastProcess as _ProcessBase
    except ImportError:
        _ProcessBase = _PythonProcess


class WriteDoFn(_ProcessBase, beam.DoFn):
    """Writes elements of any supported shape; outputs the ones it cannot write (``FailedElement``)."""

    def __init__(self, config: SinkConfig) -> None:
        super().__init__()
        self._config = config
        self._target: Any = None
        self._target_key: Any = None
        self._measured: MeasuredTarget = MeasuredTarget(None)
        self._uploader: Uploader | None = None
        self._settings: StreamSettings | None = None
        self._metrics: SinkMetrics | None = None
        self._lineage: Callable[[], None] = lambda: None
        self._sender: Sender | None = None
        self._batch = PointBatch(config.tags, config.timezone)
        self._readers: dict[type, Reader] = {}
        #: NamedTuple classes whose instances are (channel, timestamp, value) points as they are.
        self._points: set[type] = set()
        #: beam.Row classes seen (a Row's fields are its ``vars``).
        self._rows: set[type] = set()
        #: config.timestamp_field, one attribute lookup away for process's hot path.
        self._timestamp_field = config.timestamp_field
        #: Single points of ``batch.doubles``, or of its flat list, at which the batch is handed
        #: over (``PointBatch.singles_due``; the fast paths read only ``doubles``).
        self._fast_limit = HANDOVER_POINTS
        self._rebind()

    def __reduce__(self) -> tuple[Any, ...]:
        # Config only: a half-used instance must never ship a live sender or channel, so a copy
        # is a new instance of its configuration. A reduce rather than __getstate__: copyreg's
        # default (pickle's protocols 0 and 1) cannot copy the compiled base class FastProcess.
        return (type(self), (self._config,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target={self._config.target!r}, dataset_rid={self._config.dataset_rid!r})"

    def display_data(self) -> dict[str, Any]:
        target = self._config.target
        shown = target if isinstance(target, str) else getattr(target, "__qualname__", type(target).__name__)
        return {"target": shown, "dataset_rid": self._config.dataset_rid}

    def setup(self) -> None:
        self._target, self._target_key = SHARED_TARGETS.acquire(self._config)
        settings = resolve(owner="WriteToNominal", **self._config.settings)
        try:
            # A wrong URL, host or token fails the worker's setup in seconds, naming the target,
            # rather than each bundle after its whole retry budget.
            first_contact(
                self._target, self._config.dataset_rid, min(FIRST_CONTACT_TIMEOUT, settings.upload.attempt_timeout)
            )
        except BaseException:
            SHARED_TARGETS.release(self._target, self._target_key)
            self._target = self._target_key = None
            raise
        self._measured = MeasuredTarget(self._target)
        self._metrics = SinkMetrics()
        self._lineage = report_lineage(self._config.target, self._config.dataset_rid)
        self._settings = settings
        self._uploader = Uploader(self._measured, settings.upload, settings.retry)

    def start_bundle(self) -> None:
        assert self._uploader is not None and self._settings is not None
        if self._sender is not None:
            # A bundle that never finished (its process raised and the runner kept the instance):
            # end it before the batch and the target's bundle state are reset under it.
            _abandon(self._sender)
            self._sender = None
            _bundle_hook(self._target, "abort_bundle")
        self._measured.take_samples()
        self._batch.clear()
        _bundle_hook(self._target, "begin_bundle")
        self._sender = bundle_sender(
            self._measured,
            self._uploader,
            self._config.dataset_rid,
            self._settings,
            self._batch,
            source_name=self._config.source_name,
        )

    def _slow(self, element: Any) -> Iterable[FailedElement]:
        """Any element but a plain point of a known double series (which ``process`` appends
        itself): read by its shape's reader, which checks it whole."""
        batch = self._batch
        try:
            read = self._readers.get(type(element)) or self._reader(element)
            read(element)
        except ELEMENT_ERRORS as exc:
            return self._fail(failed(element, exc))
        if batch.singles_due(self._fast_limit) or batch.nbytes >= HANDOVER_BYTES:
            self._handover()
        return ()

    def _handover(self) -> None:
        """What the batch holds into the sender's buffer, cutting what is due; its errors
        fail the bundle."""
        assert self._sender is not None
        self._sender.handover()

    def _rebind(self) -> None:
        """Tell the compiled ``process`` what it reads (the Python one reads the attributes), now
        and whenever the batch rebinds its float_codes map or its double points."""
        self._batch.on_rebind = self._rebind
        self._bind_fast(self._batch, self._points, self._rows, self._timestamp_field, self._fast_limit)

    def _reader(self, element: Any) -> Reader:
        cls = type(element)
        config = self._config
        read = reader_for(element, self._batch, self._timestamp_field, config.rows, config.schema)
        self._readers[cls] = read
        if issubclass(cls, tuple) and is_point_fields(getattr(cls, "_fields", ()), self._timestamp_field):
            self._points.add(cls)  # its instances are points as they are (see process)
        elif is_row(element):
            self._rows.add(cls)
        return read

    def _fail(self, failure: FailedElement) -> list[FailedElement]:
        assert self._metrics is not None
        self._metrics.failed_elements.inc()
        return [failure]

    def finish_bundle(self) -> list[WindowedValue] | None:
        from beam_nominal.errors import DeliveryError

        sender, self._sender = self._sender, None
        if sender is None:
            return None
        rejected: list[FailedElement] = []
        try:
            sender.handover()  # the rest, under the budget as every hand-over
            try:
                report = sender.flush(None)
            except DeliveryError as exc:
                if not (exc.rejected and exc.rejected == exc.undelivered):
                    raise
                # The target refused these series for good (their type conflicts with what it
                # stores) and took everything else: retrying the bundle cannot help, so they go
                # to the failed output, once per series.
                report = exc.report
                rejected = [self._rejected(k, n, exc.reasons.get(k, "")) for k, n in exc.rejected.items()]
            # A file target makes the bundle's files visible only now that all of it is written.
            written = _bundle_hook(self._target, "commit_bundle") or []
        except DeliveryError as exc:
            _abandon(sender)
            _bundle_hook(self._target, "abort_bundle")
            # The runner retries the bundle; requests already acknowledged are re-sent with the
            # same idempotency keys, so a key-recording server stores them once.
            raise DeliveryError(
                f"WriteToNominal: bundle not delivered to {self._config.target!r} "
                f"(dataset {self._config.dataset_rid!r}); failing the bundle so the runner can retry it: {exc}"
            ) from exc
        except BaseException:
            _abandon(sender)
            _bundle_hook(self._target, "abort_bundle")
            raise
        sender.close(None)
        assert self._metrics is not None
        self._metrics.record(report, self._measured.take_samples())
        if rejected:
            self._metrics.failed_elements.inc(len(rejected))
        if report.points:
            self._lineage()
        # Refused series and files written (WrittenFile) come out with the failed elements;
        # WriteToNominal splits them.
        return [GlobalWindows.windowed_value(v) for v in [*rejected, *written]] or None

    def _rejected(self, key: Any, points: int, reason: str) -> FailedElement:
        return FailedElement(
            {"channel": key.channel, "tags": dict(key.tags), "points": points},
            "RejectedSeries",
            f"{points} points of series {key.describe()} were refused by {self._config.target!r} "
            f"(dataset {self._config.dataset_rid!r}) for good: {reason}",
        )

    def teardown(self) -> None:
        if self._sender is not None:
            _abandon(self._sender)
            self._sender = None
        if self._uploader is not None:
            self._uploader.shutdown()
            self._uploader = None
        if self._target is not None:
            target, key = self._target, self._target_key
            self._target = self._target_key = None
            try:
                SHARED_TARGETS.release(target, key)
            except Exception:
                _LOG.warning("WriteToNominal: closing the target failed", exc_info=True)


def _bundle_hook(target: Any, name: str) -> Any:
    """Call a target's bundle hook (``begin_bundle``, ``commit_bundle``, ``abort_bundle``) if it has one."""
    hook = getattr(target, name, None)
    return hook() if callable(hook) else None


def _abandon(sender: Sender) -> None:
    """Close the sender of a bundle that failed, sending nothing more: its session stops first,
    so the final cut of what it buffered is written off, not sent (those bodies are not the ones
    the retried bundle sends, so a send now would store its points twice)."""
    try:
        sender.uploader.abandon()
        sender.close(0)
    except Exception:
        # The bundle already failed with the reason that matters; this one would hide it.
        _LOG.debug("WriteToNominal: closing a failed bundle's sender raised", exc_info=True)


def _batch_failed(batch: SeriesBatch, exc: Exception) -> FailedElement:
    ts = batch.timestamps
    described = {
        "channel": batch.key.channel,
        "tags": dict(batch.key.tags),
        "points": len(ts),
        "first_timestamp": int(ts[0]) if len(ts) else None,
        "last_timestamp": int(ts[-1]) if len(ts) else None,
    }
    return FailedElement(described, type(exc).__name__, f"{len(ts)} points of series {batch.key.describe()}: {exc}")


def batch_key(batch: SeriesBatch) -> str:
    """A deterministic string key for a batch's series (GroupIntoBatches needs a deterministic coder)."""
    return batch.key.describe()


class ToSeriesBatchesDoFn(beam.DoFn):
    """Reads elements into per-series batches for cross-bundle batching: ``(series, (batch,
    bytes))`` pairs (``PointBatch.take``'s pairs, keyed by series), or the ``FailedElement`` of
    an element it cannot read (tagged ``failed``)."""

    def __init__(self, config: SinkConfig) -> None:
        super().__init__()
        self._config = config
        self._batch = PointBatch(config.tags, config.timezone)
        self._readers: dict[type, Reader] = {}
        self._failed_counter: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_config": self._config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_config"])  # type: ignore[misc]

    def setup(self) -> None:
        self._failed_counter = SinkMetrics().failed_elements

    def process(self, element: Any) -> Iterable[Any]:
        batch = self._batch
        # One element per PointBatch: a series batch must not carry a type pinned by another element.
        batch.clear()
        try:
            config = self._config
            read = self._readers.get(type(element)) or reader_for(
                element, batch, config.timestamp_field, config.rows, config.schema
            )
            self._readers[type(element)] = read
            read(element)
        except ELEMENT_ERRORS as exc:
            self._failed_counter.inc()
            return [beam.pvalue.TaggedOutput(FAILED_TAG, failed(element, exc))]
        return [(batch_key(pair[0]), pair) for pair in batch.take()]


#: The tag of ToSeriesBatchesDoFn's failed output (it has two: the series batches and failed).
FAILED_TAG = "failed"


class WriteSeriesBatchesDoFn(WriteDoFn):
    """Writes the series batches grouped by cross-bundle batching: ``(sharded_key, [(batch,
    bytes)])``."""

    def process(self, element: tuple[Any, Iterable[tuple[SeriesBatch, int]]]) -> Iterable[FailedElement]:
        out: list[FailedElement] = []
        for batch, nbytes in element[1]:
            try:
                self._batch.add_batch(batch, nbytes)
            except ELEMENT_ERRORS as exc:
                # The batch's elements are gone (batching keeps columns, not elements): the
                # failure names its series and points, as a series the server refused does.
                out.extend(self._fail(_batch_failed(batch, exc)))
        if self._batch.nbytes >= HANDOVER_BYTES:
            self._handover()
        return out
