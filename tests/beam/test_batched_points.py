"""Single points checked and converted in batches: same results as one by one, bad ones still caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from beam_nominal.beam import WriteToNominal
from beam_nominal.beam._dofn import BatchingWriteDoFn, SinkConfig
from beam_nominal.beam._elements import PENDING_POINTS, ElementWriter
from beam_nominal.errors import DeliveryError
from beam_nominal.server import LocalServer
from beam_nominal.stream import NominalStream

BASE = 1_700_000_000_000_000_000


def mixed_points(n: int) -> list[Any]:
    """Points of every scalar type over 40 channels, with bad ones spread through them."""
    out: list[Any] = []
    for i in range(n):
        k = i % 40
        if k < 10:
            out.append((f"f{k}", BASE + i, i * 0.25))
        elif k < 15:
            out.append((f"i{k}", BASE + i, i - 5000))
        elif k < 18:
            out.append((f"s{k}", BASE + i, f"v{i}"))
        elif k == 18:
            out.append(("b", BASE + i, i % 3 == 0))
        elif k == 19:
            out.append(("f32", BASE + i, np.float32(i)))
        elif k == 20:
            out.append(("u", BASE + i, 2**63 + i))  # beyond int64: a uint64 series
        elif k == 21:
            out.append(("arr", BASE + i, [float(i), 0.5]))  # array and struct values: per point
        elif k == 22:
            out.append(("st", BASE + i, {"i": i}))
        else:
            out.append((f"g{k % 4}", BASE + i, float(i)))
    # Bad ones, each a distinct reason; some in series that are otherwise fine.
    out[1001] = ("f1", BASE + 1001, "text")  # conflicts with f1's double pin
    out[2002] = ("f2", BASE + 2002, None)
    out[3003] = ("", BASE + 3003, 1.0)
    out[4004] = ("f4", BASE + 4004, 1 + 2j)
    out[5005] = ("i14", BASE + 5005, 2**64)  # beyond uint64, in an int64 series
    out[6006] = ("i11", BASE + 6006, 1.5)  # a float in an int64 series
    return out


BAD = {
    1001: "pinned to double",
    2002: "is None",
    3003: "non-empty string",
    4004: "complex",
    5005: "18446744073709551616",
    6006: "int64",
}


class _Collect:
    """A target keeping each series' points and value type as the requests carried them."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[int, Any]]] = {}
        self.types: dict[str, str] = {}
        self.tags: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def send(self, request: Any, timeout: float | None = None) -> None:
        for b in request.batches:
            self.tags.add((b.key.channel, tuple(b.key.tags)))
            values = b.values.tolist() if isinstance(b.values, np.ndarray) else list(b.values)
            values = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
            self.series.setdefault(b.key.channel, []).extend(zip(b.timestamps.tolist(), values, strict=True))
            assert self.types.setdefault(b.key.channel, b.value_type.value) == b.value_type.value

    def close(self) -> None:
        pass


def test_batches_write_what_one_by_one_writes_and_catch_each_bad_point(tmp_path: Path) -> None:
    points = mixed_points(20_000)
    one, many = _Collect(), _Collect()
    with NominalStream(one, dataset_rid="ri.test.one", linger=None) as stream:
        writer = ElementWriter(stream)
        single_failed = {}
        for i, p in enumerate(points):
            try:
                writer.write(p)
            except (TypeError, ValueError) as exc:
                single_failed[i] = (type(exc).__name__, str(exc))
        writer.drain()
    with NominalStream(many, dataset_rid="ri.test.many", linger=None) as stream:
        writer = ElementWriter(stream)
        failed = []
        for start in range(0, len(points), 7_000):  # batches that split series and bad points unevenly
            batch = points[start : start + 7_000]
            failed.extend(writer.write_points(*(list(f) for f in zip(*batch, strict=True))))
        writer.drain()
    at = {(e[0], e[1]): i for i, e in enumerate(points)}  # (channel, timestamp) is unique here
    batch_failed = {at[e[0], e[1]]: (type(exc).__name__, str(exc)) for e, exc in failed}
    assert all(e == points[at[e[0], e[1]]] for e, _ in failed)
    assert sorted(batch_failed) == sorted(BAD)
    assert batch_failed == single_failed
    for i, needle in BAD.items():
        assert needle in batch_failed[i][1], (i, batch_failed[i])
    assert batch_failed[1001][0] == "SeriesTypeError"
    a, b = one.series, many.series
    assert a.keys() == b.keys() and one.types == many.types
    for ch in a:
        assert a[ch] == b[ch], ch
    assert many.types["f32"] == "double" and many.types["b"] == "int64" and many.types["s15"] == "string"
    assert many.types["arr"] == "double_array" and many.types["st"] == "struct"
    assert b["arr"][0] == (BASE + 21, [21.0, 0.5]) and b["st"][0] == (BASE + 22, '{"i":22}')
    assert b["u"][0] == (BASE + 20, 2**63 + 20) and many.types["u"] == "uint64"


