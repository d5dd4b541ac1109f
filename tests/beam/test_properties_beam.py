"""Property test through Beam: a hypothesis-drawn list of points and series elements of every value
type and tag set, in one ``WriteToNominal`` pipeline on FnApiRunner into a real local server, reads
back equal, bit for bit. Few examples: each is a pipeline (tests/integration/test_properties.py has
many more through ``NominalStream``)."""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_nominal.beam import WriteToNominal
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore

pytestmark = pytest.mark.timeout(600)

_rids = itertools.count()
_TEXT = st.text(max_size=12)
# Values whose Python type alone says their value type, so a point element can carry them.
_POINT_VALUES: dict[ValueType, Any] = {
    ValueType.DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
    ValueType.INT64: st.integers(-(2**63), 2**63 - 1),
    ValueType.STRING: st.text(max_size=30),
    ValueType.STRUCT: st.dictionaries(_TEXT, st.integers(-(2**53), 2**53) | _TEXT | st.none(), max_size=3),
    ValueType.DOUBLE_ARRAY: st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=4),
    ValueType.STRING_ARRAY: st.lists(_TEXT, min_size=1, max_size=3),
}
_TAGS = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3))


@st.composite
def _elements(draw: Any) -> tuple[list[Any], dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[Any]]]]:
    elements: list[Any] = []
    want: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[Any]]] = {}
    for i in range(draw(st.integers(1, 8))):
        channel = f"{i}:{draw(st.text(max_size=15))}"
        tags = draw(_TAGS)
        key = (channel, tuple(sorted((tags or {}).items())))
        n = draw(st.integers(1, 6))
        ts = draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n, unique=True))
        if draw(st.booleans()):
            # A series element with a numpy column (uint64 only comes this way).
            vt = draw(st.sampled_from([ValueType.DOUBLE, ValueType.INT64, ValueType.UINT64]))
            strat = st.integers(0, 2**64 - 1) if vt is ValueType.UINT64 else _POINT_VALUES[vt]
            values = draw(st.lists(strat, min_size=n, max_size=n))
            col = np.array(values, dtype=vt.numpy_dtype)
            elements.append(
                (channel, np.array(ts, dtype=np.int64), col, tags) if tags is not None else (channel, ts, col)
            )
        else:
            vt = draw(st.sampled_from(list(_POINT_VALUES)))
            values = draw(st.lists(_POINT_VALUES[vt], min_size=n, max_size=n))
            for t, v in zip(ts, values, strict=True):
                elements.append((channel, t, v, tags) if tags is not None else (channel, t, v))
        stored = (
            [json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for v in values]
            if vt is ValueType.STRUCT
            else values
        )
        want[key] = (vt.value, sorted(zip(ts, map(_exact, stored), strict=True)))
    order = draw(st.permutations(range(len(elements))))
    return [elements[i] for i in order], want


def _exact(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list | tuple):
        return tuple(_exact(x) for x in v)
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, np.generic):
        v = v.item()
    return (type(v).__name__, v)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("beam-properties"), http_port=0) as srv:
        yield srv


@pytest.mark.parametrize("wire", ["grpc", "http"])
def test_drawn_elements_through_write_to_nominal_read_back_equal(server: LocalServer, wire: str) -> None:
    target = server.target if wire == "grpc" else server.http_url

    @settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_elements())
    def check(drawn: tuple[list[Any], dict[Any, tuple[str, list[Any]]]]) -> None:
        elements, want = drawn
        rid = f"ri.prop.beam.{wire}.{next(_rids)}"
        with beam.Pipeline(runner=FnApiRunner()) as p:
            result = (
                p
                | beam.Create(elements, reshuffle=False)
                | WriteToNominal(target, dataset_rid=rid, max_request_points=5)
            )
            assert_that(result.failed, equal_to([]))
        store = LocalStore(server.store.data_dir)
        got = {}
        for key, table in store.read_all(rid).items():
            vt = store.series_info(rid, key.channel, dict(key.tags)).value_type.value
            pts = zip(
                table.column("timestamp").to_pylist(), map(_exact, table.column("value").to_pylist()), strict=True
            )
            got[(key.channel, key.tags)] = (vt, sorted(pts))
        assert got == want
        assert sorted(store.read_all(rid)) == sorted(SeriesKey(c, t) for c, t in want)

    check()
