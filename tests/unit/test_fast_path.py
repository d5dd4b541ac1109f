"""The fast path for single points is written twice: ``PointBatch.add_fast`` (under
``NominalStream.enqueue`` and every element reader) and the compiled ``WriteDoFn.process``
(``beam/_fastpath.c``: in Python the call and the rule cost more than nominal-streaming's whole
sink). Both must take exactly the same points, append them the same way, and leave every other
one to the checked path. These tests hold them together, value by value and for every element
shape the compiled process reads (tuple, dict, ``beam.Row``, point NamedTuple), and hold the
Python ``process`` used where the module is not built to the same points.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.beam._dofn import SinkConfig, WriteDoFn, _PythonProcess

B = 1_700_000_000_000_000_000


class Point(NamedTuple):
    channel: str
    timestamp: int
    value: float


class Reordered(NamedTuple):  # a point, but not in (channel, timestamp, value) order
    value: float
    channel: str
    timestamp: int


class FloatSub(float):
    pass


class IntSub(int):
    pass


class StrSub(str):
    pass


# (channel, timestamp, value): every way a point can be almost a fast one. "c" is a known
# double series, "new" is not known yet.
CANDIDATES: list[tuple[Any, Any, Any]] = [
    ("c", B, 0.5),
    ("c", B, float("nan")),
    ("c", B, float("-inf")),
    ("c", 0, -0.0),
    ("c", -(2**63) + 1, 1.0),
    ("c", 2**63 - 1, 1.0),
    ("c", -(2**63), 1.0),
    ("c", 2**63, 1.0),
    ("c", -(2**64), 1.0),
    ("c", B, 1),
    ("c", B, True),
    ("c", B, np.float64(0.5)),
    ("c", B, FloatSub(0.5)),
    ("c", B, "text"),
    ("c", B, None),
    ("c", B, [1.0]),
    ("c", True, 1.0),
    ("c", IntSub(B), 1.0),
    ("c", np.int64(B), 1.0),
    ("c", float(B), 1.0),
    ("c", "2024-01-01T00:00:00Z", 1.0),
    ("new", B, 1.0),
    (StrSub("c"), B, 1.0),
    (["c"], B, 1.0),
    (None, B, 1.0),
    ("", B, 1.0),
]


def _batch() -> PointBatch:
    batch = PointBatch()
    batch.add_tagged("c", B - 1, 0.25, None)  # makes "c" a known double series
    return batch


class PythonWriteDoFn(_PythonProcess, WriteDoFn):  # type: ignore[misc]
    """WriteDoFn as it is where the compiled module is not built."""


IMPLEMENTATIONS = {"compiled": WriteDoFn, "python": PythonWriteDoFn}


def test_the_compiled_process_is_built_and_is_the_one_writedofn_uses() -> None:
    # make test and CI build it (setup.py); were it silently missing, the suite would test and
    # the benchmarks measure only the Python process.
    from beam_nominal.beam import _fastpath

    assert WriteDoFn.process is _fastpath.FastProcess.process  # type: ignore[comparison-overlap]


@pytest.fixture(params=IMPLEMENTATIONS)
def dofn(request: pytest.FixtureRequest) -> Iterator[WriteDoFn]:
    target = RecordingTarget()
    fn = IMPLEMENTATIONS[request.param](SinkConfig(target=lambda: target, dataset_rid="ri.test.fast"))
    fn.setup()
    fn.start_bundle()
    try:
        yield fn
    finally:
        fn.teardown()


SHAPES: dict[str, Callable[[Any, Any, Any], Any]] = {
    "tuple": lambda c, t, v: (c, t, v),
    "dict": lambda c, t, v: {"channel": c, "timestamp": t, "value": v},
    "row": lambda c, t, v: beam.Row(channel=c, timestamp=t, value=v),
    "namedtuple": Point,
}


def _taken_inline(fn: WriteDoFn, element: Any) -> tuple[bool, list[Any]]:
    """Whether ``process`` appended ``element`` itself, and what it appended; the reader it
    would otherwise call is a spy, so nothing else touches the batch."""
    calls: list[Any] = []
    fn._readers[type(element)] = calls.append
    before = list(fn._batch.flat)
    out = list(fn.process(element))
    assert out == []
    appended = fn._batch.flat[len(before) :]
    assert fn._batch.flat[: len(before)] == before
    if calls:
        assert calls == [element] and appended == []
    return not calls, appended


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("point", CANDIDATES, ids=repr)
def test_process_and_add_fast_take_the_same_points(dofn: WriteDoFn, shape: str, point: tuple[Any, Any, Any]) -> None:
    dofn._batch.add_tagged("c", B - 1, 0.25, None)
    if shape == "namedtuple":
        dofn._points.add(Point)
    if shape == "row":
        dofn._rows.add(type(beam.Row(channel="c", timestamp=1, value=1.0)))
    element = SHAPES[shape](*point)
    reference = _batch()
    flat = list(reference.flat)
    took = reference.add_fast(*point)
    inline, appended = _taken_inline(dofn, element)
    if isinstance(dofn, PythonWriteDoFn) and shape != "tuple":
        took = False  # the Python process leaves these to their readers, which call add_fast
    assert inline == took, f"{shape} {point!r}: WriteDoFn.process took={inline}, PointBatch.add_fast took={took}"
    if took:
        assert appended == reference.flat[len(flat) :]
        assert [type(x) for x in appended] == [int, int, float]


def test_the_fast_path_takes_the_plain_point_of_every_shape(dofn: WriteDoFn) -> None:
    # Not vacuous: each shape does reach the inline path, and a point with tags never does.
    dofn._batch.add_tagged("c", B - 1, 0.25, None)
    dofn._points.add(Point)
    dofn._rows.add(type(beam.Row(channel="c", timestamp=1, value=1.0)))
    for shape, make in SHAPES.items():
        if isinstance(dofn, PythonWriteDoFn) and shape != "tuple":
            continue
        assert _taken_inline(dofn, make("c", B, 0.5))[0], shape
    tagged = {"channel": "c", "timestamp": B, "value": 0.5, "tags": {"k": "v"}}
    assert not _taken_inline(dofn, tagged)[0]
    assert not _taken_inline(dofn, ("c", B, 0.5, {"k": "v"}))[0]
    assert not _taken_inline(dofn, Reordered(0.5, "c", B))[0]


def test_points_after_a_wide_row_take_the_checked_path(dofn: WriteDoFn) -> None:
    # Rows pending: a single point must settle them first (series keep arrival order), so
    # neither copy takes it.
    dofn._batch.add_tagged("c", B - 1, 0.25, None)
    dofn._batch.add_record(B, {"c": 1.5, "d": 2.5})
    reference = _batch()
    reference.add_record(B, {"c": 1.5, "d": 2.5})
    assert not reference.add_fast("c", B + 1, 0.5)
    assert not _taken_inline(dofn, ("c", B + 1, 0.5))[0]


def test_a_failed_hand_over_on_the_fast_path_is_raised_not_taken_for_a_slow_element(dofn: WriteDoFn) -> None:
    # The hand-over runs outside the fast path's own try: were its error taken for "not a fast
    # point", the element would be read again into the emptied batch and the points handed over
    # with it would be gone without a word.
    from beam_nominal.errors import SeriesTypeError

    dofn._stream.enqueue("c", B - 5, "text")  # the stream pins "c" to string; the batch will not know
    dofn._flat_limit = 6  # hand over at the second point
    dofn._rebind()
    assert list(dofn.process(("c", B, 0.5))) == []  # new to the batch: its reader pins it double
    assert dofn._batch.fast == {"c": 0}
    with pytest.raises(SeriesTypeError):
        dofn.process(("c", B + 1, 0.5))
    assert dofn._batch.flat == []
