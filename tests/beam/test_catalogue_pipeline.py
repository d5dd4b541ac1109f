"""The bad-input catalogue (tests/unit/_bad_inputs.py, docs/reliability.md) through a real pipeline:
every case Beam can carry, with its context and good points around it, in one ``WriteToNominal``
on FnApiRunner into a real local server. The failed output holds exactly the bad elements, each
once with its error class; every good point reads back exactly (bits of NaNs and -0.0, int vs
float) and nothing else is stored.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.server import LocalServer, LocalStore

pytestmark = pytest.mark.timeout(300)


def _catalogue() -> Any:
    # The unit tier's module, loaded by path: this tier must also run alone (make beam).
    path = Path(__file__).resolve().parent.parent / "unit" / "_bad_inputs.py"
    spec = importlib.util.spec_from_file_location("_bad_inputs", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get("_bad_inputs")
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["_bad_inputs"] = module
        spec.loader.exec_module(module)
    return module


cat = _catalogue()
B = cat.B
GOOD = [("good.f", B + i, i / 4 if i % 3 else -0.0) for i in range(200)] + [("good.n", B, math.nan)]


def _cases() -> list[Any]:
    return [c for c in cat.CASES if c.beam]


def _elements(_: Any) -> Iterator[Any]:
    # Generated inside the pipeline and fused with the write: one bundle, in this order, so each
    # case's context is seen before it. Good points go between every two cases.
    good = iter(GOOD)
    for case in _cases():
        for element, _points in case.context:
            yield element
        yield case.element
        yield next(good, ("good.tail", B, 1.0))
    yield from good


class _Failed(beam.DoFn):  # type: ignore[misc]
    def process(self, f: FailedElement) -> Iterator[tuple[str, str]]:
        yield repr(f.element)[:2000], f.error


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("catalogue"), port=0) as srv:
        yield srv


def test_catalogue_through_write_to_nominal(server: LocalServer) -> None:
    rid = "ri.test.catalogue.beam"
    cases = _cases()
    want_failed = [(repr(c.element)[:2000], c.outcome.error) for c in cases if isinstance(c.outcome, cat.Failed)]
    assert len(want_failed) >= 35
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Impulse() | beam.FlatMap(_elements) | WriteToNominal(server.target, dataset_rid=rid)
        assert_that(result.failed | beam.ParDo(_Failed()), equal_to(want_failed))

    want: list[tuple[Any, ...]] = []
    used = 0
    for c in cases:
        for _element, points in c.context:
            want += [(ch, tuple(sorted(t.items())), vt, ts, cat.exact(v)) for ch, t, vt, ts, v in points]
        if isinstance(c.outcome, cat.Stored):
            want += [(ch, tuple(sorted(t.items())), vt, ts, cat.exact(v)) for ch, t, vt, ts, v in c.outcome.points]
        used += 1
    goods = GOOD + [("good.tail", B, 1.0)] * max(0, used - len(GOOD))
    want += [(ch, (), "double", ts, cat.exact(v)) for ch, ts, v in goods]
    got = []
    for key, table in LocalStore(server.store.data_dir).read_all(rid).items():
        vt = server.store.series_info(rid, key.channel, dict(key.tags)).value_type.value
        for ts, v in zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True):
            got.append((key.channel, key.tags, vt, ts, cat.exact(v)))
    assert sorted(got) == sorted(want)
