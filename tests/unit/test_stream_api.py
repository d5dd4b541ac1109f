"""Every enqueue form keeps values and timestamps exactly; conflicts fail loudly and locally."""

from __future__ import annotations

import datetime as dt
import math
import threading

import numpy as np
import pyarrow as pa
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal._pipeline.staging import ElementError
from beam_nominal._wire.decode import decode_request
from beam_nominal.errors import SeriesTypeError
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.stream import NominalStream


def _stream(target: RecordingTarget, **kw: object) -> NominalStream:
    return NominalStream(target, dataset_rid="ri.x.1", linger=None, **kw)  # type: ignore[arg-type]


def _types(target: RecordingTarget) -> dict[SeriesKey, ValueType]:
    return {b.key: b.value_type for r in target.acked for b in decode_request(r.body).batches}


def test_scalars_keep_their_type_exactly() -> None:
    target = RecordingTarget()
    with _stream(target) as s:
        s.enqueue("f", 1, 1.25)
        s.enqueue("f", 2, float("nan"))
        s.enqueue("i", 1, 2**53 + 1)
        s.enqueue("i", 2, -(2**63))
        s.enqueue("u", 1, 2**64 - 1)
        s.enqueue("u", 2, 3)  # a small non-negative int is accepted into a uint64 series
        s.enqueue("b", 1, True)
        s.enqueue("b", 2, np.bool_(False))
        s.enqueue("s", 1, "")
        s.enqueue("s", 2, "ünï ✓")
        s.enqueue("np", 1, np.int32(-5))
        s.enqueue("st", 1, {"z": 1, "a": [1, "x"]})
    got = target.points()
    assert got[SeriesKey("f")][0] == (1, 1.25) and math.isnan(got[SeriesKey("f")][1][1])  # type: ignore[arg-type]
    assert got[SeriesKey("i")] == [(1, 2**53 + 1), (2, -(2**63))]
    assert got[SeriesKey("u")] == [(1, 2**64 - 1), (2, 3)]
    assert got[SeriesKey("b")] == [(1, 1), (2, 0)]
    assert got[SeriesKey("s")] == [(1, ""), (2, "ünï ✓")]
    assert got[SeriesKey("np")] == [(1, -5)]
    assert got[SeriesKey("st")] == [(1, '{"a":[1,"x"],"z":1}')]
    types = _types(target)
    assert types[SeriesKey("i")] is ValueType.INT64 and types[SeriesKey("u")] is ValueType.UINT64
    assert types[SeriesKey("b")] is ValueType.INT64 and types[SeriesKey("st")] is ValueType.STRUCT


def test_timestamps_are_exact_in_every_form() -> None:
    target = RecordingTarget()
    utc = dt.timezone.utc
    with _stream(target) as s:
        s.enqueue("t", "2024-01-02T03:04:05.123456789Z", 1.0)
        s.enqueue("t", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=utc), 2.0)
        s.enqueue("t", np.int64(1_704_164_645_123_456_789), 3.0)
        s.enqueue("t", 1_704_164_645_123_456_789, 4.0)
        with pytest.raises(ValueError, match="naive"):
            s.enqueue("t", dt.datetime(2024, 1, 1), 5.0)
        with pytest.raises(ValueError, match="no timezone"):
            s.enqueue("t", np.datetime64("2024-01-02T03:04:05.123456789", "ns"), 5.0)
    base = 1_704_164_645_123_456_789
    assert target.points()[SeriesKey("t")] == [(base, 1.0), (base - 789, 2.0), (base, 3.0), (base, 4.0)]


def test_type_conflict_names_everything_and_touches_nothing_else() -> None:
    target = RecordingTarget()
    with _stream(target) as s:
        s.enqueue("x", 1, 1.0, tags={"site": "a"})
        s.enqueue("other", 1, "fine")
        with pytest.raises(SeriesTypeError) as info:
            s.enqueue("x", 2, "text", tags={"site": "a"})
        msg = str(info.value)
        assert "'x'" in msg and "site=a" in msg and "double" in msg and "string" in msg
        with pytest.raises(SeriesTypeError, match="int64"):
            s.enqueue("x", 3, 7, tags={"site": "a"})
        with pytest.raises(SeriesTypeError):
            s.enqueue_batch("x", [4, 5], ["a", "b"], tags={"site": "a"})
        with pytest.raises(SeriesTypeError):
            s.enqueue_batch("x", [4, 5], [1.0, "b"], tags={})  # another series: mixed column
        s.enqueue("i", 0, 5)
        with pytest.raises(SeriesTypeError, match=r"values\[1\] is a uint64 value"):
            s.enqueue_batch("i", [1, 2], [1, 2**63])  # the series is pinned to int64
        s.enqueue("x", 6, 6.0, tags={"site": "a"})
        s.enqueue("other", 2, "still fine")
    got = target.points()
    assert got[SeriesKey("x", (("site", "a"),))] == [(1, 1.0), (6, 6.0)]
    assert got[SeriesKey("other")] == [(1, "fine"), (2, "still fine")]
    assert SeriesKey("x") not in got


