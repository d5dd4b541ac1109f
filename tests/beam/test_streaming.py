"""WriteToNominal in streaming pipelines: the DirectRunner in streaming mode, fed by ``TestStream``.

FnApiRunner cannot run ``TestStream`` (``beam:transform:teststream:v1``); Beam's Python
DirectRunner (``BundleBasedDirectRunner``) runs it with ``streaming=True``. The switching
``DirectRunner`` is not used: it first tries PrismRunner, which downloads a binary.

What is checked each time: every good point read back exactly from a real local server, and the
failed output exactly, each bad element with its own timestamp and window(s).

Facts these tests pin down:

* The sink is a ParDo, so late data is written whatever the allowed lateness: only an aggregation
  (a GroupByKey) drops it. A window's aggregate written as a point follows the window's trigger.
* Cross-bundle batching (the default for an unbounded input) batches in the global window: one
  request for a whole stream of one-element bundles, late data included; with sliding windows it
  would write each point once per window, so it is refused there and off by default.
* The DirectRunner's metrics keep only the first bundle's updates under ``TestStream`` (a
  ``Metrics.counter`` in a plain DoFn shows the same), so requests are counted at the server here.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import grpc
import pytest
from _first_contact import grpc_probe
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream as BeamTestStream  # not collected as a test class
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger
from apache_beam.transforms.window import FixedWindows, GlobalWindow, GlobalWindows, SlidingWindows, TimestampedValue

from beam_nominal._wire import metadata as md
from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.server import LocalServer

BASE = 1_700_000_000_000_000_000
SEC = 1_000_000_000
Key = tuple[str, tuple[tuple[str, str], ...]]

pytestmark = pytest.mark.timeout(120)


class Requests(grpc.ServerInterceptor):  # type: ignore[misc]
    """Counts write calls: the DirectRunner's metrics cannot (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method == md.WRITE_COLUMN_BATCHES and not grpc_probe(details):
            with self.lock:
                self.count += 1
        return continuation(details)

    def take(self) -> int:
        with self.lock:
            count, self.count = self.count, 0
        return count


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, Requests]]:
    requests = Requests()
    with LocalServer(tmp_path_factory.mktemp("streaming"), port=0, interceptors=[requests]) as srv:
        yield srv, requests


def _pipeline() -> beam.Pipeline:
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)


def _point(second: int, value: float) -> TimestampedValue:
    """A point at BASE + ``second`` s (Nominal) and ``second`` s (Beam)."""
    return TimestampedValue(("raw", BASE + second * SEC, value), second)


def _bad(second: int) -> TimestampedValue:
    return TimestampedValue(("raw", f"not a time {second}", 1.0), second)


def _stored(server: LocalServer, rid: str) -> dict[Key, list[tuple[int, Any]]]:
    out: dict[Key, list[tuple[int, Any]]] = {}
    for info in server.store.list_series(rid):
        table = server.store.read(rid, info.channel, info.tags)
        points = zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True)
        key = (info.channel, tuple(sorted(info.tags.items())))
        out[key] = sorted(points)
        assert info.count == len(out[key]), key
    return out


class _Seen(beam.DoFn):  # type: ignore[misc]
    """A failed element as plain data: element, Beam timestamp (s), window (s) and what it says."""

    def process(
        self, f: FailedElement, ts: Any = beam.DoFn.TimestampParam, window: Any = beam.DoFn.WindowParam
    ) -> Iterator[tuple[str, float, Any, str]]:
        assert type(f) is FailedElement, f
        where = "global" if isinstance(window, GlobalWindow) else (float(window.start), float(window.end))
        yield repr(f.element), float(ts), where, f"{f.error}: {f.reason}"


def _check_failed(want: list[tuple[str, float, Any]]) -> Any:
    def check(seen: list[tuple[str, float, Any, str]]) -> None:
        equal_to(want)([s[:3] for s in seen])
        for element, _, _, text in seen:
            assert text.startswith("ElementError: ") and "ISO-8601" in text and element[:20] in text, text

    return check


