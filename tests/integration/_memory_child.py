"""Child process of test_bounded_resources.py: a NominalStream against a stalled or dead server.

Usage: python _memory_child.py URL DATASET CAP_BYTES CLOSE_TIMEOUT

The stream keeps its wire's default request size (``max_request_bytes``), as users' streams do:
what the client holds beyond its cap scales with that size, not with the cap. Enqueues 2 MiB
batches from a thread until an enqueue has blocked for a second, sampling its own
RSS the whole time, then closes with CLOSE_TIMEOUT. Prints one JSON line: the RSS before the
stream existed and its peak, the bytes enqueued, whether enqueue blocked, how long close took and
what it raised, and what the stream's requests and glibc's free heap hold once enqueue blocked.
Its own process, so the RSS is the client's alone.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def malloc_free_bytes() -> int | None:
    """Bytes glibc's heaps hold free (mallinfo2's fordblks): freed memory still resident that
    the process has not handed back. None off glibc (or before 2.33)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
        ]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    return int(mallinfo2().fordblks)


def main() -> None:
    url, rid, cap, close_timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    from beam_nominal.errors import DeliveryError
    from beam_nominal.stream import NominalStream

    n = 1 << 17  # 128 Ki doubles + timestamps: 2 MiB of columns per batch, 1 MiB of values
    ts0 = np.arange(n, dtype=np.int64)
    values = np.random.default_rng(0).random(n)
    baseline = rss()
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], rss())

    threading.Thread(target=sample, daemon=True).start()
    s = NominalStream(
        url,
        dataset_rid=rid,
        linger=None,
        max_buffered_bytes=cap,
        block_on_full=True,
        attempt_timeout=600,
        max_attempts=10_000,
        total_timeout=600,
    )
    if len(sys.argv) > 5 and sys.argv[5] == "--wait":
        # The stream made its first contact; the test now takes the server away, then says go.
        print("open", flush=True)
        sys.stdin.readline()
    enqueued = [0]
    last_return = [time.monotonic()]

    def produce() -> None:
        for b in range(10_000):
            s.enqueue_batch("m", ts0 + 1_700_000_000_000_000_000 + b * n, values)
            enqueued[0] += ts0.nbytes + values.nbytes
            last_return[0] = time.monotonic()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    # Blocked: no enqueue returned for a second (at 2 MiB a batch, unblocked ones take ms).
    deadline = time.monotonic() + 60
    while time.monotonic() - last_return[0] < 1.0 and time.monotonic() < deadline:
        time.sleep(0.05)
    blocked = producer.is_alive() and time.monotonic() - last_return[0] >= 1.0
    steady_peak = peak[0]
    # What the stream's requests hold at this point: the columns and the encoded bodies it budgets.
    import gc

    from beam_nominal.targets.base import Request

    alive = [o for o in gc.get_objects() if isinstance(o, Request)]
    columns = sum(b.timestamps.nbytes + getattr(b.values, "nbytes", 0) for r in alive for b in r.batches)
    encoded = sum(r.encoded_bytes for r in alive)
    heap_free = malloc_free_bytes()
    t0 = time.monotonic()
    error = None
    try:
        s.close(timeout=close_timeout)
    except DeliveryError as exc:
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    close_s = time.monotonic() - t0
    done.set()
    print(
        json.dumps(
            {
                "baseline_rss": baseline,
                "peak_rss": steady_peak,
                "enqueued_bytes": enqueued[0],
                "blocked": blocked,
                "close_seconds": close_s,
                "error": error,
                "requests_alive": len(alive),
                "request_columns_bytes": columns,
                "request_encoded_bytes": encoded,
                "malloc_free_bytes": heap_free,
            }
        ),
        flush=True,
    )
    # The producer may still be blocked inside enqueue on a failed stream: do not wait for it.
    sys.stdout.flush()
    import os

    os._exit(0)


if __name__ == "__main__":
    main()
