"""ElementWriter on a real NominalStream writing a real Avro file (no Beam: these run in milliseconds)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import fastavro
import numpy as np
import pytest

from beam_nominal.beam._elements import MAX_LOCAL_SERIES, TOTAL_FLUSH_POINTS, ElementError, ElementWriter
from beam_nominal.errors import SeriesTypeError
from beam_nominal.stream import NominalStream

BASE = 1_700_000_000_000_000_000


def _records(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        return list(fastavro.reader(f))  # type: ignore[arg-type]


def test_local_lists_stay_bounded_and_every_point_lands_once(tmp_path: Path) -> None:
    # More series than get local lists; 1024 lists x 300 points would exceed the bound.
    series, rounds = 1100, 300
    path = tmp_path / "out.avro"
    with NominalStream(str(path), dataset_rid="ri.test.bounded", linger=None) as stream:
        writer = ElementWriter(stream)
        peak = 0
        for r in range(rounds):
            for s in range(series):
                writer.write((f"c{s}", BASE + r, float(r)))
            peak = max(peak, sum(len(buf[1]) for buf in writer._local.values()))
        assert len(writer._local) == MAX_LOCAL_SERIES
        assert 0 < peak <= TOTAL_FLUSH_POINTS
        writer.drain()
    counts: Counter[str] = Counter()
    for rec in _records(path):
        counts[rec["channel"]] += len(rec["timestamps"])
        assert rec["values"] == [float(t - BASE) for t in rec["timestamps"]]
    assert counts == {f"c{s}": rounds for s in range(series)}


def test_fast_path_keeps_type_checks_and_order(tmp_path: Path) -> None:
    path = tmp_path / "out.avro"
    with NominalStream(str(path), dataset_rid="ri.test.fast", linger=None) as stream:
        writer = ElementWriter(stream)
        writer.write(("x", BASE, 1.0))
        writer.write(("x", BASE + 1, 2.0))  # collected locally
        with pytest.raises(SeriesTypeError, match="pinned to double"):
            writer.write(("x", BASE + 2, "three"))
        with pytest.raises(ElementError, match="timestamp"):
            writer.write(("x", 2**63, 4.0))
        writer.write(("x", np.array([BASE + 3, BASE + 4]), np.array([5.0, 6.0])))  # series after points
        writer.write(("i", BASE, 1))
        with pytest.raises(TypeError, match="uint64"):
            writer.write(("i", BASE + 1, 2**63))  # int64 series, a uint64 value
        writer.write(("i", BASE + 2, True))  # bool is stored as int64
        writer.drain()
    flat: dict[str, list[tuple[int, object]]] = {}
    for rec in _records(path):
        flat.setdefault(rec["channel"], []).extend(zip(rec["timestamps"], rec["values"], strict=True))
    assert flat.keys() == {"x", "i"}
    assert flat["x"] == [(BASE, 1.0), (BASE + 1, 2.0), (BASE + 3, 5.0), (BASE + 4, 6.0)]
    assert flat["i"] == [(BASE, 1), (BASE + 2, 1)]