def _failed_want(bad: list[TimestampedValue], windows: Any) -> list[tuple[str, float, Any]]:
    return [(repr(b.value), float(b.timestamp), w) for b in bad for w in windows(int(b.timestamp))]


class _Aggregate(beam.DoFn):  # type: ignore[misc]
    """A window's pane as a point: ``agg`` at the window's end (or BASE + pane index in the global
    window), tagged with the pane's timing, so every firing of the trigger is a stored point."""

    def process(
        self, total: float, window: Any = beam.DoFn.WindowParam, pane: Any = beam.DoFn.PaneInfoParam
    ) -> Iterator[tuple[str, int, float, dict[str, str]]]:
        timing = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}[pane.timing]
        if isinstance(window, GlobalWindow):
            yield "agg", BASE + pane.index * SEC, total, {"pane": timing}
        else:
            yield "agg", BASE + window.end.micros * 1000, total, {"pane": timing}


def _values(e: tuple[str, Any, float]) -> Iterator[float]:
    if isinstance(e[1], int):
        yield e[2]


def _raw_expected(points: list[TimestampedValue]) -> list[tuple[int, Any]]:
    return sorted((p.value[1], p.value[2]) for p in points)


# -- fixed windows, the watermark advancing window by window -----------------------------------


@pytest.mark.parametrize("cross_bundle", [False, True], ids=["per-bundle", "cross-bundle"])
def test_fixed_windows_as_the_watermark_advances(served: tuple[LocalServer, Requests], cross_bundle: bool) -> None:
    server, requests = served
    rid = f"ri.test.stream.fixed.{cross_bundle}"
    stream = BeamTestStream()
    good: list[TimestampedValue] = []
    bad: list[TimestampedValue] = []
    for k in range(3):
        stage = [_point(k * 10 + i, float(k * 10 + i)) for i in range(5)]
        good += stage
        if k == 1:
            bad.append(_bad(17))
            stage.insert(2, bad[-1])
        # One-element bundles, as streaming runners make them; then the watermark past the window.
        for element in stage:
            stream = stream.add_elements([element])
        stream = stream.advance_watermark_to(k * 10 + 10)
    stream = stream.advance_watermark_to_infinity()
    requests.take()

    p = _pipeline()
    events = p | stream | beam.WindowInto(FixedWindows(10))
    written = events | "Raw" >> WriteToNominal(server.target, dataset_rid=rid, cross_bundle_batching=cross_bundle)
    aggregates = (
        events
        | beam.FlatMap(_values)
        | beam.CombineGlobally(sum).without_defaults()
        | beam.ParDo(_Aggregate())
        | "Agg" >> WriteToNominal(server.target, dataset_rid=rid, cross_bundle_batching=cross_bundle)
    )
    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed(_failed_want(bad, lambda s: [(10.0, 20.0)])))
    assert_that(aggregates.failed, equal_to([]), label="NoAggFailed")
    p.run().wait_until_finish()

    assert _stored(server, rid) == {
        ("raw", ()): _raw_expected(good),
        # One on-time pane per window, fired by the watermark passing the window's end.
        ("agg", (("pane", "ON_TIME"),)): [
            (BASE + (k + 1) * 10 * SEC, float(sum(range(k * 10, k * 10 + 5)))) for k in range(3)
        ],
    }
    # Per bundle: a request per bundle with a good point (15 raw, 3 aggregate panes). Cross-bundle: batches are
    # made across windows and bundles, and 1000 series batches never fill one, so one request per sink.
    assert requests.take() == (2 if cross_bundle else 18)


# -- sliding windows: an element in two windows is written once, and fails in both --------------


