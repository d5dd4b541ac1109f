"""The engine tier's shared parts: the Prism binary, a Prism job server and a worker pool per session.

Everything started here runs on a free port in its own process group, logs into one directory
(``engine_logs``) whose path a failing test prints, and is stopped when the test run ends, also
after a failure.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _external import require
from _ports import free_port
from _worker_pool import worker_pool

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import engines  # noqa: E402  (tools/engines.py: where `make engines` caches the binaries)

# The workers import this checkout and the tier's modules, as the launcher does.
PYTHONPATH = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "engines")]
_LOGS_KEY = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def engine_logs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engine-logs")
    request.config.stash[_LOGS_KEY] = path
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    logs = item.config.stash.get(_LOGS_KEY, None)
    if report.failed and logs is not None:
        report.sections.append(("engine logs", f"Prism, worker pool and job logs: {logs}"))


@pytest.fixture(scope="session")
def prism_binary() -> str:
    path = engines.prism_path()
    require(
        path.is_file() and os.access(path, os.X_OK),
        f"Prism v{engines.beam_version()} is not built at {path}: run `make engines` (it needs Go)",
    )
    return str(path)


@pytest.fixture
def prism_home(tmp_path: Path, prism_binary: str) -> Path:
    """A home directory whose Beam cache holds the Prism release archive the DirectRunner looks
    for (it downloads one there; here the download cannot be made, so the built binary is put
    there under the release's name). Runs that set ``HOME`` to it start Prism with no runner named."""
    from apache_beam.runners.portability.prism_runner import PrismJobServer
    from apache_beam.version import __version__ as beam_version

    version = f"v{beam_version}"
    url = PrismJobServer._construct_download_url(version, version, platform.system(), platform.machine())
    home = tmp_path / "home"
    cache = home / ".apache_beam" / "cache" / "prism" / "bin"
    cache.mkdir(parents=True)
    # The release's archive holds the binary under the archive's name without ``.zip``.
    with zipfile.ZipFile(cache / os.path.basename(url), "w", zipfile.ZIP_STORED) as z:
        z.write(prism_binary, os.path.basename(url).removesuffix(".zip"))
    return home


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL if it is still there 20 s later."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="session")
def prism_job_server(prism_binary: str, engine_logs: Path) -> Iterator[str]:
    """A Prism job server shared by every job of the test run; yields its ``host:port``."""
    log = engine_logs / "prism.log"
    for _ in range(5):
        port = free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [prism_binary, "--job_port", str(port), "--serve_http=false", "--log_level", "info"],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            if _wait_listening(proc, port, timeout=60):
                break
        except BaseException:
            _stop_group(proc)
            raise
        _stop_group(proc)  # the port was taken in between: another one
    else:
        raise RuntimeError(f"Prism did not start; see {log}")
    try:
        yield f"localhost:{port}"
    finally:
        _stop_group(proc)


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)  # polling a port being opened: there is no event to wait on
    raise TimeoutError(f"nothing listens on port {port} {timeout} s after starting Prism")


@pytest.fixture(scope="session")
def external_workers(engine_logs: Path) -> Iterator[str]:
    """A worker pool of this venv's Python (``--environment_type=EXTERNAL``); yields its address."""
    with worker_pool(sys.executable, cwd=ROOT, log=engine_logs / "worker-pool.log", pythonpath=PYTHONPATH) as address:
        yield address
