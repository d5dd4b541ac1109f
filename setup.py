"""The one compiled module, WriteDoFn.process (beam_nominal/beam/_fastpath.c); everything else is
in pyproject.toml. Optional: an install without a C compiler still works, with the same process
written in Python (slower a point; docs/architecture.md). ``BEAM_NOMINAL_PURE_PYTHON=1`` builds
without it: a ``py3-none-any`` wheel for workers of another platform (docs/runners.md)."""

import os

from setuptools import Extension, setup

compiled = [Extension("beam_nominal.beam._fastpath", ["beam_nominal/beam/_fastpath.c"], optional=True)]
setup(ext_modules=[] if os.environ.get("BEAM_NOMINAL_PURE_PYTHON") == "1" else compiled)
