"""The pure build is pure: under ``BEAM_NOMINAL_TEST_PURE=1`` (``make pure``) every path the
compiled module could take is the Python one, even where the module is built, so that run tests
what an install without a C compiler runs."""

from __future__ import annotations

import os
import subprocess
import sys

#: This run is on the pure build (tests/conftest.py reads the same variable).
PURE = os.environ.get("BEAM_NOMINAL_TEST_PURE") == "1"

_CHECK = """
import importlib
from beam_nominal._pipeline import staging, values
from beam_nominal._wire import runs, scratch
from beam_nominal.beam._dofn import WriteDoFn, _PythonProcess
try:
    importlib.import_module("beam_nominal._pipeline._fastpath")
except ImportError:
    compiled_importable = False
else:
    compiled_importable = True
print(
    compiled_importable,
    WriteDoFn.process is _PythonProcess.process,
    staging.DoublePoints is staging._DoublePoints,
    values.join_into is None and scratch.join_into is None and runs.gather_runs is None,
)
"""


def _run(pure: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "BEAM_NOMINAL_TEST_PURE"}
    if pure:
        env["BEAM_NOMINAL_TEST_PURE"] = "1"
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", _CHECK], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split()[-4:])


def test_the_pure_switch_takes_every_compiled_path_away() -> None:
    assert _run(pure=True) == "False True True True"


def test_without_the_switch_the_compiled_paths_are_used() -> None:
    # The same check answers the other way on the compiled build (make and CI build it with
    # BEAM_NOMINAL_COMPILE=1): so it can tell the two apart.
    assert _run(pure=False) == "True False False False"


def test_this_run_is_as_the_switch_says() -> None:
    from beam_nominal.beam._dofn import WriteDoFn, _PythonProcess

    assert (WriteDoFn.process is _PythonProcess.process) is PURE
