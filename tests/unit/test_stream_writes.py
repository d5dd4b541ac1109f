"""``NominalStream.enqueue``, ``enqueue_float_array``, ``enqueue_string_array`` and ``enqueue_batch``:
every call lands whole or fails whole, in order within its series, whatever the request size;
a closed stream refuses each; an error while cutting reaches the caller with the lock let go."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
from _stream_fakes import RecordingTarget

from beam_nominal.errors import StreamClosedError
from beam_nominal.stream import NominalStream

B = 1_700_000_000_000_000_000


def _calls() -> list[tuple[str, tuple[Any, ...]]]:
    rng = np.random.default_rng(1)
    calls: list[tuple[str, tuple[Any, ...]]] = []
    for i in range(3000):
        k = int(rng.integers(9))
        if k < 3:
            calls.append(("enqueue", (f"c{k}", B + i, float(rng.random()))))
        elif k < 5:
            calls.append(("enqueue_float_array", (f"a{k}", B + i, rng.random(int(rng.integers(0, 9))).tolist())))
        elif k < 7:
            strings = [f"s{j}" * int(rng.integers(0, 4)) for j in range(int(rng.integers(0, 9)))]
            calls.append(("enqueue_string_array", (f"s{k}", B + i, strings)))
        elif k < 8:
            if i % 2:
                calls.append(("enqueue", ("c0", B + i, float(i), {"k": str(i % 3)})))
            else:  # a column of a series written point by point too
                calls.append(("enqueue_batch", ("c1", B + i + np.arange(3), rng.random(3))))
        else:  # a wide record: its rows settle before the single points after it
            record = {"w0": float(i), "c1": 0.5, "a3": [float(i)], "s5": ["r"]}
            calls.append(("enqueue_from_dict", (B + i, record)))
    return calls


def _points(calls: list[tuple[str, tuple[Any, ...]]], **settings: Any) -> tuple[dict[Any, Any], int]:
    target = RecordingTarget()
    stream = NominalStream(target, dataset_rid="ri.test.writes", linger=None, **settings)
    for name, args in calls:
        getattr(stream, name)(*args)
    report = stream.close()
    # Values as their repr (arrays as lists), which tells NaN from NaN and -0.0 from 0.0.
    points = {
        key: [(t, repr(v.tolist() if isinstance(v, np.ndarray) else v)) for t, v in series]
        for key, series in target.points().items()
    }
    return points, report.points


def test_every_point_lands_once_in_order_whatever_the_request_size() -> None:
    calls = _calls()
    expected = 3000 + sum({"enqueue_from_dict": 3, "enqueue_batch": 2}.get(name, 0) for name, _ in calls)
    whole, count = _points(calls)
    assert count == sum(map(len, whole.values())) == expected
    for settings in ({"max_request_bytes": 1024}, {"max_request_points": 100}):
        # Small requests cut the same points into many: each series' points stay the same, in order.
        assert _points(calls, **settings) == (whole, expected)
    # Series only enqueue writes to, tagged or not: each holds its calls' points as given.
    single: dict[Any, list[tuple[int, str]]] = {}
    for name, args in calls:
        if name == "enqueue" and args[0] in ("c0", "c2"):
            tags = tuple(sorted(args[3].items())) if len(args) > 3 else ()
            single.setdefault((args[0], tags), []).append((args[1], repr(args[2])))
    assert {(k.channel, k.tags): p for k, p in whole.items() if k.channel in ("c0", "c2")} == single


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("enqueue", ("c", B + 1, 0.5)),
        ("enqueue_float_array", ("arr", B + 1, [0.5])),
        ("enqueue_string_array", ("sarr", B + 1, ["x"])),
        ("enqueue_batch", ("c", np.array([B + 1]), np.array([0.5]))),
    ],
)
def test_a_closed_stream_refuses_each_write(name: str, args: tuple[Any, ...]) -> None:
    stream = NominalStream(RecordingTarget(), dataset_rid="ri.test.writes", linger=None)
    stream.enqueue("c", B, 0.5)
    stream.enqueue_float_array("arr", B, [0.5])
    stream.enqueue_string_array("sarr", B, ["x"])
    assert stream.close().points == 3
    with pytest.raises(StreamClosedError):
        getattr(stream, name)(*args)


def test_an_error_in_the_cut_releases_the_lock_and_propagates() -> None:
    stream = NominalStream(RecordingTarget(), dataset_rid="ri.test.writes", linger=None, max_request_points=10)
    core = stream._sender
    stream.enqueue("c", B, 0.5)

    def broken() -> list[Any]:
        raise RuntimeError("cut failed")

    core.settled = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="cut failed"):
        for i in range(5000):
            stream.enqueue("c", B + 1 + i, 0.5)
    assert not core.lock.locked()
    del core.settled
    stream.close()


def test_without_the_compiled_module_everything_takes_the_python_paths() -> None:
    # An install without a C compiler: the import of _fastpath fails, and the DoFn and the
    # batch's double points fall back to Python, the stream taking the same points.
    code = """
import sys
sys.modules["beam_nominal._pipeline._fastpath"] = None  # its import raises ImportError
import numpy as np
from beam_nominal._pipeline import staging
from beam_nominal.beam._dofn import WriteDoFn, _PythonProcess
from beam_nominal.stream import NominalStream

