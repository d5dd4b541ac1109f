"""The thread's reused buffers and the join into them (beam_nominal/_wire/scratch.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_nominal._wire import scratch

needs_c = pytest.mark.skipif(scratch.join_into is None, reason="built without the C extension")

parts_lists = st.lists(
    st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(lambda b: np.frombuffer(b, dtype=np.uint8))),
    max_size=20,
)


def _size(parts: list[object]) -> int:
    return sum(p.nbytes if isinstance(p, np.ndarray) else len(p) for p in parts)  # type: ignore[arg-type]


@given(parts_lists, parts_lists)
def test_joined_transient_is_the_join_until_the_next_use(first: list[object], second: list[object]) -> None:
    got = scratch.joined_transient(first, _size(first), "test-join")
    assert bytes(got) == b"".join(first)  # type: ignore[arg-type]
    got = scratch.joined_transient(second, _size(second), "test-join")
    assert bytes(got) == b"".join(second)  # type: ignore[arg-type]


@needs_c
def test_join_into_refuses_what_does_not_fit_and_is_not_a_list() -> None:
    assert scratch.join_into is not None
    out = np.zeros(4, dtype=np.uint8)
    with pytest.raises(ValueError, match="5 bytes do not fit in 4"):
        scratch.join_into([b"abc", b"de"], out)
    assert bytes(out) == b"\0\0\0\0"  # nothing written
    with pytest.raises(TypeError):
        scratch.join_into((b"a",), out)
    with pytest.raises(BufferError):
        scratch.join_into([b"a"], b"read-only")
    with pytest.raises(TypeError):
        scratch.join_into([b"a", 3], out)
    with pytest.raises(AssertionError, match="not 3 bytes"):
        scratch.joined_transient([b"ab"], 3, "test-join")


@needs_c
def test_each_thread_joins_into_its_own_buffer() -> None:
    # Two uploader threads encoding at once must not share a body buffer.
    results: dict[int, bytes] = {}
    ready = threading.Barrier(2, timeout=10)

    def encode(i: int) -> None:
        view = scratch.joined_transient([bytes([i]) * 1000], 1000, "test-join")
        ready.wait()  # both views exist before either is read
        results[i] = bytes(view)

    threads = [threading.Thread(target=encode, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {1: b"\x01" * 1000, 2: b"\x02" * 1000}


def test_a_thread_that_ends_leaves_its_buffers_to_the_next() -> None:
    # A new stream's upload threads take the buffers of the last stream's, instead of faulting
    # in their own; threads alive at once never share them (test above).
    mine = scratch.thread_scratch()  # this thread's, taken before the others end
    got: list[scratch.Scratch] = []

    def use() -> None:
        got.append(scratch.thread_scratch())
        scratch.thread_scratch().get("test-pool", 1000)[:] = 7

    for _ in range(3):
        t = threading.Thread(target=use)
        t.start()
        t.join(10)
    assert got[0] is got[1] is got[2]
    assert got[0] is not mine


@pytest.fixture
def empty_pool() -> object:
    # The pool's list in place: _Lease.__del__ holds it as a default, so a new list would not be seen.
    saved = scratch._POOL[:]
    scratch._POOL.clear()
    yield scratch._POOL
    scratch._POOL[:] = saved


def _ended_thread_scratch(each: int) -> scratch.Scratch:
    """The scratch of a thread that took three buffers of ``each`` bytes, once it has ended."""
    got: list[scratch.Scratch] = []

    def use() -> None:
        s = scratch.thread_scratch()
        for name in ("a", "b", "c"):
            s.get(name, each)  # numpy.empty: no page is touched
        got.append(s)

    t = threading.Thread(target=use)
    t.start()
    t.join(10)
    assert got
    return got[0]


def test_a_thread_that_held_much_memory_does_not_leave_it_behind(empty_pool: list[scratch.Scratch]) -> None:
    small = _ended_thread_scratch(1 << 20)
    assert empty_pool == [small]  # an empty pool keeps an ended thread's scratch...
    big = _ended_thread_scratch(50 << 20)
    assert big is small  # (the next thread took it from the pool and grew it to ~190 MiB)
    assert empty_pool == []  # ...but not one over _POOL_BYTES
