"""The bad-input catalogue (``_bad_inputs.CASES``, the table in docs/reliability.md), one test per
kind: the element amid good points in one bundle of a real ``WriteDoFn`` whose target records the
bytes it is sent (decoded again, so encoding really happens). A bad element comes back as exactly
one ``FailedElement`` (its error class, a reason naming what is wrong); a good one stores exactly
its points; either way every good point around it is stored exactly and nothing else is.

``test_catalogue_through_nominal_stream`` puts every value-level case's value straight into
``NominalStream.enqueue`` (the path without Beam): refused with the same kind of error, or stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _bad_inputs import CASES, Case, Failed, Point, exact
from _stream_fakes import RecordingTarget

from beam_nominal.beam import FailedElement
from beam_nominal.beam._dofn import SinkConfig, WriteDoFn
from beam_nominal.stream import NominalStream
from tests.unit._dofns import PythonWriteDoFn

B = 1_700_000_000_000_000_000
# Good points before and after every case, of series no case uses.
GOOD_BEFORE = [("good.f", B + i, i / 4) for i in range(50)] + [("good.s", B, "ok", {"t": "1"})]
GOOD_AFTER = [("good.f", B + 50 + i, -i / 8) for i in range(50)] + [(B + 1, {"good.w": 7, "good.wf": math.inf})]
GOOD_POINTS: list[Point] = (
    [("good.f", {}, "double", B + i, i / 4) for i in range(50)]
    + [("good.s", {"t": "1"}, "string", B, "ok")]
    + [("good.f", {}, "double", B + 50 + i, -i / 8) for i in range(50)]
    + [("good.w", {}, "int64", B + 1, 7), ("good.wf", {}, "double", B + 1, math.inf)]
)


def as_points(got: dict[Any, list[tuple[int, object]]]) -> list[tuple[Any, ...]]:
    return sorted((k.channel, tuple(k.tags), t, exact(v)) for k, pts in got.items() for t, v in pts)


def expected(points: list[Point]) -> list[tuple[Any, ...]]:
    return sorted((ch, tuple(sorted(tags.items())), t, exact(v)) for ch, tags, _vt, t, v in points)



@pytest.fixture(params=["compiled", "python"])
def dofn(request: pytest.FixtureRequest) -> Iterator[tuple[WriteDoFn, RecordingTarget]]:
    target = RecordingTarget()
    cls = WriteDoFn if request.param == "compiled" else PythonWriteDoFn
    fn = cls(SinkConfig(target=lambda: target, dataset_rid="ri.test.catalogue"))
    fn.setup()
    try:
        yield fn, target
    finally:
        fn.teardown()


def test_catalogue_has_forty_kinds_or_more() -> None:
    assert len(CASES) >= 40
    assert sum(isinstance(c.outcome, Failed) for c in CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_catalogue_case(case: Case, dofn: tuple[WriteDoFn, RecordingTarget]) -> None:
    fn, target = dofn
    fn.start_bundle()
    outs: list[FailedElement] = []
    for e in GOOD_BEFORE:
        assert list(fn.process(e)) == []
    want = list(GOOD_POINTS)
    for element, points in case.context:
        assert list(fn.process(element)) == []
        want += points
    outs = list(fn.process(case.element))
    for e in GOOD_AFTER:
        assert list(fn.process(e)) == []
    fn.finish_bundle()
    if isinstance(case.outcome, Failed):
        assert len(outs) == 1, outs
        (f,) = outs
        assert f.element is case.element
        assert f.error == case.outcome.error, f
        for word in case.outcome.words:
            assert word in f.reason, (word, f.reason[:400])
    else:
        assert outs == []
        want += case.outcome.points
    assert as_points(target.points()) == expected(want)


# -- the same values through NominalStream.enqueue (no Beam) -------------------------------------


def _point_cases() -> list[Case]:
    """Cases whose element is a plain (channel, timestamp, value[, tags]) point with no context."""
    return [
        c
        for c in CASES
        if type(c.element) is tuple
        and len(c.element) in (3, 4)
        and isinstance(c.element[0], str)
        and not c.context
        and not isinstance(c.element[1], list | np.ndarray)
    ]


@pytest.mark.parametrize("case", _point_cases(), ids=[c.id for c in _point_cases()])
def test_catalogue_through_nominal_stream(case: Case) -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.test.catalogue", linger=None)
    s.enqueue("good", B, 1.0)
    if isinstance(case.outcome, Failed):
        with pytest.raises((TypeError, ValueError)) as info:
            s.enqueue(*case.element)
        for word in case.outcome.words:
            assert word in str(info.value), (word, str(info.value)[:400])
        want = [("good", {}, "double", B, 1.0)]
    else:
        s.enqueue(*case.element)
        want = [("good", {}, "double", B, 1.0), *case.outcome.points]
    s.enqueue("good", B + 1, 2.0)
    report = s.close()
    assert report.failed_points == 0
    assert as_points(target.points()) == expected([*want, ("good", {}, "double", B + 1, 2.0)])
