"""Tests that need a tool from outside the Python venvs (Java, a Flink or Spark distribution, nginx).

Such a test calls :func:`require` with what it found. Where the tool is missing it is skipped with
the reason, so a developer's machine without it still runs the rest; with ``BEAM_NOMINAL_NO_SKIP=1``
(which ``.ci/run`` sets) the same absence fails the test, so CI always runs every tier.
"""

from __future__ import annotations

import os

import pytest

NO_SKIP = os.environ.get("BEAM_NOMINAL_NO_SKIP") == "1"


def require(available: bool, reason: str) -> None:
    """Skip (or, under ``BEAM_NOMINAL_NO_SKIP=1``, fail) the calling test unless ``available``."""
    if available:
        return
    if NO_SKIP:
        pytest.fail(f"{reason} (BEAM_NOMINAL_NO_SKIP=1: a missing tool fails instead of skipping)")
    pytest.skip(reason)
