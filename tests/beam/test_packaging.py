"""The wheel, as Dataflow's workers get the connector (``--extra_package``): built from the tracked
files, installed into a clean venv holding only what it declares, and run as the SDK workers of a
pipeline launched from this environment.

A module, data file or generated stub missing from the wheel, or a dependency it does not declare,
fails here: the wheel must hold every tracked file of its packages, every module must import in
the clean venv, and the workers there must write every point.

The venv's packages are the launching environment's versions (the workers must run the
launcher's Beam) and come from a wheelhouse, ``$BEAM_NOMINAL_WHEELHOUSE`` or
``~/.cache/beam-nominal/wheelhouse``, filled with ``pip download`` on first use, so later runs
need no registry. The test is skipped only when the wheelhouse lacks a package and no registry
can be reached.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _external_job import JOB_TIMEOUT_S, ROOT, assert_stored, run_job
from _worker_pool import worker_pool

from beam_nominal.server import LocalServer

PACKAGES = ("beam_nominal", "pipelines")
WHEELHOUSE = Path(os.environ.get("BEAM_NOMINAL_WHEELHOUSE", Path.home() / ".cache" / "beam-nominal" / "wheelhouse"))
# pip's words when no index or link can be reached (as opposed to a requirement nobody serves).
OFFLINE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Network is unreachable|Name or service not known|ConnectTimeoutError|Max retries exceeded"
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(cmd: list[str], cwd: Path, timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False, **kw)  # type: ignore[call-overload,no-any-return]


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (
        f"{' '.join(done.args)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return done


def _tracked_files() -> list[str]:
    done = _run(["git", "ls-files", "-z"], cwd=ROOT)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout, so what is tracked is unknown: {done.stderr.strip()}")
    return [f for f in done.stdout.split("\0") if f]


def _build_wheel(tmp: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the tracked files, as a clean clone would build it."""
    src = tmp / "src"
    for name in _tracked_files():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    # Without build isolation: the launching env has the build backend, and no registry is needed.
    _ok(
        _run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), "."],
            cwd=src,
        )
    )
    (wheel,) = (tmp / "dist").glob("beam_nominal-*.whl")
    return wheel


def _constraints(tmp: Path) -> Path:
    """The launching environment's versions: the workers must run the same Beam as the launcher."""
    pins = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and re.sub(r"[-_.]+", "-", name).lower() != "beam-nominal":
            pins.add(f"{name}=={dist.version}")
    path = tmp / "constraints.txt"
    path.write_text("\n".join(sorted(pins)) + "\n")
    return path


def _install(venv_python: Path, wheel: Path, constraints: Path, tmp: Path) -> None:
    offline = [str(venv_python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELHOUSE)]
    offline += [str(wheel), "-c", str(constraints)]
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    if _run(offline, cwd=tmp).returncode == 0:
        return
    # Fill the wheelhouse with what the wheel declares, at the launcher's versions, then again.
    fetch = _run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(WHEELHOUSE), str(wheel), "-c", str(constraints)],
        cwd=tmp,
        timeout=900,
    )
    if fetch.returncode != 0 and OFFLINE.search(fetch.stdout + fetch.stderr):
        pytest.skip(f"the wheelhouse {WHEELHOUSE} lacks the wheel's dependencies and no registry is reachable")
    _ok(fetch)
    # pip download copies the wheel too; the wheelhouse is for its dependencies only.
    for old in WHEELHOUSE.glob("beam_nominal-*.whl"):
        old.unlink()
    _ok(_run(offline, cwd=tmp))


# Every module of the packages, imported in the clean venv (isolated mode: nothing from this
# checkout, PYTHONPATH or the user's site); prints where beam_nominal came from.
IMPORT_ALL = """
import importlib, pkgutil, sys
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(module.name)
import beam_nominal
print(beam_nominal.__file__)
"""


def test_the_wheel_alone_runs_on_external_workers(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    tracked = {f for f in _tracked_files() if f.split("/", 1)[0] in PACKAGES}
    assert tracked, "no tracked files of the packages"
    # A C source is in the wheel as its compiled module (setup.py), not as itself.
    sources = {f for f in tracked if f.endswith(".c")}
    assert sources == {"beam_nominal/_pipeline/_fastpath.c"}
    compiled = {f for f in in_wheel if f.startswith("beam_nominal/_pipeline/_fastpath.") and f.endswith(".so")}
    assert len(compiled) == 1, sorted(in_wheel)
    assert sorted(tracked - sources - in_wheel) == [], "tracked files of the packages missing from the wheel"

    venv = tmp_path / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path))
    python = venv / "bin" / "python"
    # No access to the launching environment's packages.
    assert (
        _ok(_run([str(python), "-c", "import sys; print(sys.prefix != sys.base_prefix)"], cwd=tmp_path)).stdout.strip()
        == "True"
    )
    assert _run([str(python), "-I", "-c", "import apache_beam"], cwd=tmp_path).returncode != 0
    _install(python, wheel, _constraints(tmp_path), tmp_path)
    _ok(_run([str(python), "-m", "pip", "check"], cwd=tmp_path))
    where = _ok(_run([str(python), "-I", "-c", IMPORT_ALL, *PACKAGES], cwd=tmp_path)).stdout.strip()
    assert where.startswith(str(venv)), where
    _ok(_run([str(venv / "bin" / "beam-nominal"), "--help"], cwd=tmp_path))
    # The workers run the compiled process, not the Python one.
    compiled_process = (
        "from beam_nominal._pipeline import _fastpath; from beam_nominal.beam import _dofn\n"
        "assert _dofn.WriteDoFn.process is _fastpath.FastProcess.process"
    )
    _ok(_run([str(python), "-I", "-c", compiled_process], cwd=tmp_path))

    rid = "ri.test.packaging"
    with LocalServer(tmp_path / "data", port=0) as server:
        # The pool and its workers run from the clean venv, in a directory with no source in it.
        with worker_pool(str(python), cwd=tmp_path, log=tmp_path / "pool.log") as pool:
            run_job(server.target, rid, pool, timeout_s=JOB_TIMEOUT_S)
        assert_stored(server.store, rid)
