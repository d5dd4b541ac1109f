"""A pipeline on PortableRunner (embedded job server) whose SDK workers come from an external pool.

Run as a script by the tests (``python _external_job.py --target ... --pool host:port``), so that a
job that hangs can be ended: the embedded job server runs the job on a thread that ``cancel``
does not stop and that keeps its process alive. Classes defined here are pickled by value (this is
``__main__``), so the workers need only Beam and beam_nominal. Exits 0 when the job is done and
its failed output is exactly what is expected, 3 on timeout, and 1 on any other failure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BASE = 1_700_000_000_000_000_000
ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 180


def good() -> list[tuple[int, tuple[Any, ...]]]:
    """(Beam timestamp in s, element) of the good elements."""
    floats = [(i, ("ext.f", BASE + i, i / 4)) for i in range(200)]
    texts = [(i, ("ext.s", BASE + i, f"v{i}", {"unit": "txt"})) for i in range(50)]
    return floats + texts


def bad() -> list[tuple[int, tuple[Any, ...]]]:
    return [(15, ("ext.f", "not a time", 1.0)), (42, ("ext.f", BASE, None))]


def expected() -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, Any]]]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, Any]]] = {}
    for _, e in good():
        key = (e[0], tuple(sorted(e[3].items())) if len(e) > 3 else ())
        out.setdefault(key, []).append((e[1], e[2]))
    return {k: sorted(v) for k, v in out.items()}


def run_job(target: str, rid: str, pool: str, timeout_s: float = JOB_TIMEOUT_S) -> None:
    """Launch this job from the running environment and this checkout, against the pool at ``pool``.

    Raises AssertionError if it fails, or if it does not end in time (it does not hang the caller).
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, __file__, f"--target={target}", f"--rid={rid}", f"--pool={pool}", f"--timeout={timeout_s}"]
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the launcher did not exit within {timeout_s + 60} s: {exc.stderr!r:.3000}") from None
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"


def assert_stored(store: Any, rid: str) -> None:
    """The good elements, exactly, and nothing else, in ``store`` (a LocalStore) under ``rid``."""
    want = expected()
    infos = {(i.channel, tuple(sorted(i.tags.items()))): i for i in store.list_series(rid)}
    assert sorted(infos) == sorted(want)
    for key, points in want.items():
        table = store.read(rid, key[0], dict(key[1]))
        got = sorted(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
        assert got == points and infos[key].count == len(points), key


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--rid", required=True)
    parser.add_argument("--pool", required=True, help="the worker pool's host:port")
    parser.add_argument("--timeout", type=float, default=JOB_TIMEOUT_S)
    args = parser.parse_args(argv)

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.portable_runner import PortableRunner
    from apache_beam.runners.runner import PipelineState
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms.window import FixedWindows, TimestampedValue

    import beam_nominal
    from beam_nominal.beam import WriteToNominal

    print(f"launcher: beam_nominal from {beam_nominal.__file__}", flush=True)
    here = os.getpid()

    class Seen(beam.DoFn):  # type: ignore[misc]
        def process(self, f: Any, ts: Any = beam.DoFn.TimestampParam, w: Any = beam.DoFn.WindowParam) -> Iterator[Any]:
            yield type(f).__name__, repr(f.element), float(ts), (float(w.start), float(w.end)), f.error, os.getpid()

    want = [("FailedElement", repr(e), float(s), (s // 10 * 10.0, s // 10 * 10.0 + 10)) for s, e in bad()]

    def check(seen: list[Any]) -> None:
        equal_to(want)([s[:4] for s in seen])
        assert all(s[4] == "ElementError" for s in seen), seen
        # Seen in SDK worker processes, not in the launching one.
        assert all(s[5] != here for s in seen), seen

    elements = [TimestampedValue(e, s) for s, e in good()]
    elements[120:120] = [TimestampedValue(e, s) for s, e in bad()]
    options = PipelineOptions(
        ["--job_endpoint=embed", "--environment_type=EXTERNAL", f"--environment_config={args.pool}"]
    )
    p = beam.Pipeline(runner=PortableRunner(), options=options)
    result = (
        p
        | beam.Create(elements)
        | beam.Reshuffle()
        | beam.WindowInto(FixedWindows(10))
        | WriteToNominal(args.target, dataset_rid=args.rid, max_request_points=50)
    )
    assert_that(result.failed | beam.ParDo(Seen()), check)
    run = p.run()
    state = run.wait_until_finish(duration=int(args.timeout * 1000))
    if not PipelineState.is_terminal(state):
        print(
            f"the job did not finish within {args.timeout} s (state {state}); "
            "can the workers' `python` on PATH import Beam and beam_nominal?",
            file=sys.stderr,
            flush=True,
        )
        run.cancel()
        os._exit(3)  # the job's thread would keep this process alive
    print(f"job state {state}", flush=True)
    return 0 if state == PipelineState.DONE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
