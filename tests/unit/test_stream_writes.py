"""``NominalStream.enqueue``, ``enqueue_float_array``, ``enqueue_string_array`` and ``enqueue_batch`` are compiled
(``_fastpath.c``'s ``FastWrites``, the stream's base class) for the common call, and in Python
(``_enqueue`` ...) for every other call and where the module is not built. These tests
hold the two to the same outcome, call by call: the same error or none, the same requests, the
same points; and check that the compiled methods do take the common calls themselves.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from _stream_fakes import RecordingTarget
from test_fast_path import CANDIDATES, FloatSub, StrSub

from beam_nominal._wire.decode import decode_request
from beam_nominal.errors import StreamClosedError
from beam_nominal.stream import NominalStream, _PythonWrites

B = 1_700_000_000_000_000_000


if issubclass(NominalStream, _PythonWrites):  # the pure build (make pure): NominalStream is that already
    PythonStream = NominalStream
else:

    class PythonStream(_PythonWrites, NominalStream):  # type: ignore[misc,no-redef]
        """NominalStream as it is where the compiled module is not built."""


class CountingStream(NominalStream):
    """The compiled stream, counting the calls its Python methods take."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.python_calls = 0
        super().__init__(*args, **kwargs)

    def _enqueue(self, *args: Any, **kwargs: Any) -> None:
        self.python_calls += 1
        super()._enqueue(*args, **kwargs)

    def _enqueue_float_array(self, *args: Any, **kwargs: Any) -> None:
        self.python_calls += 1
        super()._enqueue_float_array(*args, **kwargs)

    def _enqueue_string_array(self, *args: Any, **kwargs: Any) -> None:
        self.python_calls += 1
        super()._enqueue_string_array(*args, **kwargs)

    def _enqueue_batch(self, *args: Any, **kwargs: Any) -> None:
        self.python_calls += 1
        super()._enqueue_batch(*args, **kwargs)


class ListSub(list):  # type: ignore[type-arg]
    pass


# (method, args, kwargs) after the series "c" (double) and "arr" (double array) are known.
ARRAYS: list[Any] = [
    [1.0, 2.0],
    [],
    [0.5],
    [float("nan"), float("-inf"), -0.0],
    [2.0**60, -(2.0**70)],
    [1, 2.0],
    [2**53 + 1, 1.0],
    [True, 1.0],
    [np.float64(1.5), 2.0],
    [FloatSub(1.5)],
    [1.0, "x"],
    ["x", "y"],
    [1.0, None],
    [1.0, 1j],
    (1.0, 2.0),
    np.array([1.0, 2.0]),
    ListSub([1.0, 2.0]),
    "12",
    None,
]
STRING_ROWS: list[Any] = [
    ["a", "bc"],
    [],
    ("a", "bc"),
    ["", "x" * 300],
    ["é", "a"],
    ["a", "bad\ud800"],
    ["a", StrSub("b")],
    ["a", 1],
    ["a", None],
    ListSub(["a"]),
    np.array(["a", "b"]),
    "ab",
    [b"a"],
]
TS = np.arange(B, B + 4, dtype=np.int64)
VALS = np.array([0.5, 1.5, -0.0, np.nan])


class ArraySub(np.ndarray):
    pass


