"""Fetch and cache what the engine tier (tests/engines) runs on, outside the working tree.

Prism, the portable runner Beam's ``DirectRunner`` runs first, is built with ``go install`` of
``github.com/apache/beam/sdks/v2/go/cmd/prism`` at the version of the venv's Beam SDK (a user's
DirectRunner downloads the same binary from Beam's releases). It lands in
``$BEAM_NOMINAL_ENGINES/prism-<version>/prism`` (default ``~/.cache/beam-nominal/engines``), once per
version. Without Go the tool says so and exits 0: the tier then skips with that reason, or fails
under ``BEAM_NOMINAL_NO_SKIP=1``.

    python tools/engines.py            # fetch (if not cached); print the binary's path
    python tools/engines.py --path     # print where the binary is (or would be), fetch nothing
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRISM_PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"


def cache_dir() -> Path:
    return Path(os.environ.get("BEAM_NOMINAL_ENGINES", Path.home() / ".cache" / "beam-nominal" / "engines"))


def beam_version() -> str:
    from apache_beam.version import __version__

    return str(__version__)


def prism_path(version: str | None = None) -> Path:
    return cache_dir() / f"prism-{version or beam_version()}" / "prism"


def fetch_prism(version: str) -> Path:
    """Build Prism at ``version`` into the cache unless it is there; returns the binary's path."""
    target = prism_path(version)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("`go` is not on PATH: Prism cannot be built (install Go 1.22 or newer)")
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Built into a fresh directory and renamed into place: an interrupted build leaves no binary.
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        env = {**os.environ, "GOBIN": tmp, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        subprocess.run([go, "install", f"{PRISM_PACKAGE}@v{version}"], check=True, env=env)
        os.replace(Path(tmp) / "prism", target)
    print(f"built Prism v{version} in {time.monotonic() - started:.0f} s: {target}", file=sys.stderr)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", action="store_true", help="print the binary's path; fetch nothing")
    args = parser.parse_args()
    version = beam_version()
    if args.path:
        print(prism_path(version))
        return 0
    try:
        print(fetch_prism(version))
    except (FileNotFoundError, subprocess.CalledProcessError) as e:
        # The tests name what is missing (tests/_external.require); make goes on to them.
        print(f"engines: Prism v{version} not available: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