def test_sliding_windows_write_each_point_once_and_fail_in_every_window(served: tuple[LocalServer, Requests]) -> None:
    server, _ = served
    rid = "ri.test.stream.sliding"
    stream = BeamTestStream()
    good = [_point(s, float(s)) for s in range(20)]
    bad = [_bad(7), _bad(12)]
    for k in range(4):
        stage = [g for g in good if k * 5 <= int(g.timestamp) < k * 5 + 5] + [
            b for b in bad if k * 5 <= int(b.timestamp) < k * 5 + 5
        ]
        stream = stream.add_elements(stage).advance_watermark_to(k * 5 + 5)
    stream = stream.advance_watermark_to_infinity()

    p = _pipeline()
    events = p | stream | beam.WindowInto(SlidingWindows(10, 5))
    written = events | "Raw" >> WriteToNominal(server.target, dataset_rid=rid)
    _ = (
        events
        | beam.FlatMap(_values)
        | beam.CombineGlobally(sum).without_defaults()
        | beam.ParDo(_Aggregate())
        | "Agg" >> WriteToNominal(server.target, dataset_rid=rid)
    )

    def windows(second: int) -> list[tuple[float, float]]:
        start = second // 5 * 5
        return [(float(start - 5), float(start + 5)), (float(start), float(start + 10))]

    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed(_failed_want(bad, windows)))
    p.run().wait_until_finish()

    # The sink does not observe windows, so an element in two windows is one write, not two (and
    # the default does not batch across bundles here: that would re-window each copy).
    sums = {end: float(sum(s for s in range(end - 10, end) if 0 <= s < 20)) for end in range(5, 30, 5)}
    assert _stored(server, rid) == {
        ("raw", ()): _raw_expected(good),
        ("agg", (("pane", "ON_TIME"),)): [(BASE + end * SEC, total) for end, total in sorted(sums.items())],
    }


# -- late data, with and without allowed lateness ------------------------------------------------


@pytest.mark.parametrize("lateness", [0, 30])
@pytest.mark.parametrize("cross_bundle", [False, True], ids=["per-bundle", "cross-bundle"])
def test_late_data_is_written_and_aggregates_follow_allowed_lateness(
    served: tuple[LocalServer, Requests], lateness: int, cross_bundle: bool
) -> None:
    server, _ = served
    rid = f"ri.test.stream.late.{lateness}.{cross_bundle}"
    on_time = [_point(s, float(s)) for s in (1, 2, 3, 4)]
    late = [_point(5, 5.0)]  # after the watermark passed the window's end, within 30 s lateness
    too_late = [_point(8, 100.0)]  # after the watermark passed end + 30 s
    bad = [_bad(6)]  # late as well
    stream = (
        BeamTestStream()
        .add_elements(on_time)
        .advance_watermark_to(20)
        .add_elements(late + bad)
        .advance_watermark_to(50)
        .add_elements(too_late)
        .advance_watermark_to_infinity()
    )
    p = _pipeline()
    events = p | stream
    written = events | "Raw" >> WriteToNominal(server.target, dataset_rid=rid, cross_bundle_batching=cross_bundle)
    _ = (
        events
        | beam.WindowInto(
            FixedWindows(10),
            trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
            allowed_lateness=lateness,
        )
        | beam.FlatMap(_values)
        | beam.CombineGlobally(sum).without_defaults()
        | beam.ParDo(_Aggregate())
        | "Agg" >> WriteToNominal(server.target, dataset_rid=rid)
    )
    # The raw events stay in the global window here; the failed element keeps its own timestamp.
    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed(_failed_want(bad, lambda s: ["global"])))
    p.run().wait_until_finish()

    want: dict[Key, list[tuple[int, Any]]] = {
        # Every point, late or not: the sink is a ParDo and drops nothing.
        ("raw", ()): _raw_expected(on_time + late + too_late),
        ("agg", (("pane", "ON_TIME"),)): [(BASE + 10 * SEC, 10.0)],
    }
    if lateness:
        want[("agg", (("pane", "LATE"),))] = [(BASE + 10 * SEC, 5.0)]
    assert _stored(server, rid) == want


