"""The one compiled module, PointBatch's hot paths (beam_nominal/_pipeline/_fastpath.c:
WriteDoFn.process, PointBatch's double points as C columns, and stateless kernels: a list of
floats packed, the HTTP row body's join into a reused buffer); everything else is in pyproject.toml.
Optional: an install without a C compiler still works, with the same paths in Python (slower;
docs/architecture.md). ``BEAM_NOMINAL_PURE_PYTHON=1`` builds without it: a ``py3-none-any``
wheel for workers of another platform (docs/runners.md). ``BEAM_NOMINAL_COMPILE=1`` makes a
failed compile an error instead (``make`` and CI set it, so the compiled build is the one tested)."""

import os

from setuptools import Extension, setup

if os.environ.get("BEAM_NOMINAL_PURE_PYTHON") == "1" and os.environ.get("BEAM_NOMINAL_COMPILE") == "1":
    raise SystemExit("BEAM_NOMINAL_PURE_PYTHON=1 and BEAM_NOMINAL_COMPILE=1 contradict each other: set one")
required = os.environ.get("BEAM_NOMINAL_COMPILE") == "1"
source = "beam_nominal/_pipeline/_fastpath.c"
compiled = [Extension("beam_nominal._pipeline._fastpath", [source], optional=not required)]
setup(ext_modules=[] if os.environ.get("BEAM_NOMINAL_PURE_PYTHON") == "1" else compiled)
