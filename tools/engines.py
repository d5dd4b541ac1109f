"""Fetch and cache what the engine tier (tests/engines) runs on, outside the working tree.

Prism, the portable runner Beam's ``DirectRunner`` runs first, is built with ``go install`` of
``github.com/apache/beam/sdks/v2/go/cmd/prism`` at the version of the venv's Beam SDK (a user's
DirectRunner downloads the same binary from Beam's releases). It lands in
``$BEAM_NOMINAL_ENGINES/prism-<version>/prism`` (default ``~/.cache/beam-nominal/engines``), once per
version. Without Go the tool says so and exits 0: the tier then skips with that reason, or fails
under ``BEAM_NOMINAL_NO_SKIP=1``.

The Java example (``examples/java``, a Java pipeline writing through WriteToNominal by
cross-language expansion) is built with Maven: its dependencies come from Maven Central into
``~/.m2`` once, its classes land in ``examples/java/target`` with the runtime classpath in
``target/classpath.txt``. Without Java or Maven the tool says so and exits 0, as for Prism.

    python tools/engines.py            # fetch (if not cached) and build; print the paths
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
JAVA_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "java"


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


def build_java_example(timeout: float = 1200.0) -> Path:
    """Compile ``examples/java`` with Maven (incrementally); returns the file of its runtime classpath.

    The classpath file lists the dependencies' jars then ``target/classes``, ``:``-separated.
    """
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if mvn is None or java is None:
        raise FileNotFoundError(
            f"{'`mvn`' if mvn is None else '`java`'} is not on PATH: the Java example cannot be built "
            "(install Java 17 and Maven)"
        )
    classpath = JAVA_EXAMPLE / "target" / "classpath.txt"
    started = time.monotonic()
    subprocess.run(
        [mvn, "-B", "-q", "compile", "dependency:build-classpath", f"-Dmdep.outputFile={classpath}"],
        check=True,
        cwd=JAVA_EXAMPLE,
        timeout=timeout,
    )
    classes = JAVA_EXAMPLE / "target" / "classes"
    classpath.write_text(f"{classpath.read_text().strip()}{os.pathsep}{classes}")
    print(f"built the Java example in {time.monotonic() - started:.0f} s: {classes}", file=sys.stderr)
    return classpath


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
    try:
        print(build_java_example())
    except (FileNotFoundError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"engines: the Java example is not built: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
