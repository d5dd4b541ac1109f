"""A Java pipeline writes through WriteToNominal by cross-language expansion, on Prism.

``examples/java`` (built with Maven by ``tools/engines.py``) builds its pipeline with Beam's Java
SDK, expands ``beam_nominal.WriteToNominal`` on a Python expansion service of this venv (its
transforms in an ``EXTERNAL`` environment: the tier's worker pool) and submits the job to the
shared Prism job server, its Java stages run by the Java SDK harness in the submitting JVM. Wide
Rows (int64, nullable double and string fields) and point Rows land in the local server on
loopback and are read back exactly: int64 bits, ns timestamps, values, channels and tags; the
Rows WriteToNominal cannot write come back to the Java pipeline as its failed Rows, and it exits 2.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _external import require
from _ports import free_port

from beam_nominal.server import LocalServer, LocalStore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import engines  # noqa: E402  (tools/engines.py: builds examples/java)

RID = "ri.test.engines.java"
READINGS = 3_000
START_NS = 1_714_564_800_000_000_000  # TelemetryToNominal's default --startNanos
INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def java_classpath() -> str:
    """The Java example's runtime classpath, building it (Maven, incrementally) first."""
    require(
        shutil.which("java") is not None and shutil.which("mvn") is not None,
        "Java and Maven are needed to build and run examples/java",
    )
    return engines.build_java_example().read_text().strip()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def expansion_service(external_workers: str, engine_logs: Path) -> Iterator[str]:
    """Beam's Python expansion service for ``beam_nominal.*``, its transforms on the worker pool."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = engine_logs / "expansion-service.log"
    for _ in range(5):
        port = free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "apache_beam.runners.portability.expansion_service_main",
                    f"--port={port}",
                    "--fully_qualified_name_glob=beam_nominal.*",
                    "--environment_type=EXTERNAL",
                    f"--environment_config={external_workers}",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if _listening(proc, port, timeout=120):
            break
        _stop(proc)  # the port was taken in between: another one
    else:
        raise RuntimeError(f"the expansion service did not start; see {log}")
    try:
        yield f"localhost:{port}"
    finally:
        _stop(proc)


def _listening(proc: subprocess.Popen[bytes], port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)  # polling a port being opened: there is no event to wait on
    raise TimeoutError(f"nothing listens on port {port} {timeout} s after starting the expansion service")


def _run_java(classpath: str, log: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    with open(log, "ab") as out:
        return subprocess.run(
            ["java", "-cp", classpath, "example.beamnominal.TelemetryToNominal", *args],
            cwd=ROOT / "examples" / "java",
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=400,
        )


def _series(store: LocalStore, channel: str, tags: dict[str, str] | None = None) -> list[tuple[int, object]]:
    table = store.read(RID, channel, tags)
    return list(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))


@pytest.mark.timeout(600)
def test_java_rows_land_exactly(
    java_classpath: str, prism_job_server: str, expansion_service: str, engine_logs: Path, tmp_path: Path
) -> None:
    log = engine_logs / "java-pipeline.log"
    # More points from a CSV: doubles Java and Python must carry bit for bit, and two bad rows (no
    # channel) amid them.
    csv_points = [
        ("coolant.flow", -(2**63) + 1, -0.0),  # -2**63 is the NaT sentinel, refused
        ("coolant.flow", -1, 5e-324),
        ("coolant.flow", 0, 1.7976931348623157e308),
        ("coolant.flow", INT64_MAX, 0.1 + 0.2),
    ]
    bad = [("", 17, 1.5), ("", 18, 2.5)]
    csv = tmp_path / "points.csv"
    rows = [*csv_points[:2], bad[0], *csv_points[2:], bad[1]]
    csv.write_text("".join(f"{c},{t},{v!r}\n" for c, t, v in rows), encoding="utf-8")
    failed_output = tmp_path / "failed.txt"
    with LocalServer(tmp_path / "data", port=0) as server:
        done = _run_java(
            java_classpath,
            log,
            f"--jobEndpoint={prism_job_server}",
            f"--expansionService={expansion_service}",
            f"--target={server.target}",
            f"--datasetRid={RID}",
            f"--readings={READINGS}",
            f"--pointsCsv={csv}",
            f"--failedOutput={failed_output}",
        )
        # 2: the pipeline ran and some elements were not written (the failed Rows, in Java).
        assert done.returncode == 2, f"the Java pipeline exited with {done.returncode}; see {log}"
        failed = sorted(failed_output.read_text(encoding="utf-8").splitlines())
        assert len(failed) == len(bad), failed
        for line, (_, t, v) in zip(failed, bad, strict=True):
            assert line.startswith("ElementError: element "), line
            assert f"timestamp={t}, value={v!r}" in line and "channel must be a non-empty string" in line, line
        store = server.store
        # TelemetryToNominal's readings (its docstring): reading i at START_NS + i * 1_000_001 ns.
        ts = [START_NS + i * 1_000_000 + i for i in range(READINGS)]
        engine = {"source": "java"}
        assert sorted((s.channel, s.tags, s.count) for s in store.list_series(RID)) == [
            ("coolant.flow", {}, len(csv_points)),
            ("mode", engine, len(range(0, READINGS, 4))),
            ("oil_temp", engine, READINGS - READINGS // 5),
            ("pressure.inlet", {}, READINGS),
            ("rpm", engine, READINGS),
        ]
        rpm = store.read(RID, "rpm", engine)
        assert str(rpm.column("value").type) == "int64"  # INT64 fields stay int64, beyond 2**53
        assert _series(store, "rpm", engine) == [(t, INT64_MAX - i) for i, t in enumerate(ts)]
        oil = _series(store, "oil_temp", engine)
        want_oil = [(t, 80 + i / 7.0) for i, t in enumerate(ts) if i % 5 != 4]
        assert len(oil) == len(want_oil)
        for (t, got), (want_t, want) in zip(oil, want_oil, strict=True):
            # Bit for bit: the Java double, not a value close to it.
            assert t == want_t and isinstance(got, float) and got.hex() == want.hex(), (t, got, want)
        assert _series(store, "mode", engine) == [(t, f"état {i % 3}") for i, t in enumerate(ts) if i % 4 == 0]
        pressure = _series(store, "pressure.inlet")
        assert [(t, v.hex()) for t, v in pressure] == [(t, (i * 0.1).hex()) for i, t in enumerate(ts)]
        coolant = _series(store, "coolant.flow")
        assert [(t, v.hex()) for t, v in coolant] == [(t, v.hex()) for _, t, v in csv_points]
