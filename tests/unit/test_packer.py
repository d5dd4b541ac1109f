"""The packer: many series per request, long series split, budget kept, reqs deterministic."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._pipeline.buffer import Buffer
from beam_nominal._pipeline.packer import cut_requests
from beam_nominal._wire.decode import decode_request
from beam_nominal.model import SeriesKey, ValueType


def _fill(buf: Buffer, series: int, points: int) -> None:
    for i in range(series):
        ts = np.arange(points, dtype=np.int64) + 10**18
        buf.add(SeriesKey.of(f"ch{i}", {"i": str(i)}), ValueType.DOUBLE, ts, np.full(points, float(i)), 24 * points)


def _cut(buf: Buffer, final: bool, max_bytes: int = 1 << 20, max_points: int = 10**6):  # type: ignore[no-untyped-def]
    return cut_requests(buf, dataset_rid="ri.x.1", max_bytes=max_bytes, max_points=max_points, final=final, next_seq=0)


def test_many_small_series_share_one_request() -> None:
    buf = Buffer()
    _fill(buf, 1000, 10)
    reqs = _cut(buf, final=True)
    assert len(reqs) == 1
    req = reqs[0]
    assert req.points == 10_000 and len(req.batches) == 1000
    assert buf.points == 0 and buf.nbytes == 0
    decoded = decode_request(req.body)
    assert [b.key.channel for b in decoded.batches] == [f"ch{i}" for i in range(1000)]


def test_long_series_is_split_within_the_point_budget_and_order_kept() -> None:
    buf = Buffer()
    _fill(buf, 1, 25_000)
    reqs = _cut(buf, final=True, max_points=10_000)
    assert [c.points for c in reqs] == [10_000, 10_000, 5_000]
    assert [c.seq for c in reqs] == [0, 1, 2]
    ts = np.concatenate([c.batches[0].timestamps for c in reqs])
    assert ts.tolist() == (np.arange(25_000) + 10**18).tolist()


def test_byte_budget_bounds_encoded_size() -> None:
    buf = Buffer()
    _fill(buf, 50, 2_000)  # ~2.4 MB estimated
    buffered = buf.nbytes
    reqs = _cut(buf, final=True, max_bytes=256 * 1024)
    assert len(reqs) > 5
    assert sum(c.points for c in reqs) == 100_000
    # Each request carries what it took off the buffer's bytes: the budget gets all of it back.
    assert sum(c.buffered_bytes for c in reqs) == buffered and buf.nbytes == 0
    for c in reqs:
        assert len(c.body) <= 256 * 1024


def test_not_final_cuts_only_full_requests() -> None:
    buf = Buffer()
    _fill(buf, 10, 100)  # far below the budget
    assert _cut(buf, final=False) == []
    assert buf.points == 1000
    _fill(buf, 1, 30_000)
    reqs = _cut(buf, final=False, max_points=10_000)
    assert all(c.points == 10_000 for c in reqs) and reqs
    assert buf.points < 10_000


def test_cuts_are_deterministic_byte_for_byte() -> None:
    def run() -> list[bytes]:
        buf = Buffer()
        out = []
        for step in range(5):
            _fill(buf, 30, 700 + step)
            out += [c.body for c in _cut(buf, final=False, max_bytes=64 * 1024)]
        out += [c.body for c in _cut(buf, final=True, max_bytes=64 * 1024)]
        return out

    first, second = run(), run()
    assert len(first) > 3
    assert first == second


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=40),
    max_points=st.integers(min_value=1, max_value=5000),
    max_kib=st.integers(min_value=1, max_value=64),
)
def test_every_point_in_exactly_one_request_in_order(sizes: list[int], max_points: int, max_kib: int) -> None:
    buf = Buffer()
    expected: dict[str, list[int]] = {}
    reqs = []
    for i, n in enumerate(sizes):
        ch = f"c{i % 7}"  # some series get several chunks
        start = len(expected.setdefault(ch, []))
        ts = np.arange(start, start + n, dtype=np.int64)
        buf.add(SeriesKey(ch), ValueType.DOUBLE, ts, ts.astype(np.float64), 24 * n)
        expected[ch].extend(range(start, start + n))
        reqs += cut_requests(
            buf, dataset_rid="ri.x.1", max_bytes=max_kib * 1024, max_points=max_points, final=False, next_seq=len(reqs)
        )
    reqs += cut_requests(
        buf, dataset_rid="ri.x.1", max_bytes=max_kib * 1024, max_points=max_points, final=True, next_seq=len(reqs)
    )
    assert buf.points == 0 and buf.nbytes == 0
    got: dict[str, list[int]] = {}
    for c in reqs:
        assert 0 < c.points <= max_points
        for b in c.batches:
            got.setdefault(b.key.channel, []).extend(b.timestamps.tolist())
            assert b.values.tolist() == [float(t) for t in b.timestamps.tolist()]
    assert got == expected
    assert [c.seq for c in reqs] == list(range(len(reqs)))
