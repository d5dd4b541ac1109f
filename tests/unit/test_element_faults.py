"""A bad element becomes a ``FailedElement`` naming why; a fault of ours while reading one fails
the bundle (the runner retries it), never passing as the element's fault: a bug must not turn
good data into failed output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _stream_fakes import RecordingTarget

from beam_nominal import errors
from beam_nominal._pipeline import staging
from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.beam import _elements
from beam_nominal.beam._dofn import SinkConfig, WriteDoFn
from tests.unit._dofns import PythonWriteDoFn

B = 1_700_000_000_000_000_000
#: The class names a FailedElement's error may have: the checks' own errors.
_INPUT_ERRORS = {"ElementError", "InvalidTypeError", "InvalidValueError", "SeriesTypeError"}


@pytest.fixture(params=["compiled", "python"])
def dofn(request: pytest.FixtureRequest) -> Iterator[tuple[WriteDoFn, RecordingTarget]]:
    target = RecordingTarget()
    cls = WriteDoFn if request.param == "compiled" else PythonWriteDoFn
    fn = cls(SinkConfig(target=lambda: target, dataset_rid="ri.test.faults"))
    fn.setup()
    fn.start_bundle()
    try:
        yield fn, target
    finally:
        fn.teardown()


@pytest.mark.parametrize("fault", [TypeError, ValueError, RuntimeError, AttributeError, KeyError])
def test_a_fault_in_staging_fails_the_bundle_not_the_element(
    dofn: tuple[WriteDoFn, RecordingTarget], monkeypatch: pytest.MonkeyPatch, fault: type[Exception]
) -> None:
    fn, _ = dofn

    def broken(self: PointBatch, *args: object) -> None:
        raise fault("a bug in staging")

    monkeypatch.setattr(PointBatch, "add_record", broken)
    with pytest.raises(fault, match="a bug in staging"):
        list(fn.process((B, {"a": 1.0, "b": 2.0})))


def test_bad_input_still_becomes_failed_elements_with_the_reason(dofn: tuple[WriteDoFn, RecordingTarget]) -> None:
    fn, target = dofn
    bad = [
        ("c", B, object()),  # no Nominal type
        ("", B, 1.0),  # no channel
        ("c", "yesterday", 1.0),  # not a timestamp
        ("c", B, 1.0, {"t": 5}),  # a tag value that is not a str
        {"timestamp": B},  # a record without channels
    ]
    out = [f for element in [("c", B - 1, 0.5), *bad] for f in fn.process(element)]
    assert [f.element for f in out] == bad
    assert all(isinstance(f.error, str) and f.error in _INPUT_ERRORS for f in out), out
    assert "object" in out[0].reason and "channel" in out[1].reason and "yesterday" in out[2].reason
    assert "tags" in out[3].reason and "channels" in out[4].reason
    assert fn.finish_bundle() is None
    assert [p for pts in target.points().values() for p in pts] == [(B - 1, 0.5)]


def _raise(fault: type[Exception]) -> object:
    def broken(*args: object) -> None:
        raise fault("a bug on the read path")

    return broken


@pytest.mark.parametrize("fault", [TypeError, ValueError])
@pytest.mark.parametrize(
    ("module", "name", "element"),
    [
        (staging, "_first_value", ("new.c", B, "on")),  # the first value of a series
        (_elements, "_kind_of_fields", {"timestamp": B, "a": 1.0}),  # a flat wide record's shape
    ],
    ids=["first-value", "kind-of-fields"],
)
def test_a_type_or_value_error_of_ours_fails_the_bundle(
    dofn: tuple[WriteDoFn, RecordingTarget],
    monkeypatch: pytest.MonkeyPatch,
    fault: type[Exception],
    module: object,
    name: str,
    element: object,
) -> None:
    # A TypeError or ValueError no check raised on purpose is a fault of ours however much it
    # looks like bad input: the element is good, and the bundle is retried.
    fn, _ = dofn
    monkeypatch.setattr(module, name, _raise(fault))
    with pytest.raises(fault, match="a bug on the read path"):
        list(fn.process(element))


def test_the_checks_errors_are_the_builtin_kinds_callers_catch() -> None:
    for cls in (errors.ElementError, errors.InvalidValueError):
        assert issubclass(cls, ValueError) and issubclass(cls, errors.InputError)
    for cls in (errors.InvalidTypeError, errors.SeriesTypeError):
        assert issubclass(cls, TypeError) and issubclass(cls, errors.InputError)
    assert str(errors.ElementError("tags", "not a mapping")) == "tags: not a mapping"
