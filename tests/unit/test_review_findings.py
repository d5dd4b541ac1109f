"""Bugs found reviewing the one-path element rewrite (each test failed before its fix)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _stream_fakes import RecordingTarget, unavailable

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.model import SeriesKey, timestamp_ns, timestamps_ns
from beam_nominal.stream import NominalStream


def test_batch_of_a_2d_matrix_is_copied() -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    s.enqueue_batch("m", [1, 2], m)
    m[:] = -1.0  # callers may reuse their arrays
    s.close()
    rows = [list(v) for _, v in target.points()[SeriesKey("m")]]
    assert rows == [[1.0, 2.0], [3.0, 4.0]]


def test_staged_rows_of_long_strings_count_their_bytes() -> None:
    b = PointBatch()
    b.add_record(1, {"s": "x" * 1_000_000})
    assert b.nbytes >= 1_000_000


def test_staged_records_of_arrays_count_their_bytes() -> None:
    b = PointBatch()
    b.add_record(1, {"a": [1.0] * 100_000})
    assert b.nbytes >= 800_000


def test_wide_records_of_long_strings_meet_backpressure() -> None:
    from beam_nominal.errors import BackpressureError

    s = NominalStream(
        RecordingTarget(),
        dataset_rid="ri.x.1",
        linger=None,
        max_request_bytes=1 << 20,
        max_buffered_bytes=4 << 20,
        block_on_full=False,
    )
    big = "x" * 1_000_000
    try:
        with pytest.raises(BackpressureError):
            for i in range(100):  # 100 MB against a 4 MiB budget
                s.enqueue_from_dict(i, {"s": big})
    finally:
        s.close(timeout=30)


def test_datetime64_with_a_unit_multiplier() -> None:
    v = np.datetime64(5, "10ms")
    expected = int(v.astype("datetime64[ns]").astype(np.int64))  # 50 ms
    assert timestamp_ns(v, "UTC") == expected
    assert timestamps_ns(np.array([v]), "UTC").tolist() == [expected]


def test_request_written_off_at_close_is_not_also_sent_to_the_fallback() -> None:
    attempted = threading.Event()
    down = unavailable(10**9)

    def fail(request: object, attempt: int) -> object:
        attempted.set()
        return down(request, attempt)  # type: ignore[arg-type]

    primary = RecordingTarget(fail=fail)  # type: ignore[arg-type]
    fallback = RecordingTarget()
    s = NominalStream(
        primary,
        dataset_rid="ri.x.1",
        fallback=fallback,
        linger=None,
        initial_backoff=2.0,
        max_backoff=2.0,
        jitter=0.0,
    )
    s.enqueue_batch("a", [1, 2, 3], [1.0, 2.0, 3.0])
    s._core.cut_and_register(final=True)
    s._core.submit(s._core.take_submits())
    assert attempted.wait(5)  # the first attempt failed; the worker now waits 2 s to retry
    with pytest.raises(Exception, match="close timed out"):
        s.close(timeout=0.3)
    assert s.report().failed_points == 3
    for t in threading.enumerate():  # the woken worker ends its job, then its thread exits
        if t.name.startswith("beam-nominal-upload"):
            t.join(10)
            assert not t.is_alive()
    assert fallback.points() == {}, "reported failed, yet stored in the fallback"


def test_non_ascii_text_keeps_requests_near_the_budget() -> None:
    target = RecordingTarget()
    s = NominalStream(
        target, dataset_rid="ri.x.1", linger=None, max_request_bytes=64 * 1024, max_buffered_bytes=1 << 22
    )
    s.enqueue_batch("emoji", list(range(2000)), ["\U0001f600" * 200] * 2000)
    s.close()
    assert max(len(r.body) for r in target.acked) <= 2 * 64 * 1024
