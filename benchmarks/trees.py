"""Our client from another checkout beside this one's, in one run (``--old TREE``).

A client named ``<name> (old)`` is ``<name>`` run in a child process that imports ``beam_nominal``
from TREE (a source checkout with its C module built, e.g. ``git worktree add /tmp/base REV`` then
``python setup.py build_ext --inplace`` there) and everything else, the benchmark scripts
included, from this checkout: the same script measures both builds.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD = " (old)"
_SHIMS: dict[Path, Path] = {}


def split(client: str) -> tuple[str, bool]:
    """``(client without the old marker, whether it runs from the other tree)``."""
    return (client.removesuffix(OLD), True) if client.endswith(OLD) else (client, False)


def child_env(tree: Path | None) -> tuple[dict[str, str] | None, Path | None]:
    """``(env, cwd)`` for a child process importing ``beam_nominal`` from ``tree``; ``(None, None)``
    for this checkout. The child's working directory is a directory holding only a link to
    ``tree/beam_nominal`` (``python -m`` puts the working directory first on the path), and
    PYTHONPATH names it and then this checkout, for ``benchmarks``."""
    if tree is None:
        return None, None
    tree = tree.resolve()
    if not (tree / "beam_nominal" / "__init__.py").is_file():
        raise SystemExit(f"--old {tree}: no beam_nominal package there (give a source checkout)")
    shim = _SHIMS.get(tree)
    if shim is None:
        shim = Path(tempfile.mkdtemp(prefix="bench-old-"))
        (shim / "beam_nominal").symlink_to(tree / "beam_nominal", target_is_directory=True)
        atexit.register(shutil.rmtree, shim, True)
        _SHIMS[tree] = shim
    return dict(os.environ, PYTHONPATH=f"{shim}{os.pathsep}{ROOT}"), shim
