"""The fast path for single points is written twice: ``PointBatch.add_fast`` (under
``NominalStream.enqueue`` and every element reader) and the compiled ``WriteDoFn.process``
(``_pipeline/_fastpath.c``: in Python the call and the rule cost more than nominal-streaming's whole
sink). Both must take exactly the same points of known series, append them the same way, and
leave every other one to the checked path (the compiled one makes no series: a new series' first
point goes to the element's reader, whose add_fast makes it). These tests hold them together,
value by value and for every element shape the compiled process reads (tuple, dict,
``beam.Row``, point NamedTuple), and hold the Python ``process`` used where the module is not
built to the same points.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.beam._dofn import SinkConfig, WriteDoFn, WriteSeriesBatchesDoFn
from tests.unit._dofns import IMPLEMENTATIONS, PythonWriteDoFn

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
    batch.add_point("c", B - 1, 0.25, None)  # makes "c" a known double series
    return batch


@pytest.mark.compiled
def test_the_compiled_process_is_built_and_is_the_one_writedofn_uses() -> None:
    # make test and CI build it (setup.py); were it silently missing, the suite would test and
    # the benchmarks measure only the Python process.
    from beam_nominal._pipeline import _fastpath

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


def _pin_c(fn: WriteDoFn) -> None:
    """Make "c" a known double series of the bundle: its first point, read by the checked path."""
    assert list(fn.process(("c", B - 1, 0.25))) == []


def _doubles(batch: PointBatch) -> list[Any]:
    """The batch's double points as (code, ns, value) items, in order, as the flat list holds
    other points."""
    codes, ts, values = batch.doubles.columns()
    columns = (np.frombuffer(codes, np.int64), np.frombuffer(ts, np.int64), np.frombuffer(values, np.float64))
    return [x for point in zip(*(c.tolist() for c in columns), strict=True) for x in point]


def _taken_inline(fn: WriteDoFn, element: Any) -> tuple[bool, list[Any]]:
    """Whether ``process`` appended ``element`` itself, and what it appended; the reader it
    would otherwise call is a spy, so nothing else touches the batch."""
    calls: list[Any] = []
    fn._readers[type(element)] = calls.append
    before = _doubles(fn._batch)
    out = list(fn.process(element))
    assert out == []
    appended = _doubles(fn._batch)[len(before) :]
    assert _doubles(fn._batch)[: len(before)] == before
    if calls:
        assert calls == [element] and appended == []
    return not calls, appended


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("point", CANDIDATES, ids=repr)
def test_process_and_add_fast_take_the_same_points(dofn: WriteDoFn, shape: str, point: tuple[Any, Any, Any]) -> None:
    _pin_c(dofn)
    if shape == "namedtuple":
        dofn._points.add(Point)
    if shape == "row":
        dofn._rows.add(type(beam.Row(channel="c", timestamp=1, value=1.0)))
    element = SHAPES[shape](*point)
    reference = _batch()
    flat = _doubles(reference)
    new = type(point[0]) is str and point[0] not in reference.float_codes
    took = bool(reference.add_fast(*point))
    inline, appended = _taken_inline(dofn, element)
    if isinstance(dofn, PythonWriteDoFn) and shape != "tuple":
        took = False  # the Python process leaves these to their readers, which call add_fast
    if new and not isinstance(dofn, PythonWriteDoFn):
        # The compiled process makes no series: a new one's first point goes to its reader,
        # whose add_fast makes it, and the series' next points are taken inline.
        took = False
    assert inline == took, f"{shape} {point!r}: WriteDoFn.process took={inline}, PointBatch.add_fast took={took}"
    if took:
        # To the bit: float.hex tells NaN's and -0.0's apart, which == does not.
        exact = [x.hex() if isinstance(x, float) else x for x in appended]
        assert exact == [x.hex() if isinstance(x, float) else x for x in _doubles(reference)[len(flat) :]]


def test_the_fast_path_takes_the_plain_point_of_every_shape(dofn: WriteDoFn) -> None:
    # Not vacuous: each shape does reach the inline path, and a point with tags never does.
    _pin_c(dofn)
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


def test_a_new_series_first_point_makes_it_and_its_next_points_are_taken_inline(dofn: WriteDoFn) -> None:
    # Whichever copy takes the first point (add_fast inline, or the compiled process's reader),
    # the series is made once and both points land in order.
    _pin_c(dofn)
    assert list(dofn.process(("new", B, 1.5))) == []
    assert _taken_inline(dofn, ("new", B + 1, 2.5))[0]
    reference = _batch()
    assert reference.add_fast("new", B, 1.5) and reference.add_fast("new", B + 1, 2.5)
    assert _doubles(dofn._batch) == _doubles(reference)


def test_points_after_a_wide_row_take_the_checked_path(dofn: WriteDoFn) -> None:
    # Rows pending: a single point must settle them first (series keep arrival order), so
    # neither copy takes it.
    _pin_c(dofn)
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

    def failing_hand_over() -> None:
        dofn._batch.take()  # the points left the batch, then the hand-over failed
        raise SeriesTypeError("refused at the hand-over")

    dofn._handover = failing_hand_over  # type: ignore[method-assign]
    dofn._fast_limit = 2  # hand over at the second point
    dofn._rebind()
    assert list(dofn.process(("c", B, 0.5))) == []  # new to the batch: its reader pins it double
    assert dofn._batch.float_codes == {"c": 0}
    with pytest.raises(SeriesTypeError, match="at the hand-over"):
        dofn.process(("c", B + 1, 0.5))
    assert len(dofn._batch.doubles) == 0


class RaisingHash(str):
    """A channel equal to "c" whose ``__hash__`` raises ``error``."""

    error: type[Exception] = ValueError

    def __hash__(self) -> int:
        raise self.error("no hash")

    __eq__ = str.__eq__


@pytest.mark.parametrize("error", [ValueError, RuntimeError])
@pytest.mark.parametrize("shape", ["tuple", "dict"])
def test_a_channel_whose_hash_raises_fails_the_bundle(dofn: WriteDoFn, shape: str, error: type[Exception]) -> None:
    # A channel whose __hash__ raises is a broken object, not a value a check refuses, so no
    # FailedElement: the bundle fails. The compiled process and add_fast take a failed lookup
    # (KeyError, TypeError, ValueError) for "not a fast point", so the tuple and the dict meet
    # the error alike, on the checked path.
    class Broken(RaisingHash):
        pass

    Broken.error = error
    _pin_c(dofn)
    with pytest.raises(error, match="no hash"):
        dofn.process(SHAPES[shape](Broken("c"), B, 0.5))
    if error is ValueError:
        assert not PointBatch().add_fast(Broken("c"), B, 0.5)


def test_a_channel_whose_hash_rebinds_the_dofn_never_appends_a_code_to_another_batch(dofn: WriteDoFn) -> None:
    # As add_fast (a method of one batch): a series code goes only to the double points of the
    # batch whose float_codes map gave it. The compiled process holds the map and list it was
    # bound to; when the lookup rebinds them it appends nothing and hands the element to the
    # checked path.
    _pin_c(dofn)
    old = dofn._batch
    slow: list[Any] = []
    dofn._slow = lambda element: slow.append(element) or ()  # type: ignore[method-assign]

    class Rebinding(str):
        def __hash__(self) -> int:
            if dofn._batch is old:
                dofn._batch = PointBatch()
                dofn._rebind()
            return str.__hash__(self)

        __eq__ = str.__eq__

    element = (Rebinding("c"), B, 0.5)
    assert list(dofn.process(element)) == []
    assert len(dofn._batch.doubles) == 0
    if not isinstance(dofn, PythonWriteDoFn):
        assert (_doubles(old)[3:], slow) == ([], [element])
    else:
        assert (_doubles(old)[3:], slow) == ([old.float_codes["c"], B, 0.5], [])


def test_the_compiled_process_follows_the_batch_rebinding_its_list_and_map(dofn: WriteDoFn) -> None:
    # The compiled process holds the batch's float_codes map and double points; every rebinding
    # (a settle, the fast paths closed by a wide record and opened again, a new bundle's clear)
    # must reach it, or points would go to a list nobody reads.
    batch = dofn._batch
    batch.add_point("c", B - 1, 0.25, None)
    assert list(dofn.process(("c", B, 0.5))) == []
    batch.take()  # a settle
    assert list(dofn.process(("c", B + 1, 0.75))) == []
    assert _doubles(batch) == [batch.float_codes["c"], B + 1, 0.75]
    batch.add_record(B + 2, {"c": 1.5})  # rows pending: float_codes closed
    assert list(dofn.process(("c", B + 3, 2.5))) == []
    batch.add_point("c", B + 4, 3.5, None)
    assert list(dofn.process(("c", B + 5, 4.5))) == []  # the rows settled: open again
    taken = batch.take()
    assert [float(v) for b, _ in taken for v in b.values] == [0.75, 1.5, 2.5, 3.5, 4.5]
    batch.clear()
    batch.add_point("d", B, 0.25, None)
    assert list(dofn.process(("d", B + 1, 0.5))) == []
    assert _doubles(batch)[3:] == [batch.float_codes["d"], B + 1, 0.5]


@pytest.mark.compiled
def test_a_class_lookup_that_rebinds_the_dofn_does_not_read_a_freed_set() -> None:
    # The point classes' set is looked up with the element's class; a metaclass's __eq__ runs
    # Python code, here dropping the set being searched. The compiled process must hold it for
    # the lookup, or it reads freed memory (a crash under PYTHONMALLOC=debug, which poisons it).
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = """if True:
        from beam_nominal._pipeline._fastpath import DoublePoints, FastProcess

        class Batch: pass
        class Fn(FastProcess):
            def _slow(self, element): return "slow"
        fn, batch = Fn(), Batch()
        batch.float_codes, batch.doubles = {"c": 0}, DoublePoints()
        class Meta(type):
            def __hash__(cls): return 1
            def __eq__(cls, other):
                fn._bind_fast(batch, set(), set(), "timestamp", 99)  # frees the set searched
                return False
        class Known(tuple, metaclass=Meta): pass
        class Other(tuple, metaclass=Meta): pass
        fn._bind_fast(batch, {Known}, set(), "timestamp", 99)  # the only reference to the set
        assert fn.process(Other(("c", 1, 0.5))) == "slow"
        print("ok")
    """
    env = {**os.environ, "PYTHONMALLOC": "debug"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("cls", [WriteDoFn, WriteSeriesBatchesDoFn], ids=lambda c: c.__name__)
def test_the_dofn_pickles_with_every_protocol(cls: type[WriteDoFn], protocol: int) -> None:
    # Protocols 0 and 1 (copyreg's default reduce) cannot copy a compiled base class: "cannot
    # pickle 'FastProcess' object" until WriteDoFn said how it is rebuilt (__reduce__).
    fn = cls(SinkConfig(target=RecordingTarget, dataset_rid="ri.test.fast"))
    copied = pickle.loads(pickle.dumps(fn, protocol=protocol))
    assert type(copied) is cls and copied._config == fn._config
    copied.setup()
    copied.start_bundle()
    try:
        if cls is WriteDoFn:
            copied._batch.add_point("c", B - 1, 0.25, None)
            assert list(copied.process(("c", B, 0.5))) == []  # bound to its own new batch
            assert _doubles(copied._batch)[3:] == [copied._batch.float_codes["c"], B, 0.5]
        assert copied.finish_bundle() is None
    finally:
        copied.teardown()


@pytest.mark.parametrize("error", [TypeError, RuntimeError])
@pytest.mark.parametrize("known", ["points", "rows"])
def test_an_element_whose_class_cannot_be_hashed_fails_the_bundle(
    dofn: WriteDoFn, known: str, error: type[Exception]
) -> None:
    # process looks the element's class up in the point and Row classes; a metaclass's hash
    # may raise there. The Python process meets the same error in _slow's reader lookup: no
    # check raised it, so it fails the bundle, a TypeError too; so must the compiled.
    class Meta(type):
        def __hash__(cls) -> int:
            raise error("no hash for the class")

        __eq__ = type.__eq__

    class Odd(metaclass=Meta):
        pass

    if known == "points":
        dofn._points.add(Point)
    else:
        dofn._rows.add(type(beam.Row(channel="c", timestamp=1, value=1.0)))
    with pytest.raises(error, match="no hash for the class"):
        dofn.process(Odd())


def test_every_point_goes_to_its_own_series_whatever_the_channel_cache_holds(dofn: WriteDoFn) -> None:
    # The compiled process caches channels by their characters. More channels than its table
    # has slots (it must stop adding at its bound, or its probes would never end), names alike
    # but for their last characters (paths of one plant), non-ASCII names of one byte and of two
    # a character, each point's channel a new str as decoded data gives; and two bundles
    # numbering the series in opposite orders, so a code kept from the first would put points in
    # the wrong series.
    paths = [f"plant/area-7/line-3/cell-12/robot-arm-4/joint-2/motor/temperature/{i:03d}" for i in range(40)]
    names = paths + [f"ch{i}" for i in range(600)] + ["température", "温度", "x" * 80 + "a", "x" * 80 + "b"]
    for order in (names, names[::-1]):
        batch = dofn._batch
        batch.clear()  # a new bundle's batch: the series numbered afresh
        for name in order:
            batch.add_point(name, B, -1.0, None)
        for i in range(3):
            for j, name in enumerate(order):
                assert list(dofn.process(("".join(list(name)), B + 1 + i, float(j)))) == []
        got = {b.key.channel: [float(v) for v in b.values] for b, _ in batch.take()}
        assert got == {name: [-1.0, float(j), float(j), float(j)] for j, name in enumerate(order)}


def test_both_processes_hand_over_at_the_same_elements_whichever_list_fills(dofn: WriteDoFn) -> None:
    # The compiled process appends to the batch's doubles only and counts those; the checked
    # path counts doubles and the flat list each by itself (PointBatch.singles_due). Were it to
    # count their sum, the Python process (whose dicts take the checked path) would hand over
    # before the compiled one, and single points held would not be bounded as stated.
    dofn._fast_limit = 4
    dofn._rebind()
    batch = dofn._batch
    seen: list[tuple[int, int]] = []
    hand_over = dofn._handover

    def counted() -> None:
        seen.append((len(batch.doubles), len(batch.flat) // 3))
        hand_over()

    dofn._handover = counted  # type: ignore[method-assign]
    for i in range(3):
        assert list(dofn.process(("i", B + i, i))) == []  # ints: the flat list
    for i in range(4):
        assert list(dofn.process({"channel": "d", "timestamp": B + i, "value": i + 0.5})) == []
    assert seen == [(4, 3)]
    for i in range(4):
        assert list(dofn.process(("i", B + 10 + i, i))) == []
    assert seen == [(4, 3), (0, 4)]


def test_a_mapping_whose_class_has_point_fields_is_read_as_a_mapping(dofn: WriteDoFn) -> None:
    # A class with NamedTuple-like _fields that is not a tuple: were the compiled process to read
    # it as a tuple once its class is known, the second element would crash it.
    class Fielded(dict):  # type: ignore[type-arg]
        _fields = ("channel", "timestamp", "value")

    _pin_c(dofn)
    for i in range(3):
        assert list(dofn.process(Fielded(channel="c", timestamp=B + i, value=i + 0.5))) == []
    assert Fielded not in dofn._points
    taken = dofn._batch.take()
    assert [float(v) for b, _ in taken for v in b.values] == [0.25, 0.5, 1.5, 2.5]
