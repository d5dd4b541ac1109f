"""A bad element becomes a ``FailedElement`` naming why; a fault of ours while reading one fails
the bundle (the runner retries it), never passing as the element's fault: a bug must not turn
good data into failed output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.beam._dofn import SinkConfig, WriteDoFn

B = 1_700_000_000_000_000_000


@pytest.fixture
def dofn() -> Iterator[tuple[WriteDoFn, RecordingTarget]]:
    target = RecordingTarget()
    fn = WriteDoFn(SinkConfig(target=lambda: target, dataset_rid="ri.test.faults"))
    fn.setup()
    fn.start_bundle()
    try:
        yield fn, target
    finally:
        fn.teardown()


@pytest.mark.parametrize("fault", [RuntimeError, AttributeError, KeyError])
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
    assert all(f.error in ("ElementError", "SeriesTypeError", "TypeError", "ValueError") for f in out), out
    assert "object" in out[0].reason and "channel" in out[1].reason and "yesterday" in out[2].reason
    assert "tags" in out[3].reason and "channels" in out[4].reason
    assert fn.finish_bundle() is None
    assert [p for pts in target.points().values() for p in pts] == [(B - 1, 0.5)]
