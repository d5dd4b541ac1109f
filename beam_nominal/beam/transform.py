# mypy: disable-error-code="no-untyped-call"
"""``WriteToNominal``: the Beam sink transform.

Example::

    import apache_beam as beam
    from beam_nominal.beam import WriteToNominal

    with beam.Pipeline() as p:
        points = p | beam.Create([("engine.rpm", "2024-05-01T12:00:00Z", 2400.0)])
        result = points | WriteToNominal("grpcs://api.example:443", dataset_rid="ri...", token=secret)
        result.failed | beam.Map(print)
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.pvalue import PCollection
from apache_beam.transforms.util import GroupIntoBatches
from apache_beam.transforms.window import FixedWindows, GlobalWindows, Sessions, SlidingWindows

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.beam._dofn import FAILED_TAG, SinkConfig, ToSeriesBatchesDoFn, WriteDoFn, WriteSeriesBatchesDoFn
from beam_nominal.beam._elements import SHAPE_FIELDS as _SHAPE_FIELDS
from beam_nominal.beam._rows import RowOptions, RowSchemaError, is_wide, layout, schema_fields
from beam_nominal.model import check_timezone
from beam_nominal.settings import resolve
from beam_nominal.targets._factory import http_options
from beam_nominal.targets.avro_prefix import AvroPrefixTarget, WrittenFile, is_prefix

__all__ = ["DEFAULT_LOCAL_DATASET", "WriteToNominal", "WriteToNominalResult", "embedded_server"]

_LOG = logging.getLogger(__name__)

#: Dataset rid used with the embedded local server when none is given.
DEFAULT_LOCAL_DATASET = "ri.beam-nominal.local.dataset"
#: Where the embedded local server keeps its data when no ``local_data_dir`` is given.
DEFAULT_LOCAL_DATA_DIR = "nominal-data"

_LOCAL_RUNNERS = frozenset(
    {
        "FnApiRunner",
        "DirectRunner",
        "SwitchingDirectRunner",
        "BundleBasedDirectRunner",
        "PrismRunner",
        "InteractiveRunner",
        "TestDirectRunner",
    }
)


class WriteToNominalResult(NamedTuple):
    """What :class:`WriteToNominal` returns.

    Attributes:
        failed: a PCollection of :class:`~beam_nominal.FailedElement` ``(element, error,
            reason)``: elements that could not be written (no channel, bad timestamp, a value
            whose type conflicts with its series, an unsupported value ...).
        files: with an Avro prefix target (``"gs://bucket/dir/"``, ``"/local/dir/"``), a
            PCollection of :class:`~beam_nominal.WrittenFile` ``(path,
            dataset_rid, series, points, bytes, min_timestamp, max_timestamp)``, one per file
            made visible, in the global window; None for other targets.
    """

    failed: PCollection[Any]
    files: PCollection[Any] | None = None


_servers_lock = threading.Lock()
_servers: dict[str, Any] = {}


def embedded_server(data_dir: str | os.PathLike[str] = DEFAULT_LOCAL_DATA_DIR) -> Any:
    """Start, or reuse, the process's embedded :class:`~beam_nominal.server.LocalServer` for ``data_dir``.

    It serves until the process exits. Returns the running server (``.target`` is its URL).
    """
    from beam_nominal.server import LocalServer

    path = os.path.abspath(os.fspath(data_dir))
    with _servers_lock:
        server = _servers.get(path)
        if server is None:
            server = LocalServer(path, port=0).start()
            _servers[path] = server
            atexit.register(server.stop, 1.0)
            _LOG.info("WriteToNominal: embedded local server at %s, data in %s", server.target, path)
        return server


def _runner_is_local(pipeline: beam.Pipeline) -> tuple[bool, str]:
    runner = getattr(pipeline, "runner", None)
    name = type(runner).__name__ if runner is not None else "unknown"
    if name in _LOCAL_RUNNERS:
        return True, name
    options = pipeline.options.get_all_options(drop_default=False) if pipeline.options else {}
    # Portable runners whose SDK workers run in this process (LOOPBACK) or that run embedded can
    # reach a loopback server; anything else runs on machines that cannot.
    if options.get("job_endpoint") == "embed" or options.get("environment_type") == "LOOPBACK":
        return True, name
    return False, name


def _identity(kv: tuple[str, Any]) -> tuple[str, Any]:
    return kv


def _windows_per_element(pcoll: PCollection[Any]) -> int | None:
    """How many windows the input's WindowFn puts an element in: 1, more, or ``None`` if unknown."""
    windowfn = pcoll.windowing.windowfn
    if isinstance(windowfn, (GlobalWindows, FixedWindows, Sessions)):
        return 1
    if isinstance(windowfn, SlidingWindows):
        return -(-windowfn.size.micros // windowfn.period.micros)
    return None


class WriteToNominal(beam.PTransform):  # type: ignore[type-arg]
    """Write telemetry elements to Nominal (or a Nominal-compatible server, or an Avro file).

    Each element is read by its shape (see README.md, "Element shapes"): a point ``(channel, timestamp,
    value[, tags])``, a series ``(channel, timestamps, values[, tags])``, a wide record
    ``(timestamp, {channel: value}[, tags])`` or a flat dict/Row/NamedTuple with a timestamp field
    and one field per channel, or a pyarrow Table/RecordBatch with a timestamp column.

    Schema'd wide rows (``beam.Row``, NamedTuple-typed PCollections; what Beam YAML, Beam SQL and
    the DataFrame API's ``to_pcollection`` hand over), e.g. ``Row(t=..., rpm=..., oil=...,
    mode='A')``: one point per non-null channel field, typed by the schema (int64 stays int64,
    double double, str string; a null is no point). ``timestamp_field``, ``channel_fields``,
    ``tag_fields`` and ``channel_prefix`` say which field is which; with a known schema they are
    checked against it when the pipeline is built.

    Delivery is at-least-once: a bundle finishes only once every point in it is acknowledged,
    otherwise it raises and the runner retries it. Retried bundles re-send byte-identical requests
    with the same idempotency keys.

    Args:
        target: Nominal's base URL ``https://host/api`` (its HTTP write API; ``http://`` for
            plaintext), ``grpc://host:port``, ``grpcs://host[:port]``, a path ending in ``.avro``,
            or a zero-argument factory returning a target (called in ``DoFn.setup``). ``None``
            starts an embedded local server on local runners.
        dataset_rid: the Nominal dataset to write to. Required with a target; defaults to
            ``ri.beam-nominal.local.dataset`` with the embedded server.
        token: API token as a string, a zero-argument callable, or an ``apache_beam`` ``Secret``;
            resolved on the worker and never shown in display data, logs or repr.
        format: with an ``http(s)://`` target, ``"row"`` (default; the endpoint every Nominal
            deployment serves) or ``"columnar"``.
        fallback_to_row: with ``format="columnar"``, switch to row if the server does not serve
            the columnar endpoint (404/415) instead of failing.
        timestamp_field: name of the timestamp field/column of elements. ``None`` (default):
            ``timestamp``; a wide row without one: its one field named ``time`` or ``t`` or of a
            timestamp type (several: refused, name one).
        channel_fields: the fields of wide rows that are channels (default: all but the
            timestamp, the tag fields and a ``tags`` mapping).
        tag_fields: fields of wide rows whose values (text or integers) become tags of the row's
            points.
        channel_prefix: put before every channel name of wide rows (``"engine."``).
        timezone: the zone naive timestamps are readings in (``"UTC"``, an IANA name such as
            ``"Europe/Berlin"``, a fixed offset ``"+02:00"``). ``None`` (default): a naive
            timestamp (a naive ``datetime`` or pandas ``Timestamp``, an ISO string without an
            offset, a ``datetime64``, an Arrow timestamp without a tz) fails its element, with
            the fix in the reason; int ns are UTC by definition.
        tags: tags added to every series (an element's own tags win on a clash).
        local_data_dir: data directory of the embedded server (default ``./nominal-data``).
        cross_bundle_batching: group elements' points, a series batch per series and element,
            across bundles with ``GroupIntoBatches.WithShardedKey``, so streaming runners' small
            bundles do not each become a request. ``None`` (default): on when the input
            PCollection is unbounded (a streaming source), off when it is bounded (batch bundles
            are large; batching them again only costs); always off on ``PrismRunner``, where
            ``True`` is refused (Prism loses elements of ``GroupIntoBatches``; docs/runners.md).
            See docs/benchmarks.md, "Small bundles".
        batch_size: series batches per group with cross-bundle batching.
        max_buffering_duration_secs: longest a series batch waits for its group with cross-bundle
            batching: the latency it adds, at most (plus the runner's timer delay).
        max_file_bytes: with an Avro prefix target, the size at which a file rolls over (default
            256 MiB).
        codec: with an Avro prefix target, ``"snappy"`` (default), ``"deflate"`` or ``"null"``.
        **settings: NominalStream settings (``max_request_bytes``, ``max_request_points``,
            ``max_in_flight``, ``max_buffered_bytes``, ``attempt_timeout``, ``max_attempts``,
            ...). ``linger`` is always disabled here.

    Raises:
        ValueError: a target without ``dataset_rid``; no target on a remote runner (at expand);
            ``cross_bundle_batching=True`` on ``PrismRunner`` or with sliding windows (at expand).
    """

    def __init__(
        self,
        target: str | Callable[[], Any] | None = None,
        dataset_rid: str | None = None,
        token: Any = None,
        *,
        format: str | None = None,
        fallback_to_row: bool = False,
        timestamp_field: str | None = None,
        channel_fields: Sequence[str] | None = None,
        tag_fields: Sequence[str] = (),
        channel_prefix: str = "",
        timezone: str | None = None,
        tags: Mapping[str, str] | None = None,
        local_data_dir: str | os.PathLike[str] | None = None,
        cross_bundle_batching: bool | None = None,
        batch_size: int = 1000,
        max_buffering_duration_secs: float = 5.0,
        max_file_bytes: int | None = None,
        codec: str | None = None,
        **settings: Any,
    ) -> None:
        super().__init__()
        if target is not None and not isinstance(target, str) and not callable(target):
            raise TypeError(
                f"target must be a URL string, a .avro path or a zero-argument factory, got {type(target).__name__}"
            )
        if target is not None and not dataset_rid:
            raise ValueError("WriteToNominal needs dataset_rid when a target is given")
        # Checked here, not on a worker (and a URL with credentials must not reach display data).
        target_options = http_options(target, format, fallback_to_row)
        target_options.update(_file_options(target, dataset_rid, max_file_bytes, codec))
        if target is None and local_data_dir is None:
            local_data_dir = DEFAULT_LOCAL_DATA_DIR
        if timestamp_field is not None and (not isinstance(timestamp_field, str) or not timestamp_field):
            raise ValueError(f"timestamp_field must be a non-empty string, got {timestamp_field!r}")
        if timestamp_field in _SHAPE_FIELDS:
            # Such a field would mean two things in one element (a point's tags and its time).
            raise ValueError(
                f"timestamp_field {timestamp_field!r} is a field name of the element shapes "
                f"({', '.join(sorted(_SHAPE_FIELDS))}); name the timestamp field otherwise"
            )
        rows = RowOptions(
            timestamp_field=timestamp_field,
            channel_fields=channel_fields,  # type: ignore[arg-type]  # RowOptions checks and makes it a tuple
            tag_fields=tag_fields,  # type: ignore[arg-type]
            channel_prefix=channel_prefix,
        )
        check_timezone(timezone, "WriteToNominal timezone")
        if cross_bundle_batching is not None and not isinstance(cross_bundle_batching, bool):
            raise TypeError(f"cross_bundle_batching must be True, False or None, got {cross_bundle_batching!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if max_buffering_duration_secs <= 0:
            raise ValueError(f"max_buffering_duration_secs must be > 0, got {max_buffering_duration_secs!r}")
        if tags is not None:
            for k, v in tags.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise ValueError(f"tags must map str to str, got {k!r}: {v!r:.80}")
            try:
                # The rule every series key obeys (lengths), here rather than on every worker.
                PointBatch(tags)
            except ValueError as exc:
                raise ValueError(f"WriteToNominal tags: {exc}") from None
        settings.pop("linger", None)
        if settings.get("block_on_full", True) is not True:
            raise ValueError(
                f"WriteToNominal: block_on_full={settings['block_on_full']!r} is not supported: a bundle "
                "waits for room in its buffer budget (raising instead would fail bundles under load); "
                "drop the option"
            )
        # Checked here, naming the setting, rather than on every worker at every bundle.
        resolve(owner="WriteToNominal", **settings)
        self._target = target
        self._dataset_rid = dataset_rid
        self._token = token
        self._timestamp_field = timestamp_field or "timestamp"
        self._rows = rows
        self._timezone = timezone
        self._tags = dict(tags) if tags else None
        self._local_data_dir = local_data_dir
        self._cross_bundle = cross_bundle_batching
        self._batch_size = batch_size
        self._max_buffering = max_buffering_duration_secs
        self._settings = settings
        self._target_options = target_options

    def __repr__(self) -> str:
        return f"WriteToNominal(target={self._target!r}, dataset_rid={self._dataset_rid!r})"

    def display_data(self) -> dict[str, Any]:
        target = self._target
        shown = (
            target
            if isinstance(target, str)
            else ("embedded local server" if target is None else getattr(target, "__qualname__", "factory"))
        )
        return {"target": shown, "dataset_rid": self._dataset_rid or DEFAULT_LOCAL_DATASET}

    def _config(self, pcoll: PCollection[Any]) -> SinkConfig:
        pipeline = pcoll.pipeline
        target: Any = self._target
        dataset_rid = self._dataset_rid
        if target is None:
            local, runner = _runner_is_local(pipeline)
            if not local:
                raise ValueError(
                    f"WriteToNominal has no target and runner {runner} runs on remote workers that cannot "
                    "reach an embedded local server: give target='https://<your Nominal>/api' and dataset_rid='ri...'"
                )
            assert self._local_data_dir is not None
            server = embedded_server(self._local_data_dir)
            target = server.target
            dataset_rid = dataset_rid or DEFAULT_LOCAL_DATASET
            message = (
                f"WriteToNominal: no target given; writing to the embedded local server {target} "
                f"(data in {os.path.abspath(os.fspath(self._local_data_dir))}, dataset {dataset_rid})"
            )
            _LOG.warning(message)
        assert dataset_rid is not None
        return SinkConfig(
            target=target,
            dataset_rid=dataset_rid,
            token=self._token,
            settings=dict(self._settings),
            timestamp_field=self._timestamp_field,
            timezone=self._timezone,
            tags=self._tags,
            target_options=self._target_options,
            **self._row_config(pcoll),
        )

    def _row_config(self, pcoll: PCollection[Any]) -> dict[str, Any]:
        """The rows options and the input's schema for the DoFn; with a known schema, checked now.

        Rows whose schema is a point or series keep the element readers (no rows step).
        """
        options = self._rows
        schema = schema_fields(pcoll.element_type)
        if schema is None:
            return {"rows": options, "schema": None}
        names = [f.name for f in schema]
        if not is_wide(names, options):
            if options.shaping:
                raise ValueError(
                    f"WriteToNominal: channel_fields, tag_fields and channel_prefix apply to wide rows (a timestamp "
                    f"and a field per channel); the input's schema {names} is a point or series: leave them unset"
                )
            return {"rows": None, "schema": None}
        try:
            layout(names, options, schema)
        except RowSchemaError as exc:
            raise ValueError(f"WriteToNominal: the input's schema {names}: {exc}") from None
        return {"rows": options, "schema": schema}

    def expand(self, pcoll: PCollection[Any]) -> WriteToNominalResult:
        config = self._config(pcoll)
        cross_bundle = self._cross_bundle
        windows = _windows_per_element(pcoll)
        # Prism (Beam 2.77) loses elements of GroupIntoBatches.WithShardedKey with a buffering
        # timer in streaming (docs/runners.md, "Prism"): never batch across bundles there.
        on_prism = type(getattr(pcoll.pipeline, "runner", None)).__name__ == "PrismRunner"
        if cross_bundle is None:
            # Streaming sources' bundles are small (often one element), each a flush and a round
            # trip; batch bundles are large already. Only for one window per element (below).
            cross_bundle = not pcoll.is_bounded and windows == 1
            if cross_bundle and on_prism:
                cross_bundle = False
                _LOG.info(
                    "WriteToNominal: cross-bundle batching off on PrismRunner, which loses elements of "
                    "GroupIntoBatches; a request per bundle (docs/runners.md, Prism)"
                )
        elif cross_bundle and on_prism:
            raise ValueError(
                "WriteToNominal: cross_bundle_batching=True on PrismRunner would lose points: Prism loses "
                "elements of GroupIntoBatches.WithShardedKey with a buffering timer in streaming (measured "
                "with Beam 2.77; docs/runners.md, Prism). Leave cross_bundle_batching unset (off on Prism) "
                "or run on another runner"
            )
        elif cross_bundle and windows is not None and windows > 1:
            # Its series batches are re-windowed into the global window, one copy per window the
            # element is in: each point would be written that many times.
            raise ValueError(
                f"WriteToNominal: cross_bundle_batching=True with {type(pcoll.windowing.windowfn).__name__} "
                f"(each element in {windows} windows) would write every point {windows} times; write "
                "before windowing into sliding windows, or leave cross_bundle_batching unset"
            )
        if not cross_bundle:
            # The write DoFn's only output is the failed elements (see _dofn.py), and the files
            # written with a prefix target.
            return _split_files(pcoll | "Write" >> beam.ParDo(WriteDoFn(config)), self._target)
        # The step's label and output tag are names in running jobs: a streaming update matches
        # steps by name, so another label would break updating a job.
        read = pcoll | "ToChunks" >> beam.ParDo(ToSeriesBatchesDoFn(config)).with_outputs(FAILED_TAG, main="chunks")
        batched = (
            read["chunks"]
            | "Typed" >> beam.Map(_identity).with_output_types(tuple[str, Any])
            # GroupIntoBatches is stateful: runners drop elements of expired windows there (late
            # data beyond the allowed lateness), and it flushes every key at every window's end.
            # Series batches need no window (failures were output above, in their own), so batch
            # globally.
            | "Unwindowed" >> beam.WindowInto(GlobalWindows())
            | "Batch"
            >> GroupIntoBatches.WithShardedKey(self._batch_size, max_buffering_duration_secs=self._max_buffering)
        )
        written = _split_files(batched | "Write" >> beam.ParDo(WriteSeriesBatchesDoFn(config)), self._target)
        failed = (read[FAILED_TAG], written.failed) | "Failed" >> beam.Flatten()
        return WriteToNominalResult(failed=failed, files=written.files)


def _file_options(
    target: Any, dataset_rid: str | None, max_file_bytes: int | None, codec: str | None
) -> dict[str, Any]:
    """The Avro prefix target's keywords, checked here rather than on every worker."""
    options: dict[str, Any] = {}
    if max_file_bytes is not None:
        options["max_file_bytes"] = max_file_bytes
    if codec is not None:
        options["codec"] = codec
    if options:
        if not is_prefix(target):
            raise ValueError(f"{', '.join(sorted(options))} applies to Avro prefix targets (ending in /) only")
        AvroPrefixTarget(target, dataset_rid=dataset_rid or "", **options)  # raises on a bad value
    return options


def _is_written_file(x: Any) -> bool:
    return isinstance(x, WrittenFile)


def _is_not_written_file(x: Any) -> bool:
    return not isinstance(x, WrittenFile)


def _split_files(out: PCollection[Any], target: Any) -> WriteToNominalResult:
    """The write DoFn's output as failed elements and, for a prefix target, files written.

    One output split by type rather than tagged outputs: DaskRunner hands each consumer of a
    tagged output every output of the ParDo (see _dofn.py).
    """
    if not is_prefix(target):
        return WriteToNominalResult(failed=out)
    return WriteToNominalResult(
        failed=out | "OnlyFailed" >> beam.Filter(_is_not_written_file),
        files=out | "Files" >> beam.Filter(_is_written_file),
    )
