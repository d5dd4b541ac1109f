# mypy: disable-error-code="no-untyped-call"
"""Beam metrics of the sink, under namespace ``beam_nominal``, fed from the bundle's delivery report.

Counters: ``points``, ``series``, ``requests``, ``bytes``, ``retries``, ``failed_elements``.
Distributions: ``request_points`` and ``request_latency_ms`` (one sample per acknowledged request).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from apache_beam.metrics.metric import Metrics

from beam_nominal.targets.base import first_contact

__all__ = ["NAMESPACE", "MeasuredTarget", "SinkMetrics"]

NAMESPACE = "beam_nominal"


class SinkMetrics:
    """The sink's counters and distributions; created on the worker (in ``DoFn.setup``)."""

    def __init__(self) -> None:
        self.points = Metrics.counter(NAMESPACE, "points")
        self.already_stored_points = Metrics.counter(NAMESPACE, "already_stored_points")
        self.fallback_points = Metrics.counter(NAMESPACE, "fallback_points")
        self.series = Metrics.counter(NAMESPACE, "series")
        self.requests = Metrics.counter(NAMESPACE, "requests")
        self.bytes = Metrics.counter(NAMESPACE, "bytes")
        self.retries = Metrics.counter(NAMESPACE, "retries")
        self.failed_elements = Metrics.counter(NAMESPACE, "failed_elements")
        self.request_points = Metrics.distribution(NAMESPACE, "request_points")
        self.request_latency_ms = Metrics.distribution(NAMESPACE, "request_latency_ms")

    def record(self, report: Any, samples: Iterable[tuple[int, float]] = ()) -> None:
        """Add one bundle's delivery report and its per-request (points, seconds) samples."""
        for counter, name in (
            (self.points, "points"),
            (self.already_stored_points, "already_stored_points"),
            (self.fallback_points, "fallback_points"),
            (self.series, "series"),
            (self.requests, "requests"),
            (self.bytes, "bytes"),
            (self.retries, "retries"),
        ):
            value = getattr(report, name, 0)
            if value:
                counter.inc(int(value))
        for points, latency_s in samples:
            self.request_points.update(int(points))
            self.request_latency_ms.update(round(latency_s * 1000))


class MeasuredTarget:
    """Wraps a (shared) target to time each acknowledged request for the distributions.

    Sends run on the upload threads, where Beam metrics cannot be updated; samples are
    collected here and turned into metric updates by the DoFn in ``finish_bundle``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._samples: list[tuple[int, float]] = []

    def send(self, request: Any, timeout: float | None = None) -> bool | None:
        t0 = time.perf_counter()
        already_stored: bool | None = self.inner.send(request, timeout)
        elapsed = time.perf_counter() - t0
        with self._lock:
            self._samples.append((int(request.points), elapsed))
        return already_stored

    def probe(self, dataset_rid: str, timeout: float) -> None:
        """The inner target's first contact (it remembers a success, so bundles after the first
        send nothing for it)."""
        first_contact(self.inner, dataset_rid, timeout)

    @property
    def send_fallback(self) -> Callable[..., None] | None:
        """The inner target's fallback send (``with_fallback``), or None: the uploader finds it here."""
        send: Callable[..., None] | None = getattr(self.inner, "send_fallback", None)
        return send

    @property
    def fallback_location(self) -> str | None:
        location = getattr(self.inner, "fallback_location", None)
        return None if location is None else str(location)

    @property
    def preferred_request_bytes(self) -> int | None:
        """The inner target's request size, which the sender would otherwise not see."""
        size = getattr(self.inner, "preferred_request_bytes", None)
        return size if isinstance(size, int) else None

    def take_samples(self) -> list[tuple[int, float]]:
        with self._lock:
            samples, self._samples = self._samples, []
        return samples

    def close(self) -> None:
        """The inner target is shared and closed by its owner, not by a bundle's sender."""

    def __repr__(self) -> str:
        return repr(self.inner)
