"""Each series keeps arrival order across every write form of a stream, interleaved at random into
series of clashing types; a refused call (a type clash in any form) buffers nothing and pins nothing.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.stream import NominalStream


def _interleaved_run(
    seed: int,
) -> tuple[dict[SeriesKey, list[tuple[int, object]]], dict[SeriesKey, list[tuple[int, object]]]]:
    """Every write form on one stream, at random, into series of clashing types: what the target
    got per series, and what the accepted calls sent, in arrival order. A model of the pinned
    types says which calls must be refused (a refused call adds and pins nothing)."""
    rng = random.Random(seed)
    target = RecordingTarget()
    # One request in flight keeps request order the arrival order; small requests make many cuts.
    s = NominalStream(
        target, dataset_rid="ri.x.1", linger=None, max_in_flight=1, max_request_bytes=1024,
        max_request_points=rng.choice([7, 1_000_000]),
    )  # fmt: skip
    model: dict[SeriesKey, list[tuple[int, object]]] = {}
    pinned: dict[SeriesKey, str] = {}
    t = 0

    def kind(v: object) -> str:
        return "double" if isinstance(v, float) else "string" if isinstance(v, str) else "double_array"

    for _ in range(150):
        op, ch, tags = rng.randrange(7), rng.choice(["d0", "d1", "s0"]), rng.choice([None, {"k": "v"}])
        key = SeriesKey.of(ch, tags)
        t += 1
        sent: list[tuple[SeriesKey, int, object]] = []  # (series, timestamp, value) of the call
        call: Any
        if op in (0, 1):
            v: object = rng.random() if op == 0 else f"x{t}"
            sent.append((key, t, v))
            call = functools.partial(s.enqueue, ch, t, v, tags)
        elif op == 2:  # the numpy short path, and the general one for other layouts
            ts = np.arange(t, t + rng.randrange(4), dtype=np.int64)
            vals = ts * 0.5
            if rng.random() < 0.3:
                ts, vals = ts.astype(">i8"), vals.astype(">f8")
            sent += [(key, a, b) for a, b in zip(ts.tolist(), vals.tolist(), strict=True)]
            call = functools.partial(s.enqueue_batch, ch, ts, vals, tags)
            t += len(ts)
        elif op == 3:
            row = [0.25] * rng.choice([0, 2, 80])
            sent.append((key, t, row))
            call = functools.partial(s.enqueue_float_array, ch, t, row, tags)
        elif op == 4:
            rec = {c: t + 0.5 for c in rng.sample(["d0", "d1"], rng.randrange(1, 3))}
            sent += [(SeriesKey.of(c, tags), t, x) for c, x in rec.items()]
            call = functools.partial(s.enqueue_from_dict, t, rec, tags)
        elif op == 5:
            cols = {c: [t + 0.75] if rng.random() < 0.7 else [f"y{t}"] for c in rng.sample(["d0", "d1", "s0"], 2)}
            sent += [(SeriesKey.of(c, tags), t, x[0]) for c, x in cols.items()]
            table = pa.table({"timestamp": pa.array([t], pa.int64()), **cols})
            call = functools.partial(s.enqueue_table, table, "timestamp", tags)
        else:
            other = PointBatch()
            other.add_series(ch, [t], [rng.choice([t + 0.125, f"z{t}"])], tags)
            if ch != "d1" or other.vtype_of(key) is ValueType.DOUBLE:
                other.add_point("d1", t, t + 0.375, tags)
            chunks = other.take()
            sent += [(c.key, a, b) for c in chunks for a, b in zip(c.timestamps.tolist(), c.values, strict=True)]
            call = functools.partial(s.enqueue_chunks, chunks)
        refused = any(pinned.get(k, kind(v)) != kind(v) for k, _, v in sent)
        try:
            call()
        except TypeError as exc:  # SeriesTypeError is a TypeError
            assert refused, f"refused {sent}: {exc}"
            continue
        assert not refused, f"accepted {sent} against {pinned}"
        for k, a, v in sent:
            pinned.setdefault(k, kind(v))
            model.setdefault(k, []).append((a, v))
    report = s.close()
    assert report.points == sum(map(len, model.values())) and report.failed_points == 0
    got = {
        k: [(ts, list(v) if isinstance(v, np.ndarray) else v) for ts, v in pts] for k, pts in target.points().items()
    }
    return got, model


@pytest.mark.parametrize("seed", range(12))
def test_each_series_keeps_arrival_order_across_every_write_form_and_refused_call(seed: int) -> None:
    # Columns go straight into the stream's buffer, after what the staging batch still holds.
    got, expected = _interleaved_run(seed)
    assert got == expected
