"""Bad elements cost only themselves: each reaches the failed output once, from its own process
call (so with its own timestamp and window), and every good point around it is stored exactly."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, GlobalWindow, TimestampedValue

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.beam._dofn import HANDOVER_POINTS, SinkConfig, WriteDoFn
from beam_nominal.server import LocalServer, LocalStore

BASE = 1_700_000_000_000_000_000
# A series: (channel, sorted tag items) -> (value type, [(ts, value)]).
Key = tuple[str, tuple[tuple[str, str], ...]]
Stored = dict[Key, tuple[str, list[tuple[int, Any]]]]


def _exact(v: Any) -> Any:
    """Tells -0.0 from 0.0 and equates NaN with NaN; keeps the type, so 1 and 1.0 differ."""
    if isinstance(v, list):
        return tuple(_exact(x) for x in v)
    return (type(v).__name__, v.hex() if isinstance(v, float) else v)


def assert_stored(store: LocalStore, rid: str, expected: Stored) -> None:
    infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in store.list_series(rid)}
    assert sorted(infos) == sorted(expected)
    for key, (vtype, points) in expected.items():
        assert infos[key].value_type.value == vtype, key
        assert infos[key].count == len(points), key
        table = store.read(rid, key[0], dict(key[1]))
        got = zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True)
        assert sorted((t, _exact(v)) for t, v in got) == sorted((t, _exact(v)) for t, v in points), key


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("failed-elements"), port=0) as srv:
        yield srv


# -- the DoFn, driven by hand: a lone surrogate, which Beam's coders cannot carry ----------------


def _wait_for_points(store: LocalStore, rid: str, channel: str, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = sum(s.count for s in store.list_series(rid) if s.channel == channel)
        if count:
            return count
        time.sleep(0.01)
    raise AssertionError(f"no point of {channel!r} stored within {timeout} s")


def test_write_dofn_returns_a_bad_element_from_its_own_process_call(server: LocalServer) -> None:
    rid = "ri.test.failed.dofn"
    # Small requests: a batch handed over mid-bundle is sent before finish_bundle.
    dofn = WriteDoFn(SinkConfig(target=server.target, dataset_rid=rid, settings={"max_request_points": 1000}))
    dofn.setup()
    try:
        dofn.start_bundle()
        first = [{"channel": "txt", "timestamp": BASE + i, "value": v} for i, v in enumerate("ab?dé")]
        first[2] = {**first[2], "value": "bad\ud800"}
        outs = [list(dofn.process(e)) for e in first]
        assert [len(o) for o in outs] == [0, 0, 1, 0, 0]
        (f,) = outs[2]
        assert type(f) is FailedElement and f.element is first[2]
        assert f.reason.startswith("element {'channel': 'txt'") and "surrogates not allowed" in f.reason, f
        assert f.error == "InvalidValueError", f
        dofn.finish_bundle()
        expected: Stored = {("txt", ()): ("string", [(BASE, "a"), (BASE + 1, "b"), (BASE + 3, "d"), (BASE + 4, "é")])}
        assert_stored(server.store, rid, expected)

        # The same instance again: a surrogate as a new series' first value, and a bundle bigger
        # than HANDOVER_POINTS with surrogates before and after the handover.
        dofn.start_bundle()
        second: list[Any] = [
            ("txt2", BASE, "bad\ud800"),  # would pin txt2 as string
            ("txt2", BASE + 1, 2.5),  # so this must be accepted, as a double
            {"channel": "txt", "timestamp": BASE + 5, "value": "f"},
        ]
        big = [("big", BASE + i, f"v{i}") for i in range(HANDOVER_POINTS + 10)]
        bad_at = {3: ("big", BASE - 1, "x\ud800y"), HANDOVER_POINTS + 5: ("big", BASE - 2, "\udfff")}
        for i, e in enumerate(big):
            if i in bad_at:
                second.append(bad_at[i])
            second.append(e)
        failed = []
        for e in second:
            out = list(dofn.process(e))
            assert len(out) <= 1
            if out:
                assert out[0].element is e
                failed.append(e)
            if e is big[HANDOVER_POINTS + 5]:
                # Handed over and sent while the bundle is still open.
                assert 0 < _wait_for_points(server.store, rid, "big") < len(big)
        assert failed == [second[0], bad_at[3], bad_at[HANDOVER_POINTS + 5]]
        dofn.finish_bundle()
        expected[("txt", ())][1].append((BASE + 5, "f"))
        expected[("txt2", ())] = ("double", [(BASE + 1, 2.5)])
        expected[("big", ())] = ("string", [(t, v) for _, t, v in big])
        assert_stored(server.store, rid, expected)
    finally:
        dofn.teardown()


# -- real pipelines: bad elements of every kind amid good ones, global and fixed windows --------


class Item(NamedTuple):
    element: Any
    seconds: int  # the element's Beam timestamp
    points: list[tuple[str, dict[str, str] | None, str, int, Any]]  # what a good element stores
    words: tuple[str, ...]  # what a bad element's failure must say (empty for a good element)

    @property
    def bad(self) -> bool:
        return bool(self.words)


def _good(element: Any, seconds: int, *points: tuple[str, dict[str, str] | None, str, int, Any]) -> Item:
    return Item(element, seconds, list(points), ())


def _items() -> list[Item]:
    """The pipeline's elements, in order; all of them in one bundle."""
    items: list[Item] = []
    sec = iter(range(10**6))

    def good(element: Any, *points: tuple[str, dict[str, str] | None, str, int, Any]) -> None:
        items.append(_good(element, next(sec) % 95, *points))

    def bad(element: Any, *words: str) -> None:
        assert words
        items.append(Item(element, next(sec) % 95, [], words))

    # Series pinned by every shape, before any bad element.
    good(("p.f", BASE, 1.5), ("p.f", None, "double", BASE, 1.5))
    good(("p.i", BASE, 2**53 + 1), ("p.i", None, "int64", BASE, 2**53 + 1))
    good(("p.u", BASE, 2**63 + 1), ("p.u", None, "uint64", BASE, 2**63 + 1))
    good(("p.s", BASE, "héllo ✓", {"unit": "txt"}), ("p.s", {"unit": "txt"}, "string", BASE, "héllo ✓"))
    good({"channel": "d.n", "timestamp": BASE, "value": -7}, ("d.n", None, "int64", BASE, -7))
    good(
        {"timestamp": BASE, "w.a": 0.5, "w.b": "on", "w.i": 3, "w.gap": None},
        ("w.a", None, "double", BASE, 0.5),
        ("w.b", None, "string", BASE, "on"),
        ("w.i", None, "int64", BASE, 3),
    )
    good(
        (BASE + 1, {"w.a": -0.0, "w.b": "off", "w.i": -3}),
        ("w.a", None, "double", BASE + 1, -0.0),
        ("w.b", None, "string", BASE + 1, "off"),
        ("w.i", None, "int64", BASE + 1, -3),
    )
    good(
        ("s.f", np.array([BASE, BASE + 1]), np.array([math.nan, 2.0])),
        ("s.f", None, "double", BASE, math.nan),
        ("s.f", None, "double", BASE + 1, 2.0),
    )
    good(("a.f", BASE, [1.0, 2.0]), ("a.f", None, "double_array", BASE, [1.0, 2.0]))
    good(("a.s", BASE, ["x", "y"]), ("a.s", None, "string_array", BASE, ["x", "y"]))
    good(("st", BASE, {"k": 1}), ("st", None, "struct", BASE, '{"k":1}'))
    good(
        pa.table({"timestamp": [BASE, BASE + 1], "tbl.x": [1.0, None]}),
        ("tbl.x", None, "double", BASE, 1.0),
    )

    # More than HANDOVER_POINTS plain points of two series, one bad element of every kind amid the
    # first HANDOVER_POINTS of them and another after (the batch is handed over in between).
    n = HANDOVER_POINTS + 3000
    first, second = _bads(0), _bads(1)
    at = {i * (HANDOVER_POINTS - 1000) // len(first): b for i, b in enumerate(first)}
    at |= {HANDOVER_POINTS + 500 + i * 2000 // len(second): b for i, b in enumerate(second)}
    for i in range(n):
        if i in at:
            bad(at[i][0], *at[i][1])
        if i % 2:
            good(("big.f", BASE + i, i / 8), ("big.f", None, "double", BASE + i, i / 8))
        else:
            good(("big.i", BASE + i, -i), ("big.i", None, "int64", BASE + i, -i))
    assert sum(it.bad for it in items) == len(first) + len(second)
    # A series first seen in a rejected element is not pinned by it: these take other types.
    good(("n.big", BASE, "s"), ("n.big", None, "string", BASE, "s"))
    good(("n.w", BASE, "s"), ("n.w", None, "string", BASE, "s"))
    good(("w.arr", BASE, "s"), ("w.arr", None, "string", BASE, "s"))
    good({"channel": "n.none", "timestamp": BASE, "value": 1}, ("n.none", None, "int64", BASE, 1))
    # Good points of the series the bad elements meant, after them all.
    good(("p.f", BASE + 1, 2.5), ("p.f", None, "double", BASE + 1, 2.5))
    good((BASE + 2, {"w.a": 3.0, "w.b": "z", "w.i": 4}), ("w.a", None, "double", BASE + 2, 3.0),
         ("w.b", None, "string", BASE + 2, "z"), ("w.i", None, "int64", BASE + 2, 4))
    good(("p.u", BASE + 1, 5), ("p.u", None, "uint64", BASE + 1, 5))
    return items


def _bads(k: int) -> list[tuple[Any, tuple[str, ...]]]:
    """A bad element of every kind (the lone surrogate excepted: Beam's coders cannot carry one),
    with what its failure must say; ``k`` makes each copy's elements differ from another's."""
    t = BASE + 1000 + 100 * k
    return [
        # a value conflicting with its series' type, however the series was pinned
        (("p.f", t + 1, "text"), ("SeriesTypeError", "pinned to double", "'p.f'")),
        (("p.s", t + 2, 1.5, {"unit": "txt"}), ("SeriesTypeError", "pinned to string")),
        (("w.a", t + 3, "text"), ("SeriesTypeError", "pinned to double", "'w.a'")),  # pinned by a wide record
        ({"channel": "w.b", "timestamp": t + 4, "value": 2.0}, ("SeriesTypeError", "pinned to string")),
        (("s.f", t + 5, "text"), ("SeriesTypeError", "pinned to double", "'s.f'")),  # pinned by a series
        ((t + 6, {"w.a": 1.0, "w.b": "x", "w.i": "x"}), ("SeriesTypeError", "pinned to int64")),
        (("p.f", [t + 7], ["a"]), ("SeriesTypeError", "pinned to double")),
        (("a.f", t + 8, 1.0), ("SeriesTypeError", "pinned to double_array")),
        (("st", t + 9, 1.0), ("SeriesTypeError", "pinned to struct")),
        # ints out of their series' range
        (("p.i", t + 10, 2**63), ("SeriesTypeError", "beyond int64")),
        (("p.u", t + 11, 2**64), ("SeriesTypeError", str(2**64))),
        (("n.big", t + 12, 2**64), ("InvalidTypeError", "outside both int64 and uint64")),
        (("p.u", t + 13, -1), ("SeriesTypeError", "pinned to uint64")),
        ({"timestamp": t + 14, "w.a": 1.0, "w.i": 2**63}, ("SeriesTypeError", "beyond int64")),
        # timestamps
        (("p.f", 1.5 + k, 1.0), ("ElementError", "float timestamp")),
        (("p.f", dt.datetime(2024, 1, 1, 0, 0, k), 1.0), ("ElementError", "naive datetime")),
        (("p.f", 2**63 + k, 1.0), ("ElementError", "outside the int64 nanosecond range")),
        (("p.f", f"yesterday {k}", 1.0), ("ElementError", "ISO-8601")),
        ({"channel": "p.f", "timestamp": f"2024-01-01T00:00:{k:02d}", "value": 1.0}, ("ElementError", "ISO-8601")),
        (("s.f", [t + 15, 1.5], [1.0, 2.0]), ("ElementError", "timestamps", "float timestamp")),
        # None values
        (("p.f", t + 16, None), ("ElementError", "None")),
        ({"channel": "n.none", "timestamp": t + 17, "value": None}, ("ElementError", "None")),
        # channels
        (("", t + 18, 1.0), ("ElementError", "channel must be a non-empty string")),
        ((5, t + 19, 1.0), ("ElementError", "channel must be a non-empty string")),
        (("c" * (1025 + k), t + 20, 1.0), ("ElementError", "over 1024")),
        ((t + 21, {"": 1.0, "w.a": 2.0}), ("ElementError", "channel must be a non-empty string")),
        # tags
        (("p.f", t + 22, 1.0, ["k"]), ("ElementError", "tags must be a mapping")),
        (("p.f", t + 23, 1.0, {"k": 1}), ("ElementError", "str to str")),
        ({"channel": "p.f", "timestamp": t + 24, "value": 1.0, "tags": "k=v"}, ("ElementError", "tags")),
        # wide records with one bad value among good ones
        ((t + 25, {"w.a": 1.0, "w.b": "ok", "w.i": 2**64}), ("SeriesTypeError", "'w.i'")),
        ({"timestamp": t + 26, "w.a": 2.0, "w.b": 3.0, "n.w": 1.0}, ("SeriesTypeError", "pinned to string")),
        ((t + 27, {"n.w": 1.0, "w.arr": [1.0], "p.u": -1}), ("SeriesTypeError", "pinned to uint64")),
        # series elements
        (("s.f", [t + 28, t + 29], [1.0]), ("ElementError", "2 timestamps but 1 values")),
        (("s.f", [t + 30, t + 31], [1.0, "x"]), ("SeriesTypeError", "values[1]")),
        # not elements at all
        (42 + k, ("ElementError", "unsupported element type int")),
        ({"timestamp": t + 32, "value": 1.0}, ("ElementError", "no channel")),
        (("p.f", t + 33), ("ElementError", "a tuple of 2 items")),
    ]


def _generate(_: Any) -> Iterator[TimestampedValue]:
    for item in _items():
        yield TimestampedValue(item.element, item.seconds)


class _Seen(beam.DoFn):  # type: ignore[misc]
    """A failed element with the timestamp and window Beam gave it."""

    def process(
        self, f: FailedElement, ts: Any = beam.DoFn.TimestampParam, window: Any = beam.DoFn.WindowParam
    ) -> Iterator[tuple[str, int, Any, str]]:
        where = "global" if isinstance(window, GlobalWindow) else (window.start.micros, window.end.micros)
        yield repr(f.element), ts.micros, where, f"{type(f).__name__} {f.error}: {f.reason}"


@pytest.mark.parametrize("windowing", ["global", "fixed-10s"])
def test_exactly_the_bad_elements_fail_in_their_own_timestamp_and_window(server: LocalServer, windowing: str) -> None:
    rid = f"ri.test.failed.{windowing}"
    items = _items()
    bad = [it for it in items if it.bad]

    def window_of(seconds: int) -> Any:
        return "global" if windowing == "global" else (seconds // 10 * 10_000_000, (seconds // 10 + 1) * 10_000_000)

    want = [(repr(it.element), it.seconds * 1_000_000, window_of(it.seconds)) for it in bad]
    words = {(repr(it.element), it.seconds * 1_000_000): it.words for it in bad}

    def check(seen: list[tuple[str, int, Any, str]]) -> None:
        equal_to(want)([s[:3] for s in seen])
        for element, micros, _, text in seen:
            assert text.startswith("FailedElement "), text
            assert all(w in text for w in words[(element, micros)]), (element, text)

    with beam.Pipeline(runner=FnApiRunner()) as p:
        elements = p | beam.Impulse() | "Generate" >> beam.FlatMap(_generate)
        if windowing != "global":
            elements = elements | beam.WindowInto(FixedWindows(10))
        result = elements | WriteToNominal(server.target, dataset_rid=rid, max_request_points=5000)
        assert_that(result.failed | beam.ParDo(_Seen()), check)

    expected: Stored = {}
    for it in items:
        for channel, tags, vtype, ts, value in it.points:
            expected.setdefault((channel, tuple(sorted((tags or {}).items()))), (vtype, []))[1].append((ts, value))
    assert_stored(server.store, rid, expected)
