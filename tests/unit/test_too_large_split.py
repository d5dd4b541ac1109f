"""A request refused as too large (``TargetError.too_large``: HTTP 413) goes again in halves; every
point is counted once, as acknowledged or failed, and lands at most once. At the transport seam:
a target that refuses requests over a drawn number of points, and fails some parts for good."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.stream import NominalStream
from beam_nominal.targets.base import Request
from tests.unit._stream_fakes import RecordingTarget


def _halves(limit: int, broken: frozenset[int]) -> RecordingTarget:
    def fail(request: Request, _attempt: int) -> TargetError | None:
        if request.points > limit:
            return TargetError("HTTP 413: too large", retryable=False, code="HTTP 413", too_large=True)
        first = int(request.batches[0].timestamps[0]) if request.batches else -1
        if first in broken:
            return TargetError("HTTP 400: refused", retryable=False, code="HTTP 400")
        return None

    return RecordingTarget(fail)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    limit=st.integers(1, 200),
    broken=st.frozensets(st.integers(0, 1500), max_size=5),
    max_points=st.integers(1, 700),
)
def test_every_point_is_acked_or_failed_once(
    sizes: list[int], limit: int, broken: frozenset[int], max_points: int
) -> None:
    target = _halves(limit, broken)
    total = sum(sizes)
    stream = NominalStream(target, dataset_rid="ri.split", linger=None, max_request_points=max_points)
    for i, n in enumerate(sizes):
        ts = np.arange(n, dtype=np.int64) + 250 * i
        stream.enqueue_batch(f"s{i}", ts, ts.astype(np.float64))
    try:
        report = stream.close()
        failed = 0
    except DeliveryError as err:
        report, failed = err.report, err.points
    assert report.points + report.failed_points == total and report.failed_points == failed
    landed = target.points()
    assert sum(map(len, landed.values())) == report.points
    for key, points in landed.items():
        i = int(key.channel[1:])
        ts = [t for t, _ in points]
        assert len(set(ts)) == len(ts)  # no point twice
        assert set(ts) <= set(range(250 * i, 250 * i + sizes[i]))
        assert all(float(t) == v for t, v in points)
    # Nothing over the limit was ever taken; a part is sent as a request of its own (own key).
    assert all(r.points <= limit for r in target.acked)
    keys = [k for _, k, _ in target.calls]
    assert len(keys) == len(set(keys))


def test_the_halves_keep_order_and_a_lone_point_fails_naming_why() -> None:
    target = _halves(1, frozenset())
    stream = NominalStream(target, dataset_rid="ri.split", linger=None)
    stream.enqueue_batch("a", np.arange(5, dtype=np.int64), np.arange(5.0))
    report = stream.close()
    assert report.points == 5 and report.requests == 5
    assert target.points()[SeriesKey.of("a")] == [(t, float(t)) for t in range(5)]
    # Every request sent was new: 5 points, then 2 + 3, then 1 + 1 and 1 + 2, then 1 + 1.
    assert [r.points for r, _, _ in target.calls] == [5, 2, 1, 1, 3, 1, 2, 1, 1]
    assert len({k for _, k, _ in target.calls}) == len(target.calls)

    big = _halves(0, frozenset())
    stream = NominalStream(big, dataset_rid="ri.split", linger=None)
    stream.enqueue("a", 1, 1.0)
    try:
        stream.close()
    except DeliveryError as err:
        assert err.points == 1 and "a single point larger than the target takes" in err.reasons[SeriesKey.of("a")]
    else:
        raise AssertionError("a point larger than the limit was reported delivered")