def test_late_data_in_fixed_windows_reaches_the_sink_and_fails_in_its_window(
    served: tuple[LocalServer, Requests],
) -> None:
    server, _ = served
    rid = "ri.test.stream.late.windowed"
    good = [_point(1, 1.0), _point(2, 2.0)]
    late = [_point(3, 3.0), _point(25, 25.0)]
    bad = [_bad(4)]
    stream = (
        BeamTestStream()
        .add_elements(good)
        .advance_watermark_to(100)
        .add_elements(late + bad)
        .advance_watermark_to_infinity()
    )
    p = _pipeline()
    # No allowed lateness: every element after the first stage is beyond it.
    written = (
        p
        | stream
        | beam.WindowInto(FixedWindows(10), allowed_lateness=0)
        | WriteToNominal(server.target, dataset_rid=rid, cross_bundle_batching=True)
    )
    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed(_failed_want(bad, lambda s: [(0.0, 10.0)])))
    p.run().wait_until_finish()
    assert _stored(server, rid) == {("raw", ()): _raw_expected(good + late)}


# -- processing time ---------------------------------------------------------------------------


def test_processing_time_trigger_panes_are_written(served: tuple[LocalServer, Requests]) -> None:
    server, _ = served
    rid = "ri.test.stream.ptime"
    stages = [[1.0, 2.0, 3.0], [10.0, 20.0], [100.0]]
    stream = BeamTestStream()
    good: list[TimestampedValue] = []
    for k, values in enumerate(stages):
        points = [_point(k * 10 + i, v) for i, v in enumerate(values)]
        good += points
        stream = stream.add_elements([*points, _bad(k * 10 + 9)] if k == 1 else points).advance_processing_time(6)
    stream = stream.advance_watermark_to_infinity()
    p = _pipeline()
    events = (
        p
        | stream
        | beam.WindowInto(
            GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterProcessingTime(5)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
    )
    written = events | "Raw" >> WriteToNominal(server.target, dataset_rid=rid)
    _ = (
        events
        | beam.FlatMap(_values)
        | beam.CombineGlobally(sum).without_defaults()
        | beam.ParDo(_Aggregate())
        | "Agg" >> WriteToNominal(server.target, dataset_rid=rid)
    )
    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed([(repr(_bad(19).value), 19.0, "global")]))
    p.run().wait_until_finish()
    assert _stored(server, rid) == {
        ("raw", ()): _raw_expected(good),
        # One early pane per 5 s of processing time, each with its stage's elements only.
        ("agg", (("pane", "EARLY"),)): [(BASE + k * SEC, sum(values)) for k, values in enumerate(stages)],
    }


@pytest.mark.parametrize("advance", [False, True], ids=["watermark-only", "processing-time"])
def test_cross_bundle_batches_flush_after_max_buffering_duration(
    served: tuple[LocalServer, Requests], advance: bool
) -> None:
    server, requests = served
    rid = f"ri.test.stream.buffering.{advance}"
    stream = BeamTestStream()
    good: list[TimestampedValue] = []
    bad = [_bad(13)]
    for k in range(3):
        points = [_point(k * 10 + i, float(k * 10 + i)) for i in range(5)]
        good += points
        stream = stream.add_elements(points + (bad if k == 1 else [])).advance_watermark_to(k * 10 + 10)
        if advance:
            # GroupIntoBatches sets its buffering timer from the wall clock (time.time()), while
            # TestStream's processing-time clock starts at the epoch: go past the wall clock.
            stream = stream.advance_processing_time(int(time.time()) + 3600 if k == 0 else 11)
    stream = stream.advance_watermark_to_infinity()
    requests.take()
    p = _pipeline()
    written = (
        p
        | stream
        | WriteToNominal(
            server.target, dataset_rid=rid, cross_bundle_batching=True, batch_size=1000, max_buffering_duration_secs=10
        )
    )
    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed(_failed_want(bad, lambda s: ["global"])))
    p.run().wait_until_finish()
    assert _stored(server, rid) == {("raw", ()): _raw_expected(good)}
    # A batch of 1000 never fills: without the buffering timer firing, the whole stream is one
    # request at the end; with it, one request per stage.
    assert requests.take() == (3 if advance else 1)


