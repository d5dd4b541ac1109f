"""Makes ``tests/`` importable for the helpers shared by every tier (``_external``).

Under ``BEAM_NOMINAL_TEST_PURE=1`` (``make pure``) the package runs its Python implementations
even where the compiled module is built (``beam_nominal/_pipeline/__init__.py``); tests marked
``compiled``, which are about the compiled module itself, are deselected there.
"""

from __future__ import annotations

import os

import pytest

PURE = os.environ.get("BEAM_NOMINAL_TEST_PURE") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "compiled: about the compiled module itself (not run on the pure build)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not PURE:
        return
    kept = [item for item in items if item.get_closest_marker("compiled") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("compiled")])
        items[:] = kept