assert WriteDoFn.__mro__[1] is _PythonProcess
assert staging.DoublePoints is staging._DoublePoints

class Count:
    points = 0
    def send(self, request, timeout=None):
        Count.points += request.points
    def close(self):
        pass

B = 1_700_000_000_000_000_000
with NominalStream(Count(), dataset_rid="ri.test.pure", linger=None) as s:
    for i in range(5000):
        s.enqueue("c", B + i, 0.5)
        s.enqueue_float_array("a", B + i, [0.5, 1.5])
        s.enqueue_string_array("s", B + i, ["x"])
    s.enqueue_batch("b", np.arange(B, B + 100), np.ones(100))
print(Count.points)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == str(3 * 5000 + 100)


class _FloatSub(float):
    pass


def _twins(name: str) -> list[Any]:
    """``staging``'s ``name`` and its pure twin (the one where ``_fastpath`` is not built)."""
    from beam_nominal._pipeline import staging

    found, pure = getattr(staging, name), getattr(staging, "_" + name)
    return [pytest.param(pure, id="pure")] + ([pytest.param(found, id="compiled")] if found is not pure else [])


@pytest.mark.parametrize("pack", _twins("pack_doubles"))
@pytest.mark.parametrize(
    "row",
    [
        [0.5, -1.5],
        [],
        [float("nan"), float("-inf"), -0.0, 2.0**70, 5e-324],
        [1, 2.0],
        [True, 1.0],
        [np.float64(1.5)],
        [_FloatSub(1.5)],
        [1.0, "x"],
        (1.0, 2.0),
        {"a": 1.0}.values(),
        np.array([1.0, 2.0]),
        "12",
        None,
    ],
    ids=repr,
)
def test_pack_doubles_is_float_row_for_a_list_of_floats_and_takes_nothing_else(pack: Any, row: Any) -> None:
    from beam_nominal._pipeline.values import float_row

    packed = pack(row)
    if type(row) is list and all(type(v) is float for v in row):
        assert packed == float_row("c", row)
        assert type(packed) is bytes
    else:
        assert packed is None


class _Key(str):
    """A channel named by a str subclass."""


@pytest.mark.parametrize("pack", _twins("pack_record"))
@pytest.mark.parametrize(
    ("record", "keys"),
    [
        ({"a": 0.5, "b": -0.0}, ("a", "b")),
        ({}, ()),
        ({"a": float("nan"), "b": 5e-324}, ("a", "".join(["b"]))),  # an equal name, not the same object
        ({"a": 0.5, "b": 1.5}, ("b", "a")),  # another order
        ({"a": 0.5}, ("a", "b")),
        ({"a": 0.5, "b": 1.5}, ("a",)),
        ({"a": 0.5, "b": 1}, ("a", "b")),
        ({"a": 0.5, "b": None}, ("a", "b")),
        ({"a": np.float64(0.5)}, ("a",)),
        ({"a": _FloatSub(0.5)}, ("a",)),
        (OrderedDict(a=0.5), ("a",)),
        ({"a": 0.5}, ["a"]),
    ],
    ids=repr,
)
def test_pack_record_packs_the_floats_of_a_dict_of_those_channels_and_takes_nothing_else(
    pack: Any, record: Any, keys: Any
) -> None:
    from beam_nominal._pipeline.values import float_row

    packed = pack(record, keys)
    if (
        type(record) is dict
        and type(keys) is tuple
        and tuple(record) == keys
        and all(type(v) is float for v in record.values())
    ):
        assert packed == float_row("c", list(record.values()))
        assert type(packed) is bytes
    else:
        assert packed is None


@pytest.mark.compiled
def test_pack_record_takes_a_channel_spelled_otherwise_than_its_block_by_the_general_path() -> None:
    # A str subclass equal to the block's channel: the compiled twin leaves it to the caller's
    # general path (which checks the name), the pure one packs it; the record lands either way.
    from beam_nominal._pipeline.staging import pack_record

    assert pack_record({_Key("a"): 0.5}, ("a",)) is None


def test_single_points_move_into_the_buffer_when_doubles_or_other_values_reach_the_settle_limit() -> None:
    # Single points are held in two columns (doubles; every other value) until one of them
    # holds settle_singles points: then everything held moves into the buffer, whichever
    # write (enqueue, an array write) brought that column to the limit.
    target = RecordingTarget()
    with NominalStream(target, dataset_rid="ri.x.settle", linger=None) as s:
        sender = s._sender
        limit = sender.settle_singles
        for k in range(limit - 1):
            s.enqueue("d", 1_000 + k, 0.5)
            s.enqueue_string_array("sa", 1_000 + k, ["x"])
        assert sender.staged.points == 2 * (limit - 1) and sender.buffer.points == 0
        s.enqueue_float_array("fa", 1_000, [1.0])  # the other values' limit-th point
        assert sender.staged.points == 0 and sender.buffer.points == 2 * limit - 1
        for k in range(limit - 1):
            s.enqueue_float_array("fa", 2_000 + k, [1.0])
            s.enqueue("d", 2_000 + k, 0.5)
        assert sender.staged.points == 2 * (limit - 1)
        s.enqueue("d", 3_000_000, 0.5)  # the doubles' limit-th point
        assert sender.staged.points == 0
