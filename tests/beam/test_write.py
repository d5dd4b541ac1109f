"""WriteToNominal end to end: real runners, a real local server, exact read-back."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.server import LocalServer, LocalStore

BASE = 1_700_000_000_000_000_000


class Point(NamedTuple):
    channel: str
    timestamp: Any
    value: Any


class Telemetry(NamedTuple):
    """A schema'd wide record: Beam encodes it with RowCoder."""

    timestamp: int
    sch_temp: float
    sch_mode: str
    sch_count: int


# Builtin types only (tuples, dicts, numpy, Arrow): multi-process workers cannot import this module.
SIMPLE: list[Any] = [
    ("t.float", BASE + 1, 1.5),
    ("t.float", BASE + 2, -0.0),
    ("t.float", BASE + 3, float("nan")),
    ("t.int", BASE + 1, 2**53 + 1),
    ("t.int", BASE + 2, -(2**63)),
    ("t.uint", BASE + 1, 2**63 + 5),
    ("t.uint", BASE + 2, 2**64 - 1),
    ("t.str", "2024-01-01T00:00:00.123456789Z", "héllo ✓", {"unit": "x"}),
    ("t.str", "2024-01-01T00:00:00.123456790+00:00", "", {"unit": "x"}),
    {"channel": "d.bool", "timestamp": BASE, "value": True},
    {"channel": "d.bool", "timestamp": BASE + 1, "value": False},
    {"timestamp": BASE + 10, "wide.a": 1.0, "wide.b": "on", "wide.gap": None},
    {"timestamp": BASE + 11, "wide.a": 2.0, "wide.b": "off", "tags": {"src": "t"}},
    (BASE + 12, {"wide.a": 3.0}, {"src": "t"}),
    ("s.f", np.array([BASE, BASE + 1, BASE + 1]), np.array([0.1, 0.2, 0.3])),
    ("s.i", [BASE + 5, BASE + 6], np.array([7, 8], dtype=np.int64), {"k": "v"}),
    ("a.f", BASE, [1.0, 2.0, 3.0]),
    ("a.f", BASE + 1, np.array([4.0])),
    ("a.s", BASE, ["a", "b"]),
    ("struct", BASE, {"k": 1, "n": [1, 2]}),
    pa.table({"timestamp": [BASE, BASE + 1], "tbl.x": [1.0, None], "tbl.y": ["p", "q"]}),
]

# What the store must hold for SIMPLE, written out by hand: (channel, tags) -> (type, points).
EXPECTED: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[tuple[int, Any]]]] = {
    ("t.float", ()): ("double", [(BASE + 1, 1.5), (BASE + 2, -0.0), (BASE + 3, math.nan)]),
    ("t.int", ()): ("int64", [(BASE + 1, 2**53 + 1), (BASE + 2, -(2**63))]),
    ("t.uint", ()): ("uint64", [(BASE + 1, 2**63 + 5), (BASE + 2, 2**64 - 1)]),
    ("t.str", (("unit", "x"),)): ("string", [(1704067200123456789, "héllo ✓"), (1704067200123456790, "")]),
    ("d.bool", ()): ("int64", [(BASE, 1), (BASE + 1, 0)]),
    ("wide.a", ()): ("double", [(BASE + 10, 1.0)]),
    ("wide.b", ()): ("string", [(BASE + 10, "on")]),
    ("wide.a", (("src", "t"),)): ("double", [(BASE + 11, 2.0), (BASE + 12, 3.0)]),
    ("wide.b", (("src", "t"),)): ("string", [(BASE + 11, "off")]),
    ("s.f", ()): ("double", [(BASE, 0.1), (BASE + 1, 0.2), (BASE + 1, 0.3)]),
    ("s.i", (("k", "v"),)): ("int64", [(BASE + 5, 7), (BASE + 6, 8)]),
    ("a.f", ()): ("double_array", [(BASE, [1.0, 2.0, 3.0]), (BASE + 1, [4.0])]),
    ("a.s", ()): ("string_array", [(BASE, ["a", "b"])]),
    ("struct", ()): ("struct", [(BASE, '{"k":1,"n":[1,2]}')]),
    ("tbl.x", ()): ("double", [(BASE, 1.0)]),
    ("tbl.y", ()): ("string", [(BASE, "p"), (BASE + 1, "q")]),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _order(point: tuple[int, Any]) -> tuple[int, str]:
    return point[0], repr(point[1])


def assert_stored(
    store: LocalStore, rid: str, expected: dict[Any, tuple[str, list[tuple[int, Any]]]]
) -> None:
    infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in store.list_series(rid)}
    assert sorted(infos) == sorted(expected)
    for key, (vtype, points) in expected.items():
        assert infos[key].value_type.value == vtype, key
        table = store.read(rid, key[0], dict(key[1]))
        got = list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
        assert len(got) == len(points), (key, got)
        # Points of one timestamp may arrive in either order: a series split across requests that
        # are in flight together is committed in the order the requests finish.
        got, points = sorted(got, key=_order), sorted(points, key=_order)
        for (gt, gv), (et, ev) in zip(got, points, strict=True):
            assert gt == et, (key, got)
            assert _same(gv, ev), (key, got, points)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("beam-write"), http_port=0) as srv:
        yield srv


