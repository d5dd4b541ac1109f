"""Targets at the transport seam, for fault injection in stream tests (no network)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from beam_nominal._wire.decode import decode_request
from beam_nominal.errors import TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.targets.base import Request


class RecordingTarget:
    """Acknowledges every request after decoding its bytes (so encoding really happens).

    ``fail`` decides per call: return a TargetError to raise, or None to acknowledge.
    """

    def __init__(self, fail: Callable[[Request, int], TargetError | None] | None = None) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[Request, str, float | None]] = []  # every attempt: request, key, timeout
        self.acked: list[Request] = []
        self.fail = fail
        self.closed = False

    def send(self, request: Request, timeout: float | None = None) -> None:
        with self.lock:
            n = sum(1 for r, _, _ in self.calls if r is request)
            self.calls.append((request, request.key, timeout))
        err = self.fail(request, n) if self.fail else None
        if err is not None:
            raise err
        decode_request(request.body)
        with self.lock:
            self.acked.append(request)

    def close(self) -> None:
        self.closed = True

    def points(self) -> dict[SeriesKey, list[tuple[int, object]]]:
        """Acknowledged points per series in request order, decoded from the bytes sent."""
        out: dict[SeriesKey, list[tuple[int, object]]] = {}
        with self.lock:
            acked = sorted(self.acked, key=lambda r: r.seq)
        for r in acked:
            for b in decode_request(r.body).batches:
                vals = b.values.tolist() if isinstance(b.values, np.ndarray) else list(b.values)
                out.setdefault(b.key, []).extend(zip(b.timestamps.tolist(), vals, strict=True))
        return out


class BlockingTarget(RecordingTarget):
    """Blocks every send until ``release`` is set (or the send's timeout passes)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def send(self, request: Request, timeout: float | None = None) -> None:
        self.entered.set()
        if not self.release.wait(timeout if timeout is not None else 30):
            raise TargetError("deadline exceeded", retryable=True, code="DEADLINE_EXCEEDED")
        super().send(request, timeout)


def unavailable(times: int) -> Callable[[Request, int], TargetError | None]:
    """Fail each request's first ``times`` attempts with a retryable UNAVAILABLE."""

    def fail(request: Request, attempt: int) -> TargetError | None:
        if attempt < times:
            return TargetError("server unavailable", retryable=True, code="UNAVAILABLE")
        return None

    return fail


def permanent(request: Request, attempt: int) -> TargetError | None:
    return TargetError("invalid argument", retryable=False, code="INVALID_ARGUMENT")
