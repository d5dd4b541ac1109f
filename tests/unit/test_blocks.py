"""Reused memory of large arrays (beam_nominal/_pipeline/blocks.py), and the columns made in it."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_nominal._pipeline import blocks, values
from beam_nominal._pipeline.buffer import SeriesBuffer
from beam_nominal.model import SeriesKey, ValueType

LARGE = blocks.MIN_BYTES // 8 + 1  # float64 items: just over the pooled size


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


@pytest.fixture(autouse=True)
def _empty_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "_POOL", blocks._Pool())


def test_small_arrays_are_plain_numpy() -> None:
    a = blocks.empty(100, np.int64)
    assert a.dtype == np.int64 and a.shape == (100,) and a.flags.owndata
    assert not blocks._POOL.lent


def test_memory_is_reused_only_after_the_last_view_is_gone() -> None:
    a = blocks.empty(LARGE, np.float64)
    assert a.shape == (LARGE,) and a.flags.writeable and not a.flags.owndata
    at = _address(a)
    a[:] = 1.5
    # Every kind of view that keeps the memory: a slice, a reshape, a byte view, an Arrow array.
    keep = [a[10:], a[: LARGE - 1].reshape(-1, 2)[1:], a.view(np.uint8)[8:], pa.array(a[:100], from_pandas=False)]
    del a
    for k in range(len(keep)):
        b = blocks.empty(LARGE, np.float64)
        assert _address(b) != at, f"memory reused while view {k} of it is alive"
        b[:] = -1.0
        del b
        assert np.asarray(keep[0]).tobytes()[:8] == np.float64(1.5).tobytes()  # not overwritten
        keep.pop(0)
        gc.collect()
    b = blocks.empty(LARGE, np.float64)
    assert _address(b) == at  # the block came back once nothing referred to it


def test_idle_blocks_are_bounded() -> None:
    many = [blocks.empty(LARGE, np.float64) for _ in range(10)]
    del many
    gc.collect()
    kept = {size: len(idle) for size, idle in blocks._POOL.idle.items() if idle}
    assert kept == {2 * blocks.MIN_BYTES: blocks._Pool.KEEP}
    assert not blocks._POOL.lent
    huge = blocks.empty(blocks._MAX_BLOCK // 8 + 1, np.float64)
    assert huge.flags.owndata  # over the largest block: made fresh, never kept


def test_threads_never_share_a_block() -> None:
    seen: list[int] = []
    errors: list[str] = []
    start = threading.Barrier(4, timeout=30)

    def work(i: int) -> None:
        start.wait()
        for _ in range(200):
            a = blocks.empty(LARGE, np.float64)
            a[:] = i
            seen.append(_address(a))
            if not (a == i).all():
                errors.append(f"thread {i} saw another thread's writes")
            del a

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(set(seen)) <= 4 + blocks._Pool.KEEP  # reused, not made afresh each time


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 40_000), min_size=2, max_size=5), st.integers(0, 2))
def test_a_series_chunks_join_as_numpy_concatenates_them(sizes: list[int], kind: int) -> None:
    rng = np.random.default_rng(sum(sizes))
    vtype = (ValueType.DOUBLE, ValueType.UINT64, ValueType.DOUBLE_ARRAY)[kind]
    buf = SeriesBuffer(SeriesKey.of("c"), vtype)
    ts_chunks, val_chunks = [], []
    for n in sizes:
        ts_chunks.append(rng.integers(0, 2**62, n, dtype=np.int64))
        if vtype is ValueType.DOUBLE:
            val_chunks.append(rng.random(n))
        elif vtype is ValueType.UINT64:
            val_chunks.append(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))
        else:
            val_chunks.append(rng.random((n, 8)))
    buf.ts_chunks, buf.val_chunks, buf.points = list(ts_chunks), list(val_chunks), sum(sizes)
    ts, vals, _ = buf.take(sum(sizes))
    assert ts.dtype == np.int64 and np.array_equal(ts, np.concatenate(ts_chunks))
    want = np.concatenate(val_chunks)
    assert vals.dtype == want.dtype and vals.shape == want.shape
    assert vals.tobytes() == want.tobytes()


@pytest.mark.parametrize("compiled", [True, False])
def test_double_rows_column_packs_rows_into_one_matrix(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    if not compiled:
        monkeypatch.setattr(values, "join_into", None)
    elif values.join_into is None:
        pytest.skip("built without the C extension")
    rows = [np.random.default_rng(k).random(64).tolist() for k in range(3000)]  # 1.5 MB: pooled
    packed = [values.float_row("c", r) for r in rows]
    matrix = values.double_rows_column(packed)
    assert matrix.shape == (3000, 64) and not matrix.flags.owndata
    assert matrix.tobytes() == np.array(rows, dtype=np.float64).tobytes()


def test_matrices_of_no_columns_join_too() -> None:
    # Rows of empty double arrays: (n, 0) chunks, with timestamps large enough to be pooled.
    buf = SeriesBuffer(SeriesKey.of("c"), ValueType.DOUBLE_ARRAY)
    n = LARGE
    for c in range(2):
        buf.ts_chunks.append(np.arange(c * n, (c + 1) * n, dtype=np.int64))
        buf.val_chunks.append(np.empty((n, 0)))
        buf.points += n
    ts, vals, _ = buf.take(2 * n)
    assert np.array_equal(ts, np.arange(2 * n)) and vals.shape == (2 * n, 0)