def test_batches_numpy_and_sequences() -> None:
    target = RecordingTarget()
    ts = np.arange(5, dtype=np.int64)
    vals = np.array([1.5, 2.5, 3.5, 4.5, 5.5])
    with _stream(target) as s:
        s.enqueue_batch("f", ts, vals)
        vals[:] = 0  # the stream copied what it was given
        ts[:] = 0
        s.enqueue_batch("i", [1, 2, 3], [2**60, -1, 0])
        s.enqueue_batch("u", [1, 2], [2**64 - 1, 1])  # needs uint64
        s.enqueue_batch("u8", np.array([1, 2]), np.array([1, 2], dtype=np.uint64))
        s.enqueue_batch("s", ["2024-01-01T00:00:00Z", "2024-01-01T00:00:01Z"], ["a", "b"])
        s.enqueue_batch("da", [1, 2], np.array([[1.0, 2.0], [3.0, 4.0]]))
        s.enqueue_batch("sa", [1, 2], [["a", "b"], ["", "c"]])
        s.enqueue_batch("st", [1, 2], [{"b": 2}, {"a": 1}])
        s.enqueue_batch("empty", [], [])
        with pytest.raises(ValueError, match="'bad': 2 timestamps but 3 values"):
            s.enqueue_batch("bad", [1, 2], [1.0, 2.0, 3.0])
    got = target.points()
    assert got[SeriesKey("f")] == [(i, i + 1.5) for i in range(5)]
    assert got[SeriesKey("i")] == [(1, 2**60), (2, -1), (3, 0)]
    assert got[SeriesKey("u")] == [(1, 2**64 - 1), (2, 1)]
    assert got[SeriesKey("u8")] == [(1, 1), (2, 2)]
    assert got[SeriesKey("s")] == [(1_704_067_200_000_000_000, "a"), (1_704_067_201_000_000_000, "b")]
    assert [(t, list(v)) for t, v in got[SeriesKey("da")]] == [(1, [1.0, 2.0]), (2, [3.0, 4.0])]  # type: ignore[call-overload]
    assert got[SeriesKey("sa")] == [(1, ["a", "b"]), (2, ["", "c"])]
    assert got[SeriesKey("st")] == [(1, '{"b":2}'), (2, '{"a":1}')]
    assert SeriesKey("empty") not in got and SeriesKey("bad") not in got


def test_arrays_and_structs_one_at_a_time() -> None:
    target = RecordingTarget()
    with _stream(target) as s:
        s.enqueue_float_array("fa", 1, [1, 2.5])
        s.enqueue_float_array("fa", 2, np.array([], dtype=np.float64))
        s.enqueue_string_array("sa", 1, ["x", "ÿ", ""])
        s.enqueue_struct("st", 1, {"b": {"c": None}, "a": True})
        with pytest.raises(TypeError, match="'sa'"):
            s.enqueue_string_array("sa", 2, ["x", 3])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"'st'.*JSON"):
            s.enqueue_struct("st", 2, {"a": float("nan")})
        with pytest.raises(SeriesTypeError):
            s.enqueue_string_array("fa", 3, ["x"])
    got = target.points()
    assert [(t, list(v)) for t, v in got[SeriesKey("fa")]] == [(1, [1.0, 2.5]), (2, [])]  # type: ignore[call-overload]
    assert got[SeriesKey("sa")] == [(1, ["x", "ÿ", ""])]
    assert got[SeriesKey("st")] == [(1, '{"a":true,"b":{"c":null}}')]


def test_wide_records_and_tables() -> None:
    target = RecordingTarget()
    table = pa.table(
        {
            "timestamp": pa.array([1, 2, 3], pa.timestamp("us", "UTC")),
            "f": [1.0, None, 3.0],
            "i": pa.array([2**62, 1, 2], pa.int64()),
            "s": ["a", "b", ""],
            "fa": [[1.0], [2.0, 3.0], []],
            "sa": [["x"], [], ["y", "z"]],
        }
    )
    with _stream(target) as s:
        for t in range(3):
            s.enqueue_from_dict(t, {"w1": float(t), "w2": t, "w3": str(t)}, tags={"rig": "1"})
        s.enqueue_table(table, tags={"src": "tbl"})
        s.enqueue_table(table.to_batches()[0].select(["timestamp", "i"]), tags={"src": "rb"})
    got = target.points()
    rig = (("rig", "1"),)
    assert got[SeriesKey("w1", rig)] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert got[SeriesKey("w2", rig)] == [(0, 0), (1, 1), (2, 2)]
    assert got[SeriesKey("w3", rig)] == [(0, "0"), (1, "1"), (2, "2")]
    tbl = (("src", "tbl"),)
    assert got[SeriesKey("f", tbl)] == [(1000, 1.0), (3000, 3.0)]  # nulls skipped
    assert got[SeriesKey("i", tbl)] == [(1000, 2**62), (2000, 1), (3000, 2)]
    assert got[SeriesKey("s", tbl)] == [(1000, "a"), (2000, "b"), (3000, "")]
    assert [(t, list(v)) for t, v in got[SeriesKey("fa", tbl)]] == [(1000, [1.0]), (2000, [2.0, 3.0]), (3000, [])]  # type: ignore[call-overload]
    assert got[SeriesKey("sa", tbl)] == [(1000, ["x"]), (2000, []), (3000, ["y", "z"])]
    assert got[SeriesKey("i", (("src", "rb"),))] == [(1000, 2**62), (2000, 1), (3000, 2)]