COLUMNS: list[tuple[Any, Any]] = [
    (TS, VALS),
    (TS[::2], VALS[::2]),  # strided views
    (TS[:1], VALS[:1]),
    (TS[:0], VALS[:0]),
    (TS, VALS[:3]),
    (np.array([B, -(2**63)], dtype=np.int64), VALS[:2]),
    (np.array([B, 2**63 - 1], dtype=np.int64), VALS[:2]),
    (TS.astype(">i8"), VALS),
    (TS.astype(np.longlong), VALS),
    (TS.astype(np.uint64), VALS),
    (TS.astype("M8[ns]"), VALS),
    (TS, VALS.astype(">f8")),
    (TS, VALS.astype(np.float32)),
    (TS, np.arange(4, dtype=np.int64)),
    (TS, np.array([True, False, True, False])),
    (TS, VALS.reshape(2, 2)),
    (TS.reshape(2, 2), VALS),
    (TS.tolist(), VALS),
    (TS, VALS.tolist()),
    (TS.view(ArraySub), VALS),
    (TS, VALS.view(ArraySub)),
    (TS, np.array(["a", "b", "c", "d"])),
]
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    *(("enqueue", point, {}) for point in CANDIDATES),
    ("enqueue", ("c", B, 0.5, None), {}),
    ("enqueue", ("c", B, 0.5), {"tags": None}),
    ("enqueue", ("c", B, 0.5, {}), {}),
    ("enqueue", ("c", B, 0.5, {"k": "v"}), {}),
    ("enqueue", (), {"channel": "c", "timestamp": B, "value": 0.5}),
    ("enqueue", ("c", B), {}),
    ("enqueue", ("c", B, 0.5, None, None), {}),
    ("enqueue", ("c", B), {"value": 0.5}),
    ("enqueue", ("c", B, 0.5), {"tag": None}),
    ("enqueue", ("c", B, 0.5), {"value": 0.5}),
    ("enqueue", ("c",), {"value": 0.5, "timestamp": B, "tags": None}),
    ("enqueue_float_array", ("arr", B), {}),
    ("enqueue_float_array", ("arr", B), {"value": [1.0]}),
    ("enqueue", ("arr", B, 0.5), {}),  # a double into a double-array series
    ("enqueue", ("arr", B, [3.0, 4.0]), {}),
    *(("enqueue_float_array", ("arr", B, row), {}) for row in ARRAYS),
    *(("enqueue_float_array", (channel, B, [1.0]), {}) for channel in ("c", "new_arr", StrSub("arr"), ["arr"], "")),
    *(("enqueue_float_array", ("arr", t, [1.0]), {}) for t in (2**63 - 1, -(2**63), 2**63, True, "2024-01-01Z")),
    ("enqueue_float_array", ("arr", B, [1.0], {"k": "v"}), {}),
    ("enqueue_float_array", ("arr", B, [1.0]), {"tags": None}),
    ("enqueue_float_array", (), {"channel": "arr", "timestamp": B, "values": [1.0]}),
    *(("enqueue_string_array", ("sarr", B, row), {}) for row in STRING_ROWS),
    *(("enqueue_string_array", (channel, B, ["x"]), {}) for channel in ("c", "arr", "new_s", StrSub("sarr"), "")),
    *(("enqueue_string_array", ("sarr", t, ["x"]), {}) for t in (2**63 - 1, -(2**63), 2**63, True, "2024-01-01Z")),
    ("enqueue_string_array", ("sarr", B, ["x"], {"k": "v"}), {}),
    ("enqueue_string_array", ("sarr", B), {"values": ["x"], "tags": None}),
    ("enqueue_string_array", ("sarr", B), {}),
    ("enqueue", ("sarr", B, ["x", "y"]), {}),
    *(("enqueue_batch", ("c", ts, vals), {}) for ts, vals in COLUMNS),
    *(("enqueue_batch", (channel, TS, VALS), {}) for channel in ("arr", "sarr", "new_c", StrSub("c"), ["c"], "")),
    ("enqueue_batch", ("c", TS, VALS, {"k": "v"}), {}),
    ("enqueue_batch", ("c", TS, VALS, {}), {}),
    ("enqueue_batch", ("c",), {"timestamps": TS, "values": VALS, "tags": None}),
    ("enqueue_batch", ("c", TS), {}),
    ("enqueue_batch", ("c", TS), {"value": VALS}),
    ("enqueue_float_array", ("sarr", B, [1.0]), {}),
]


