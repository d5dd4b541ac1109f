"""Batches the target refuses for good, with a fallback target: they go to the fallback, like any
request the target finally refused; if the fallback refuses too they are reported undelivered."""

from __future__ import annotations

import pytest
from _stream_fakes import RecordingTarget

from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.stream import NominalStream
from beam_nominal.targets.base import Request


def _refuse_b(request: Request, attempt: int) -> TargetError | None:
    names = {i: "conflicts with the stored type double" for i, b in enumerate(request.batches) if b.key.channel == "b"}
    return TargetError("refused", retryable=False, code="INVALID_ARGUMENT", rejected=names) if names else None


class _RefusingFallback(RecordingTarget):
    def send(self, request: Request, timeout: float | None = None) -> None:
        raise TargetError("disk full", retryable=False, code="ENOSPC")


def test_refused_batches_go_to_the_fallback_and_are_counted_there() -> None:
    primary, fallback = RecordingTarget(_refuse_b), RecordingTarget()
    with NominalStream(primary, dataset_rid="ri.x.1", fallback=fallback, linger=None) as s:
        s.enqueue_batch("a", [1, 2, 3], [1.0, 2.0, 3.0])
        s.enqueue_batch("b", [1, 2], ["x", "y"])
        report = s.flush()
    assert (report.points, report.fallback_points, report.fallback_requests, report.failed_points) == (3, 2, 1, 0)
    assert primary.points() == {SeriesKey("a"): [(1, 1.0), (2, 2.0), (3, 3.0)]}
    assert fallback.points() == {SeriesKey("b"): [(1, "x"), (2, "y")]}


def test_refused_batches_the_fallback_refuses_too_are_reported_with_both_reasons() -> None:
    primary = RecordingTarget(_refuse_b)
    s = NominalStream(primary, dataset_rid="ri.x.1", fallback=_RefusingFallback(), linger=None)
    s.enqueue_batch("a", [1, 2, 3], [1.0, 2.0, 3.0])
    s.enqueue_batch("b", [1, 2], ["x", "y"])
    with pytest.raises(DeliveryError) as info:
        s.close()
    err = info.value
    assert err.undelivered == err.rejected == {SeriesKey("b"): 2}
    reason = err.reasons[SeriesKey("b")]
    assert "conflicts with the stored type double" in reason and "fallback failed too" in reason
    assert err.report.points == 3 and err.report.fallback_points == 0
    assert primary.points() == {SeriesKey("a"): [(1, 1.0), (2, 2.0), (3, 3.0)]}