def test_table_type_conflict_buffers_nothing_from_the_table() -> None:
    target = RecordingTarget()
    with _stream(target) as s:
        s.enqueue("b", 1, "text")
        with pytest.raises(SeriesTypeError, match="'b'"):
            s.enqueue_table(pa.table({"timestamp": [5, 6], "a": [1.0, 2.0], "b": [1.0, 2.0]}))
    assert SeriesKey("a") not in target.points()


def test_eight_threads_every_point_exactly_once() -> None:
    target = RecordingTarget()
    per_thread = 5_000
    with _stream(target, max_request_bytes=64 * 1024, max_buffered_bytes=256 * 1024) as s:
        barrier = threading.Barrier(8)

        def work(k: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                t = k * per_thread + i
                if i % 4 == 0:
                    s.enqueue("shared", t, float(t))
                elif i % 4 == 1:
                    s.enqueue("own", i, i, tags={"thread": str(k)})
                elif i % 4 == 2:
                    s.enqueue_from_dict(t, {"w": float(i), f"t{k}": i})
                else:  # float64 batches of the same series as the single points above
                    s.enqueue_batch("shared", np.array([t, t + per_thread * 8]), np.array([float(t), -1.0]))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        report = s.flush()
    got = target.points()
    shared = sorted(got[SeriesKey("shared")])
    singles = [k * per_thread + i for k in range(8) for i in range(per_thread) if i % 4 in {0, 3}]
    expected = sorted(
        [(t, float(t)) for t in singles]
        + [(k * per_thread + i + 8 * per_thread, -1.0) for k in range(8) for i in range(3, per_thread, 4)]
    )
    assert shared == expected
    for k in range(8):
        assert got[SeriesKey("own", (("thread", str(k)),))] == [(i, i) for i in range(1, per_thread, 4)]
        assert sorted(got[SeriesKey(f"t{k}")]) == [(k * per_thread + i, i) for i in range(2, per_thread, 4)]
    total = sum(len(v) for v in got.values())
    assert report.points == total and report.requests > 1


def test_requests_are_deterministic_without_linger() -> None:
    def run() -> list[str]:
        target = RecordingTarget()
        with _stream(target, max_request_bytes=32 * 1024, max_in_flight=1) as s:
            for t in range(2000):
                s.enqueue("a", t, float(t))
                if t % 7 == 0:
                    s.enqueue_from_dict(t, {"w1": 1.0, "w2": 2})
            s.enqueue_batch("b", np.arange(5000), np.arange(5000.0))
        return [r.key for r in sorted(target.acked, key=lambda r: r.seq)]

    first = run()
    assert len(first) > 3 and first == run()


def test_repr_hides_the_token() -> None:
    from beam_nominal.targets.grpc import GrpcTarget

    t = GrpcTarget("grpc://127.0.0.1:1", token="s3cret")
    t._contacted.add("ri.x.1")  # as after a first contact: no server in this tier
    s = NominalStream(t, dataset_rid="ri.x.1", linger=None)
    assert "s3cret" not in repr(s) and "s3cret" not in repr(t)
    s.close()
    t.close()


def test_text_that_cannot_be_encoded_is_rejected_at_enqueue_naming_the_channel() -> None:
    # A lone surrogate would fail the encoder later, and with it every series in its request.
    bad = "ok\ud800"
    target = RecordingTarget()
    with _stream(target) as s:
        s.enqueue("good", 1, "fine ✓")
        for write in (
            lambda: s.enqueue("txt", 1, bad),
            lambda: s.enqueue("good", 2, bad),
            lambda: s.enqueue_batch("col", [1, 2], ["a", bad]),
            lambda: s.enqueue_string_array("sa", 1, ["a", bad]),
            lambda: s.enqueue_struct("st", 1, {"k": bad}),
            lambda: s.enqueue_from_dict(1, {"w": bad}),
            lambda: s.enqueue(bad, 1, 1.0),
            lambda: s.enqueue("tagged", 1, 1.0, tags={"k": bad}),
        ):
            with pytest.raises(ValueError, match="not valid Unicode text"):
                write()
        s.enqueue_from_dict(2, {"w": "x", "v": 1.0})
        s.enqueue_from_dict(3, {"w": "é", "v": 2.0})
        with pytest.raises(ValueError, match="'w'"):
            s.enqueue_from_dict(4, {"w": bad, "v": 3.0})  # same key set: the block's per-row check
    got = target.points()
    assert got == {
        SeriesKey("good"): [(1, "fine ✓")],
        SeriesKey("w"): [(2, "x"), (3, "é")],
        SeriesKey("v"): [(2, 1.0), (3, 2.0)],
    }


def test_tag_order_does_not_matter() -> None:
    target = RecordingTarget()
    with _stream(target) as s:
        s.enqueue("x", 1, 1.0, tags={"a": "1", "b": "2"})
        s.enqueue("x", 2, 2.0, tags={"b": "2", "a": "1"})
        s.enqueue("x", 3, 3.0, tags={"b": "2", "a": "1"})
    assert target.points() == {SeriesKey("x", (("a", "1"), ("b", "2"))): [(1, 1.0), (2, 2.0), (3, 3.0)]}
    assert len(s._sender.staged._tagged) == 2  # both spellings cached for the fast path


def test_repeated_float64_batches_of_a_known_series_keep_order_copies_and_checks() -> None:
    # The second and later float64 batches of an untagged float64 series take a shorter path;
    # it must keep every guarantee of the general one.
    from beam_nominal.errors import StreamClosedError

    target = RecordingTarget()
    s = _stream(target, max_request_bytes=4096, max_buffered_bytes=1 << 20)
    ts = np.arange(100, dtype=np.int64)
    vals = np.arange(100, dtype=np.float64)
    s.enqueue_batch("f", ts, vals)
    s.enqueue("f", 1000, -1.0)  # a tail point between two batches
    for k in range(1, 4):
        more_ts, more_vals = ts + 1000 * k + 1, vals + k
        s.enqueue_batch("f", more_ts, more_vals)
        more_ts[:] = -5  # the stream copied what it was given
        more_vals[:] = -5.0
    s.enqueue_batch("i", np.arange(3, dtype=np.int64), np.arange(3, dtype=np.int64))
    with pytest.raises(SeriesTypeError, match="'i'"):
        s.enqueue_batch("i", np.arange(3, dtype=np.int64), np.ones(3))
    report = s.close()
    with pytest.raises(StreamClosedError):
        s.enqueue_batch("f", ts, vals)
    expected = [(i, float(i)) for i in range(100)] + [(1000, -1.0)]
    for k in range(1, 4):
        expected += [(i + 1000 * k + 1, float(i + k)) for i in range(100)]
    assert target.points()[SeriesKey("f")] == expected
    assert report.points == len(expected) + 3
    assert len(target.acked) > 1  # the budget cut requests along the way


@pytest.mark.parametrize("tags", [{"k": "v" * 1025}, {"k" * 1025: "v"}], ids=["value", "key"])
def test_an_over_long_tag_is_refused_at_enqueue_and_good_data_still_goes(tags: dict[str, str]) -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    s.enqueue("good", 1, 1.0, {"k": "v" * 1024})
    for call in (
        lambda: s.enqueue("bad", 2, 2.0, tags),
        lambda: s.enqueue_batch("bad", [2], [2.0], tags),
    ):
        with pytest.raises((ElementError, ValueError), match="1024"):
            call()
    s.enqueue("good", 3, 3.0, {"k": "v" * 1024})
    report = s.close()
    assert report.failed_points == 0
    assert target.points() == {SeriesKey.of("good", {"k": "v" * 1024}): [(1, 1.0), (3, 3.0)]}


def test_enqueue_batch_copies_a_2d_matrix_of_rows() -> None:
    target = RecordingTarget()
    s = NominalStream(target, dataset_rid="ri.x.1", linger=None)
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    s.enqueue_batch("m", [1, 2], m)
    m[:] = -1.0  # callers may reuse their arrays
    s.close()
    rows = [list(v) for _, v in target.points()[SeriesKey("m")]]
    assert rows == [[1.0, 2.0], [3.0, 4.0]]


def test_non_ascii_text_keeps_requests_near_the_budget() -> None:
    target = RecordingTarget()
    s = NominalStream(
        target, dataset_rid="ri.x.1", linger=None, max_request_bytes=64 * 1024, max_buffered_bytes=1 << 22
    )
    s.enqueue_batch("emoji", list(range(2000)), ["\U0001f600" * 200] * 2000)
    s.close()
    assert max(len(r.body) for r in target.acked) <= 2 * 64 * 1024