def _outcome(stream: NominalStream, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[str]:
    """What each call did: its error's type and message, or nothing."""
    out = []
    for name, args, kwargs in calls:
        try:
            getattr(stream, name)(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            # A bad call is worded by whichever function parsed it (Python's or the C one).
            bad_call = re.search(r"enqueue\w*\(\)", str(exc)) is not None
            out.append(f"{type(exc).__name__}: {'bad call' if bad_call else exc}")
        else:
            out.append("")
    return out


def _requests(target: RecordingTarget) -> list[list[tuple[Any, ...]]]:
    """Each acknowledged request's series, in order: key, type, timestamps, values (as their
    repr, which tells NaN from NaN and -0.0 from 0.0 as equality does not)."""
    out = []
    for request in sorted(target.acked, key=lambda r: r.seq):
        batches = decode_request(request.body).batches
        out.append(
            [
                (b.key, b.value_type, b.timestamps.tolist(), repr([np.asarray(v).tolist() for v in b.values]))
                for b in batches
            ]
        )
    return out


def _run(cls: type[NominalStream], calls: list[Any], **settings: Any) -> tuple[list[str], list[Any], int]:
    target = RecordingTarget()
    stream = cls(target, dataset_rid="ri.test.writes", linger=None, **settings)
    stream.enqueue("c", B - 2, 0.25)
    stream.enqueue_float_array("arr", B - 2, [0.25])
    stream.enqueue_string_array("sarr", B - 2, ["first"])
    outcome = _outcome(stream, calls)
    points = stream.close().points
    return outcome, _requests(target), points


@pytest.mark.parametrize("call", CALLS, ids=repr)
def test_compiled_and_python_writes_agree_call_by_call(call: tuple[str, tuple[Any, ...], dict[str, Any]]) -> None:
    # Each call between two plain points of both series, so that a call the compiled path
    # wrongly took or refused shows in the requests as well as in the outcome.
    calls = [
        ("enqueue", ("c", B - 1, 0.5), {}),
        call,
        ("enqueue_float_array", ("arr", B + 1, [9.0]), {}),
        ("enqueue_string_array", ("sarr", B + 1, ["last"]), {}),
    ]
    compiled = _run(NominalStream, calls)
    python = _run(PythonStream, calls)
    assert compiled == python


def test_compiled_and_python_writes_agree_over_many_requests() -> None:
    # Small requests: the compiled methods settle and cut where the Python ones do.
    rng = np.random.default_rng(1)
    calls: list[Any] = []
    for i in range(3000):
        k = int(rng.integers(9))
        if k < 3:
            calls.append(("enqueue", (f"c{k}", B + i, float(rng.random())), {}))
        elif k < 5:
            row = rng.random(int(rng.integers(0, 9))).tolist()
            calls.append(("enqueue_float_array", (f"a{k}", B + i, row), {}))
        elif k < 7:
            strings = [f"s{j}" * int(rng.integers(0, 4)) for j in range(int(rng.integers(0, 9)))]
            calls.append(("enqueue_string_array", (f"s{k}", B + i, strings), {}))
        elif k < 8:
            if i % 2:
                calls.append(("enqueue", ("c0", B + i, float(i), {"k": str(i % 3)}), {}))
            else:  # a column of a series written point by point too
                calls.append(("enqueue_batch", ("c1", B + i + np.arange(3), rng.random(3)), {}))
        else:  # a wide record: rows pending close the compiled paths until they settle
            record = {"w0": float(i), "c1": 0.5, "a3": [float(i)], "s5": ["r"]}
            calls.append(("enqueue_from_dict", (B + i, record), {}))
    for settings in ({"max_request_bytes": 1024}, {"max_request_points": 100}, {}):
        compiled = _run(NominalStream, calls, **settings)
        python = _run(PythonStream, calls, **settings)
        assert compiled == python
        extra = {"enqueue_from_dict": 3, "enqueue_batch": 2}
        assert compiled[2] == 3003 + sum(extra.get(c[0], 0) for c in calls)
        assert len(compiled[1]) > (1 if settings else 0)


@pytest.mark.compiled
def test_the_compiled_writes_take_the_common_calls() -> None:
    # Not vacuous: the compiled path does take the common calls (the Python methods see only
    # each series' first point, the first after each cut, and the other calls).
    target = RecordingTarget()
    stream = CountingStream(target, dataset_rid="ri.test.writes", linger=None)
    assert NominalStream.enqueue is not _PythonWrites.enqueue  # type: ignore[comparison-overlap]
    for i in range(1000):
        stream.enqueue("c", B + i, 0.5)
        stream.enqueue_float_array("arr", B + i, [0.5, 1.5])
        stream.enqueue_string_array("sarr", B + i, ["a", "b"] if i % 2 else ("a", "b"))
        stream.enqueue_batch("col", TS + 4 * i, VALS)
    assert stream.python_calls == 4
    stream.enqueue("c", B, 0.5, {"k": "v"})
    stream.enqueue("c", B, np.float64(0.5))
    stream.enqueue_float_array("arr", B, (0.5, 1.5))
    stream.enqueue_string_array("sarr", B, ["é"])
    stream.enqueue_batch("col", TS, VALS.tolist())
    assert stream.python_calls == 9
    assert stream.close().points == 7008


def test_a_closed_stream_refuses_the_common_call() -> None:
    for cls in (NominalStream, PythonStream):
        stream = cls(RecordingTarget(), dataset_rid="ri.test.writes", linger=None)
        stream.enqueue("c", B, 0.5)
        stream.enqueue_float_array("arr", B, [0.5])
        stream.enqueue_string_array("sarr", B, ["x"])
        stream.close()
        with pytest.raises(StreamClosedError):
            stream.enqueue("c", B + 1, 0.5)
        with pytest.raises(StreamClosedError):
            stream.enqueue_float_array("arr", B + 1, [0.5])
        with pytest.raises(StreamClosedError):
            stream.enqueue_string_array("sarr", B + 1, ["x"])


def test_an_error_in_the_cut_releases_the_lock_and_propagates() -> None:
    # The compiled path calls the core's settled() under the lock: its error must reach the
    # caller with the lock let go, as in the Python methods' finally.
    for cls in (NominalStream, PythonStream):
        stream = cls(RecordingTarget(), dataset_rid="ri.test.writes", linger=None, max_request_points=10)
        core = stream._sender
        stream.enqueue("c", B, 0.5)

        def broken() -> list[Any]:
            raise RuntimeError("cut failed")

        core.settled = broken
        with pytest.raises(RuntimeError, match="cut failed"):
            for i in range(5000):
                stream.enqueue("c", B + 1 + i, 0.5)
        assert not core.lock.locked()
        del core.settled
        stream.close()


def test_the_compiled_docstrings_are_the_python_ones() -> None:
    for name in ("enqueue", "enqueue_float_array", "enqueue_string_array", "enqueue_batch"):
        assert inspect.getdoc(getattr(NominalStream, name)) == inspect.getdoc(getattr(_PythonWrites, name)), name


def test_without_the_compiled_module_everything_takes_the_python_paths() -> None:
    # An install without a C compiler: the import of _fastpath fails, and the stream, the DoFn
    # and the batch's split fall back to Python, taking the same points.
    code = """
import sys
sys.modules["beam_nominal._pipeline._fastpath"] = None  # its import raises ImportError
import numpy as np
from beam_nominal._pipeline import staging
from beam_nominal.beam._dofn import WriteDoFn, _PythonProcess
from beam_nominal.stream import NominalStream, _PythonWrites

assert NominalStream.__mro__[1] is _PythonWrites and WriteDoFn.__mro__[1] is _PythonProcess
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