def _runs_of_each_kind() -> list[Any]:
    """Runs of one kind each (float, int, str, ints beyond int64, mixed) in channels interleaved
    at random, then a bad timestamp or channel among good points, so one batch holds columns of
    every form and another must be written point by point."""
    rng = np.random.default_rng(7)
    kinds: list[Any] = [
        lambda i: (f"a{rng.integers(20)}", BASE + i, i * 0.5),
        lambda i: (f"b{rng.integers(20)}", BASE + i, i - 1000),
        lambda i: ("c", BASE + i, f"v{i}"),
        lambda i: ("u", BASE + i, 2**63 + i),
        lambda i: (("a1", "b1", "c")[i % 3], BASE + i, (i * 0.5, i, f"v{i}")[i % 3]),
    ]
    points = [kinds[(i // 1000) % len(kinds)](i) for i in range(12_345)]
    points[10_005] = ("a1", 2**63, 1.0)  # beyond int64
    points[10_009] = ("a1", -(2**63), 1.0)  # the int64 minimum
    points[11_003] = (["a1"], BASE, 1.0)  # unhashable channel
    points[11_004] = ("", BASE, 1.0)  # empty channel
    points[12_001] = (7, BASE, 1.0)  # not a str
    return points


def test_batches_of_every_column_form_write_what_one_by_one_writes() -> None:
    points = _runs_of_each_kind()
    one, many = _Collect(), _Collect()
    with NominalStream(one, dataset_rid="ri.test.one", linger=None) as stream:
        writer = ElementWriter(stream)
        single_failed = {}
        for p in points:
            try:
                writer.write(p)
            except (TypeError, ValueError) as exc:
                single_failed[repr(p)] = (type(exc).__name__, str(exc))
        writer.drain()
    with NominalStream(many, dataset_rid="ri.test.many", linger=None) as stream:
        writer = ElementWriter(stream)
        failed: list[Any] = []
        for start, end in ((0, 2_000), (2_000, 10_000), (10_000, 12_345)):
            batch = points[start:end]
            failed += writer.write_points(*(list(f) for f in zip(*batch, strict=True)))
        writer.drain()
    assert {repr(e): (type(exc).__name__, str(exc)) for e, exc in failed} == single_failed
    assert len(single_failed) == 5
    assert {"double", "int64", "string", "uint64"} == set(many.types.values())
    assert one.types == many.types and one.series == many.series
    assert sum(map(len, many.series.values())) == len(points) - 5


def test_a_batch_keeps_order_with_points_collected_before_it() -> None:
    target = _Collect()
    with NominalStream(target, dataset_rid="ri.test.order", linger=None) as stream:
        writer = ElementWriter(stream)
        writer.write(("x", BASE, 0.0))
        writer.write(("x", BASE, 1.0))  # collected in the per-point list
        assert writer.write_points(["x"] * 100, [BASE] * 100, [float(i + 2) for i in range(100)]) == []
        writer.write(("x", BASE, 102.0))
        writer.drain()
    assert [v for _, v in target.series["x"]] == [float(i) for i in range(103)]


def test_transform_tags_apply_to_batched_points_in_order() -> None:
    target = _Collect()
    with NominalStream(target, dataset_rid="ri.test.tags", linger=None) as stream:
        writer = ElementWriter(stream, tags={"rig": "a"})
        writer.write(("x", BASE, 0.0))  # per-point list of the tagged series
        later = range(1, 100)
        assert writer.write_points(["x"] * 99, [BASE + i for i in later], [float(i) for i in later]) == []
        writer.drain()
    assert target.tags == {("x", (("rig", "a"),))}
    assert target.series["x"] == [(BASE + i, float(i)) for i in range(100)]


_SEED_SCRIPT = """
import hashlib, sys
from beam_nominal.beam._elements import ElementWriter
from beam_nominal.stream import NominalStream
BASE = 1_700_000_000_000_000_000
class Capture:
    def __init__(self): self.digests = []
    def send(self, request, timeout=None): self.digests.append(hashlib.sha256(request.body).hexdigest())
    def close(self): pass
target = Capture()
with NominalStream(target, dataset_rid="ri.test.seed", linger=None, max_request_points=5000) as stream:
    writer = ElementWriter(stream)
    for b in range(4):
        chans = [f"ch{(i * 7919) % 300}" for i in range(10_000)]
        writer.write_points(chans, [BASE + b * 10_000 + i for i in range(10_000)], [float(i) for i in range(10_000)])
    writer.drain()
print(",".join(sorted(target.digests)))  # sent by parallel workers: any order
"""


def test_request_bytes_do_not_depend_on_the_hash_seed() -> None:
    # A retried bundle may run in another process, where str hashes differ: the series order in
    # each request must come from the data alone, or the idempotency keys would not repeat.
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _SEED_SCRIPT], env=env, capture_output=True, text=True, check=True)
        outs.add(done.stdout.strip())
    assert len(outs) == 1 and len(next(iter(outs)).split(",")) == 8


class _Counting:
    """A target that counts the points it acknowledges."""

    def __init__(self) -> None:
        self.points = 0

    def send(self, request: Any, timeout: float | None = None) -> None:
        self.points += int(request.points)

    def close(self) -> None:
        pass


def test_pending_points_stay_bounded_and_requests_leave_during_process() -> None:
    target = _Counting()
    config = SinkConfig(target=lambda: target, dataset_rid="ri.test.bound", settings={"max_request_points": 10_000})
    dofn = BatchingWriteDoFn(config)
    dofn.setup()
    dofn.start_bundle()
    n = 5 * PENDING_POINTS + 123
    peak = 0
    for i in range(n):
        assert list(dofn.process((f"c{i % 50}", BASE + i, float(i)))) == []
        peak = max(peak, len(dofn._flat) // 3)
    assert peak == PENDING_POINTS  # a full batch is written when the next element arrives
    # Requests were cut while elements arrived, not all at the end: memory stays bounded.
    assert dofn._stream._core.seq >= 4 * PENDING_POINTS // 10_000  # type: ignore[attr-defined]
    assert list(dofn.finish_bundle() or []) == []
    dofn.teardown()
    assert target.points == n


class _FailingOnce:
    """A target whose writes raise a bug-like error (not a TargetError) while ``ok`` is unset."""

    def __init__(self) -> None:
        self.ok = False
        self.points = 0

    def send(self, request: Any, timeout: float | None = None) -> None:
        if not self.ok:
            raise RuntimeError("boom")
        self.points += int(request.points)

    def close(self) -> None:
        pass


def test_a_failed_bundle_fails_and_the_next_bundle_on_the_instance_works() -> None:
    # process is a generator's send: an error must fail the bundle without ending the generator,
    # and points the failed bundle left behind must not leak into the next one.
    target = _FailingOnce()
    dofn = BatchingWriteDoFn(SinkConfig(target=lambda: target, dataset_rid="ri.test.again"))
    dofn.setup()
    # An error inside the generator (injected where it converts a batch) fails that element.
    dofn.start_bundle()

    def broken(*args: Any) -> Any:
        raise RuntimeError("bug in write_points")

    dofn._writer.write_points = broken  # type: ignore[method-assign,union-attr]
    outputs = [list(dofn.process((f"c{i % 7}", BASE + i, float(i)))) for i in range(PENDING_POINTS)]
    assert outputs == [[]] * PENDING_POINTS
    last = dofn.process(("c0", BASE + PENDING_POINTS, 1.0))  # the full batch is written now
    with pytest.raises(RuntimeError, match="bug in write_points"):
        list(last)
    for i in range(10):  # the generator still runs; these are left behind by the failed bundle
        assert list(dofn.process(("stale", BASE + i, float(i)))) == []
    # The next bundle on the instance: exactly its own points, none of the stale ones.
    target.ok = True
    dofn.start_bundle()
    for i in range(1_000):
        assert list(dofn.process((f"c{i % 7}", BASE + i, float(i)))) == []
    assert list(dofn.process(("c0", BASE + 5_000, "not a double"))) == []  # reported at the batch
    failed = list(dofn.finish_bundle() or [])
    assert target.points == 1_000
    assert [f.value.value.element for f in failed] == [("c0", BASE + 5_000, "not a double")]
    # A target that fails every request: the bundle fails at its end, saying what was lost.
    target.ok = False
    dofn.start_bundle()
    outputs = [dofn.process((f"c{i % 7}", BASE + i, float(i))) for i in range(PENDING_POINTS + 10)]
    assert all(list(out) == [] for out in outputs)  # acknowledgements are only awaited at the end
    with pytest.raises(DeliveryError, match="bundle not delivered") as failure:
        dofn.finish_bundle()
    assert "boom" in str(failure.value)
    dofn.teardown()
    assert target.points == 1_000


N_BEAM = 2 * PENDING_POINTS + 4_321


def _generate(_: Any) -> Iterator[Any]:
    yield from mixed_points(N_BEAM)
    yield ("late.series", np.array([BASE, BASE + 1]), np.array([1.0, 2.0]))  # not a point: flushes the batch
    yield ("f1", BASE + N_BEAM, 3.5)  # after the series element, in the last (partial) batch
    yield ("f1", BASE + N_BEAM + 1, "late text")  # a bad point found in finish_bundle


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(tmp_path_factory.mktemp("beam-batched")) as srv:
        yield srv


def test_pipeline_with_batches_lands_exactly_and_reports_each_bad_point(server: LocalServer) -> None:
    rid = "ri.test.batched"
    points = mixed_points(N_BEAM)
    bad_ids = set(BAD)
    expected: dict[str, list[tuple[int, Any]]] = {}
    for i, (ch, ts, v) in enumerate(points):
        if i not in bad_ids:
            stored = int(v) if isinstance(v, bool) else float(v) if isinstance(v, np.floating) else v
            if isinstance(v, dict):
                stored = json.dumps(v, separators=(",", ":"), sort_keys=True)
            expected.setdefault(ch, []).append((ts, stored))
    expected["late.series"] = [(BASE, 1.0), (BASE + 1, 2.0)]
    expected["f1"].append((BASE + N_BEAM, 3.5))

    def check_failed(failed: list[Any]) -> None:
        reasons = {json.dumps(repr(f.element)): f.reason for f in failed}
        assert len(failed) == len(BAD) + 1, [f.reason for f in failed]
        for i, needle in BAD.items():
            reason = reasons[json.dumps(repr(points[i]))]
            assert needle in reason and reason.startswith(f"element {points[i]!r}"), reason
        late = reasons[json.dumps(repr(("f1", BASE + N_BEAM + 1, "late text")))]
        assert "pinned to double" in late

    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Impulse() | beam.FlatMap(_generate) | WriteToNominal(server.target, dataset_rid=rid)
        assert_that(result.failed, check_failed)
    got = {s.channel: s for s in server.store.list_series(rid)}
    assert got.keys() == expected.keys()
    assert got["u"].value_type.value == "uint64" and got["b"].value_type.value == "int64"
    assert got["s15"].value_type.value == "string" and got["i10"].value_type.value == "int64"
    assert got["arr"].value_type.value == "double_array" and got["st"].value_type.value == "struct"
    for ch, pts in expected.items():
        table = server.store.read(rid, ch)
        stored = list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
        assert stored == sorted(pts, key=lambda p: p[0]), ch


def _window_of(failed: Any, w: Any = beam.DoFn.WindowParam) -> tuple[str, int]:
    return failed.element[0], int(w.start)


def test_windowed_input_reports_bad_points_in_their_own_window(server: LocalServer) -> None:
    # Outside the global window each element is written (and failed) by its own process call.
    def gen(_: Any) -> Iterator[Any]:
        for i in range(200):
            ts = BASE + i * 10**9
            value: Any = "bad" if i == 150 else float(i)
            yield window.TimestampedValue(("w", ts, value), ts // 10**9)

    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = (
            p
            | beam.Impulse()
            | beam.FlatMap(gen)
            | beam.WindowInto(window.FixedWindows(60))
            | WriteToNominal(server.target, dataset_rid="ri.test.windowed")
        )
        start = (BASE // 10**9 + 150) // 60 * 60
        assert_that(result.failed | beam.Map(_window_of), equal_to([("w", start)]))
    assert sum(s.count for s in server.store.list_series("ri.test.windowed")) == 199
