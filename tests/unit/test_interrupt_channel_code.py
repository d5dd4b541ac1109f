"""NominalStream's writes and Ctrl+C: no Python code of the caller's may run under the stream's
lock without a frame of the stream's on the stack, or the SIGINT handler
(``_pipeline/interrupt.py``) takes a Ctrl+C landing there for one in the caller's own code and
drains the stream at once, waiting for the lock the caller holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from _stream_fakes import RecordingTarget

import beam_nominal
from beam_nominal._pipeline import interrupt
from beam_nominal.stream import NominalStream

B = 1_700_000_000_000_000_000


def _writes(channel: Any, t: int) -> list[tuple[str, tuple[Any, ...]]]:
    return [
        ("enqueue", (channel, t, 0.5)),
        ("enqueue_float_array", (channel, t, [0.5, 1.5])),
        ("enqueue_string_array", (channel, t, ["a", "b"])),
        ("enqueue_batch", (channel, np.arange(t, t + 2, dtype=np.int64), np.array([0.5, 1.5]))),
    ]


def test_a_str_subclass_channel_runs_no_code_under_the_lock_outside_the_streams_frames() -> None:
    held_outside: list[str] = []

    class Channel(str):
        stream: NominalStream | None = None

        def _check(self, what: str) -> None:
            stream = Channel.stream
            locked = stream is not None and stream._sender.lock.locked()
            if locked and not interrupt._in_stateful_code(sys._getframe(1)):
                held_outside.append(what)

        def __hash__(self) -> int:
            self._check("__hash__")
            return str.__hash__(self)

        def __eq__(self, other: object) -> bool:
            self._check("__eq__")
            return str.__eq__(self, other)

    for method in range(4):
        # The channel given as the subclass, and as a str of the name a subclass registered
        # (a lookup then calls the key's __eq__).
        for plain_later in (False, True):
            stream = NominalStream(RecordingTarget(), dataset_rid="ri.test.interrupt", linger=None)
            name = f"ch{method}"
            for i in range(3):
                channel = name if plain_later and i == 2 else Channel(name)
                write, args = _writes(channel, B + 10 * i)[method]
                Channel.stream = stream if i == 2 else None
                getattr(stream, write)(*args)
            Channel.stream = None
            stream.close()
    assert held_outside == []


_CHILD = """
import signal, sys
sys.path.insert(0, {fakes!r})
import numpy as np
from _stream_fakes import RecordingTarget
from beam_nominal.stream import NominalStream

B = 1_700_000_000_000_000_000
armed = False

class Channel(str):
    def __hash__(self):
        fire()
        return str.__hash__(self)
    def __eq__(self, other):
        fire()
        return str.__eq__(self, other)

def fire():
    global armed
    if armed:
        armed = False
        signal.raise_signal(signal.SIGINT)  # a Ctrl+C landing in the channel's code

def writes(channel, t):
    return [
        ("enqueue", (channel, t, 0.5)),
        ("enqueue_float_array", (channel, t, [0.5, 1.5])),
        ("enqueue_string_array", (channel, t, ["a", "b"])),
        ("enqueue_batch", (channel, np.arange(t, t + 2, dtype=np.int64), np.array([0.5, 1.5]))),
    ]

for method in range(4):
    for plain_later in (False, True):
        stream = NominalStream(RecordingTarget(), dataset_rid="ri.test.interrupt", linger=None)
        name = "ch%d" % method
        for i in range(2):
            write, args = writes(Channel(name), B + 10 * i)[method]
            getattr(stream, write)(*args)
        armed = True
        try:
            for i in range(2, 20):
                write, args = writes(name if plain_later else Channel(name), B + 10 * i)[method]
                getattr(stream, write)(*args)
        except KeyboardInterrupt:
            pass
        else:
            assert armed, "the Ctrl+C was not raised"
        armed = False
        stream.close()
print("done")
"""


def test_a_ctrl_c_in_a_str_subclass_channels_code_does_not_hang() -> None:
    # A child process: what could fail is a hang of the main thread's SIGINT handler.
    script = _CHILD.format(fakes=str(Path(__file__).parent))
    root = str(Path(beam_nominal.__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"


def test_str_subclasses_hashing_in_c_keep_the_fast_paths() -> None:
    # Only keys whose __hash__ or __eq__ is Python code stay out of the maps: numpy.str_ channels
    # (names read from arrays) and plain subclasses keep the fast paths (WriteDoFn.process's too).
    from beam_nominal._pipeline.staging import PointBatch

    class Plain(str):
        pass

    class Hashing(str):
        def __hash__(self) -> int:
            return str.__hash__(self)

    batch = PointBatch()
    for channel in (np.str_("np"), Plain("plain"), Hashing("hashing"), "str"):
        batch.add_point(channel, B, 0.5, None)
    assert sorted(batch.float_codes) == ["np", "plain", "str"]
