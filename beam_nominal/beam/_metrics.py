# mypy: disable-error-code="no-untyped-call"
"""Beam metrics of the sink, under namespace ``beam_nominal``, fed from the stream's delivery report.

Counters: ``points``, ``series``, ``requests``, ``bytes``, ``retries``, ``failed_elements``.
Distributions: ``request_points`` and ``request_latency_ms`` (one sample per acknowledged request).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apache_beam.metrics.metric import Metrics

__all__ = ["NAMESPACE", "SinkMetrics"]

NAMESPACE = "beam_nominal"


def _field(report: Any, *names: str) -> Any:
    for name in names:
        value = getattr(report, name, None)
        if value is not None:
            return value
    return None


class SinkMetrics:
    """The sink's counters and distributions; created on the worker (in ``DoFn.setup``)."""

    def __init__(self) -> None:
        self.points = Metrics.counter(NAMESPACE, "points")
        self.series = Metrics.counter(NAMESPACE, "series")
        self.requests = Metrics.counter(NAMESPACE, "requests")
        self.bytes = Metrics.counter(NAMESPACE, "bytes")
        self.retries = Metrics.counter(NAMESPACE, "retries")
        self.failed_elements = Metrics.counter(NAMESPACE, "failed_elements")
        self.request_points = Metrics.distribution(NAMESPACE, "request_points")
        self.request_latency_ms = Metrics.distribution(NAMESPACE, "request_latency_ms")

    def record(self, report: Any) -> None:
        """Add one bundle's delivery report."""
        for counter, names in (
            (self.points, ("points",)),
            (self.series, ("series",)),
            (self.requests, ("requests",)),
            (self.bytes, ("bytes", "bytes_sent")),
            (self.retries, ("retries",)),
        ):
            value = _field(report, *names)
            if isinstance(value, int) and value:
                counter.inc(value)
        for points, latency_s in _request_samples(report):
            self.request_points.update(int(points))
            self.request_latency_ms.update(round(latency_s * 1000))


def _request_samples(report: Any) -> Iterable[tuple[int, float]]:
    """(points, latency seconds) per acknowledged request, from whichever form the report has."""
    stats = _field(report, "request_stats", "requests_detail")
    if stats:
        for s in stats:
            points = getattr(s, "points", None)
            latency = _field(s, "latency_s", "latency", "seconds")
            if points is not None and latency is not None:
                yield int(points), float(latency)
        return
    points_list = _field(report, "request_points")
    latencies = _field(report, "request_latencies", "request_latency_s")
    if points_list is not None and latencies is not None:
        yield from zip(points_list, latencies, strict=False)
