"""An external SDK worker pool (``apache_beam.runners.worker.worker_pool_main``) in its own process.

The pool starts each SDK worker as ``python -c ...`` looked up on ``PATH``, not as its own
interpreter: the pool's ``bin`` directory goes first on ``PATH``, or workers without Beam die at
start and the job waits for them for ever.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
from _ports import free_port

__all__ = ["worker_pool"]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def worker_pool(
    python: str, *, cwd: Path, log: Path, pythonpath: Sequence[str] = (), start_timeout: float = 120.0
) -> Iterator[str]:
    """Run a worker pool from ``python``; yields its ``host:port`` for ``--environment_config``.

    Stopped on exit with SIGINT (the pool stops its server and its workers), and only if that
    does not end it within 20 s, with SIGKILL to its process group. Raises if it cannot start.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    for _ in range(5):
        port = free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [python, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own process group, so the workers it starts can be found and stopped with it.
                start_new_session=True,
            )
        address = f"localhost:{port}"
        try:
            if _wait_ready(proc, address, start_timeout):
                break
        except BaseException:
            _stop(proc)
            raise
        _stop(proc)  # the port was taken in between: another one
    else:
        raise RuntimeError(f"the worker pool did not start; see {log}:\n{log.read_text()[-3000:]}")
    try:
        yield address
    finally:
        _stop(proc)
        assert proc.returncode == 0, f"worker pool exited with {proc.returncode}; see {log}"


def _wait_ready(proc: subprocess.Popen[bytes], address: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        ready = grpc.channel_ready_future(channel)
        while time.monotonic() < deadline:
            try:
                ready.result(timeout=0.5)
                return True
            except grpc.FutureTimeoutError:
                if proc.poll() is not None:
                    return False
        ready.cancel()
    raise TimeoutError(f"worker pool at {address} not ready within {timeout} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
    # Its workers are stopped by the pool on the way out; make sure none is left behind.
    deadline = time.monotonic() + 20
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"worker processes of pool {proc.pid} outlived it")
