"""The engine tier's element makers and checks, importable by SDK workers in other processes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from beam_nominal.server import LocalStore

RID = "ri.test.engines.shapes"
BULK_RID = "ri.test.engines.bulk"
BULK_BASE = 1_750_000_000_000_000_000
BULK_ELEMENTS = 200  # half series elements of 1 channel, half Arrow tables of 2: 3 M points
BULK_POINTS = 10_000
SERIES_CHANNELS = 4


def bulk(i: int) -> Iterator[Any]:
    """Element ``i`` of the bulk: a series element (even ``i``) or an Arrow table (odd ``i``)."""
    ts = BULK_BASE + i * BULK_POINTS + np.arange(BULK_POINTS, dtype=np.int64)
    rng = np.random.default_rng(i)
    if i % 2 == 0:
        yield (f"bulk.s{i // 2 % SERIES_CHANNELS}", ts, rng.standard_normal(BULK_POINTS), {"unit": "V"})
    else:
        doubles, ints = rng.standard_normal(BULK_POINTS), rng.integers(-(2**62), 2**62, BULK_POINTS)
        yield pa.table({"timestamp": ts, "bulk.t.double": doubles, "bulk.t.int": ints})


def expected_bulk() -> dict[tuple[str, tuple[tuple[str, str], ...]], tuple[np.ndarray, np.ndarray]]:
    parts: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[np.ndarray, np.ndarray]]] = {}
    for i in range(BULK_ELEMENTS):
        for e in bulk(i):
            if isinstance(e, tuple):
                parts.setdefault((e[0], (("unit", "V"),)), []).append((e[1], e[2]))
            else:
                for name in ("bulk.t.double", "bulk.t.int"):
                    parts.setdefault((name, ()), []).append((e["timestamp"].to_numpy(), e[name].to_numpy()))
    return {k: (np.concatenate([t for t, _ in v]), np.concatenate([x for _, x in v])) for k, v in parts.items()}


def check_bulk(store: LocalStore) -> int:
    """Asserts that ``store`` holds exactly the bulk's points, bit for bit; returns their number."""
    want = expected_bulk()
    infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in store.list_series(BULK_RID)}
    assert sorted(infos) == sorted(want)
    total = 0
    for key, (ts, values) in want.items():
        table = store.read(BULK_RID, key[0], dict(key[1]))
        assert table.num_rows == len(ts), key
        order = np.argsort(table.column("timestamp").to_numpy(), kind="stable")
        got_ts, got = table.column("timestamp").to_numpy()[order], table.column("value").to_numpy()[order]
        want_order = np.argsort(ts, kind="stable")
        assert np.array_equal(got_ts, ts[want_order]), key
        assert got.dtype == values.dtype and got.tobytes() == values[want_order].tobytes(), key
        total += len(ts)
    return total


TICKS = 1_000
TICK_S = 0.004
STREAM_RID = "ri.test.engines.stream"


def tick_points(i: int) -> list[Any]:
    """Tick ``i``'s points: a double and an int64 series, a string every 4th tick, a bad element every 97th."""
    ts = BULK_BASE + i * 1_000
    out: list[Any] = [("stream.double", ts, i / 7), ("stream.int", ts, 2**53 + i, {"unit": "count"})]
    if i % 4 == 0:
        out.append({"channel": "stream.state", "timestamp": ts, "value": f"state {i}"})
    if i % 97 == 0:
        out.append(("stream.double", ts + 1, f"not a double {i}"))
    return out