def test_every_shape_round_trips_exactly_on_fn_api_runner(server: LocalServer) -> None:
    rid = "ri.test.shapes"
    bad = [
        {"timestamp": BASE, "value": 1.0},  # no channel
        ("t.float", "yesterday", 1.0),  # unparseable timestamp
        ("t.float", 1.5, 1.0),  # float timestamp: ambiguous
        ("t.obj", BASE, 1 + 2j),  # unsupported value
        ("t.none", BASE, None),  # no value
        ("", BASE, 1.0),  # empty channel
        42,  # not telemetry at all
        ("t.int", 2**63, 1),  # timestamp beyond int64 nanoseconds
        ("t.int", BASE + 7, 2**64),  # beyond uint64
        {"channel": "t.float", "timestamp": "2024-01-01T00:00:00", "value": 1.0},  # naive
    ]
    extra = [
        Point("nt.point", BASE, 5.0),
        beam.Row(channel="row.point", timestamp=BASE, value="r"),
        beam.Row(timestamp=BASE + 1, **{"row_wide": 6}),
    ]
    # Last in the same Create (one bundle, in order): meets the double series already pinned.
    conflict = ("t.float", BASE + 9, "text")
    expected = dict(EXPECTED)
    expected[("nt.point", ())] = ("double", [(BASE, 5.0)])
    expected[("row.point", ())] = ("string", [(BASE, "r")])
    expected[("row_wide", ())] = ("int64", [(BASE + 1, 6)])
    expected[("sch_temp", ())] = ("double", [(BASE + 20, 21.5)])
    expected[("sch_mode", ())] = ("string", [(BASE + 20, "cruise")])
    expected[("sch_count", ())] = ("int64", [(BASE + 20, 3)])

    def check_failed(failed: list[FailedElement]) -> None:
        by_element = {repr(f.element): f for f in failed}
        assert len(failed) == len(bad) + 1
        reasons = {k: f.reason for k, f in by_element.items()}
        assert "no channel" in reasons[repr(bad[0])]
        assert "timestamp" in reasons[repr(bad[1])] and "ISO-8601" in reasons[repr(bad[1])]
        assert "float timestamp" in reasons[repr(bad[2])]
        assert by_element[repr(conflict)].error == "SeriesTypeError"
        assert "pinned to double" in reasons[repr(conflict)]
        assert "'t.obj'" in reasons[repr(bad[3])] and "unsupported value type complex" in reasons[repr(bad[3])]
        assert "value of channel 't.none' is None" in reasons[repr(bad[4])]
        assert "channel must be a non-empty string" in reasons[repr(bad[5])]
        assert "unsupported element type int" in reasons[repr(bad[6])]
        assert "outside the int64 nanosecond range" in reasons[repr(bad[7])]
        # Whether the int64 series is pinned yet depends on the order the two Creates arrive in.
        assert "18446744073709551616" in reasons[repr(bad[8])] and "'t.int'" in reasons[repr(bad[8])]
        assert "timezone" in reasons[repr(bad[9])]

    with beam.Pipeline(runner=FnApiRunner()) as p:
        # Good elements first: the conflicting string must meet an already pinned double series.
        good = p | "Good" >> beam.Create([*SIMPLE, *extra, conflict])
        bad_p = p | "Bad" >> beam.Create(bad)
        schemad = (
            p
            | "Schemad" >> beam.Create([Telemetry(BASE + 20, 21.5, "cruise", 3)]).with_output_types(Telemetry)
            | beam.Select("timestamp", "sch_temp", "sch_mode", "sch_count")
        )
        elements = (good, bad_p, schemad) | beam.Flatten()
        result = elements | WriteToNominal(server.target, dataset_rid=rid)
        assert_that(result.failed, check_failed)
    assert_stored(server.store, rid, expected)


def _run(runner: Any, options: PipelineOptions, target: str, rid: str, **kw: Any) -> None:
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = (
            p
            | beam.Create(SIMPLE)
            | beam.Reshuffle()
            | WriteToNominal(target, dataset_rid=rid, max_request_points=3, **kw)
        )


@pytest.mark.parametrize("wire", ["grpc", "http-row", "http-columnar"])
def test_multi_processing_fn_api_runner(server: LocalServer, wire: str) -> None:
    rid = f"ri.test.multiproc.{wire}"
    opts = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
    if wire == "grpc":
        _run(FnApiRunner(), opts, server.target, rid)
    else:
        _run(FnApiRunner(), opts, server.http_url, rid, format=wire.removeprefix("http-"))
    assert_stored(server.store, rid, EXPECTED)


def test_portable_runner_embed_loopback(server: LocalServer) -> None:
    from apache_beam.runners.portability.portable_runner import PortableRunner

    rid = "ri.test.portable"
    opts = PipelineOptions(job_endpoint="embed", environment_type="LOOPBACK")
    _run(PortableRunner(), opts, server.target, rid)
    assert_stored(server.store, rid, EXPECTED)
