"""Exact comparison of read-back values."""

from __future__ import annotations

from typing import Any


def exact(v: Any) -> Any:
    """A comparable form that tells -0.0 from 0.0 and equates NaN with NaN."""
    if isinstance(v, float):
        return v.hex()
    if isinstance(v, list):
        return [exact(x) for x in v]
    if isinstance(v, dict):
        return {k: exact(x) for k, x in v.items()}
    return v