# -- the default: cross-bundle batching for an unbounded input, not for a bounded one -------------


def test_the_default_batches_across_bundles_of_an_unbounded_input(served: tuple[LocalServer, Requests]) -> None:
    server, requests = served
    rid = "ri.test.stream.default"
    good = [_point(s, float(s)) for s in range(30)]
    bad = [_bad(12)]
    stream = BeamTestStream()
    for element in good[:12] + bad + good[12:]:
        stream = stream.add_elements([element])  # one-element bundles
    stream = stream.advance_watermark_to_infinity()
    requests.take()
    p = _pipeline()
    written = p | stream | WriteToNominal(server.target, dataset_rid=rid)
    assert_that(written.failed | beam.ParDo(_Seen()), _check_failed(_failed_want(bad, lambda s: ["global"])))
    p.run().wait_until_finish()
    assert _stored(server, rid) == {("raw", ()): _raw_expected(good)}
    assert requests.take() == 1  # not 30: one per bundle


class _Record(beam.DoFn):  # type: ignore[misc]
    """Appends each failed element to a file: ``assert_that`` groups by key, and a failure found
    after cross-bundle batching sits at the end of the global window, late for any grouping."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, f: Any) -> Iterator[Any]:
        with open(self._path, "a") as out:
            out.write(json.dumps([f.error, f.element, "text now" in f.reason]) + "\n")
        return iter(())


def test_the_default_fails_a_type_clash_found_after_batching_as_its_series_points(
    served: tuple[LocalServer, Requests], tmp_path: Path
) -> None:
    """With cross-bundle batching (the default for unbounded inputs) a clash between elements of
    different bundles is found once their series batches are grouped, when the elements are gone: the
    failure names the series, its points and their time range (as a series the server refused),
    not an internal series batch; with batching off it would be the element in its own window."""
    server, _ = served
    rid = "ri.test.stream.clash"
    stream = (
        BeamTestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(("x", BASE + SEC, 1.0), 1)])
        .add_elements([TimestampedValue(("x", BASE + 2 * SEC, "text now"), 2)])
        .advance_watermark_to_infinity()
    )
    seen = tmp_path / "failed.jsonl"
    with _pipeline() as p:
        result = p | stream | beam.WindowInto(FixedWindows(10)) | WriteToNominal(server.target, dataset_rid=rid)
        _ = result.failed | beam.ParDo(_Record(str(seen)))
    at = BASE + 2 * SEC
    described = {"channel": "x", "tags": {}, "points": 1, "first_timestamp": at, "last_timestamp": at}
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [["SeriesTypeError", described, False]]
    assert [(s.channel, s.value_type.value, s.count) for s in server.store.list_series(rid)] == [("x", "double", 1)]


def test_the_default_writes_a_bounded_input_per_bundle(served: tuple[LocalServer, Requests]) -> None:
    server, _ = served
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | beam.Create([("raw", BASE, 1.0)]) | "Sink" >> WriteToNominal(server.target, dataset_rid="ri.test.bounded")
    names = {t.unique_name for t in p.to_runner_api().components.transforms.values()}
    assert "Sink/Write" in names and not any(n.startswith("Sink/ToChunks") for n in names), sorted(names)
    p.run().wait_until_finish()
    assert _stored(server, "ri.test.bounded") == {("raw", ()): [(BASE, 1.0)]}


def test_cross_bundle_batching_refuses_sliding_windows(served: tuple[LocalServer, Requests]) -> None:
    server, _ = served
    p = _pipeline()
    events = p | BeamTestStream().add_elements([_point(1, 1.0)]) | beam.WindowInto(SlidingWindows(10, 5))
    with pytest.raises(
        ValueError, match=r"SlidingWindows \(each element in 2 windows\) would write every point 2 times"
    ):
        _ = events | WriteToNominal(server.target, dataset_rid="ri.test.sliding.cross", cross_bundle_batching=True)
