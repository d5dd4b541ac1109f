"""beam_nominal: land telemetry in Nominal from Apache Beam pipelines and plain Python.

The public surface is what ``__all__`` lists; everything in a module or package whose name starts
with an underscore is private. Names are imported lazily, so ``import beam_nominal`` for the stream
client does not pay for importing Apache Beam.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AvroFileTarget": "beam_nominal.targets.avro",
    "FailedElement": "beam_nominal.beam",
    "FallbackTarget": "beam_nominal.targets.compose",
    "LocalServer": "beam_nominal.server",
    "LocalStore": "beam_nominal.server",
    "SeriesKey": "beam_nominal.model",
    "TeeTarget": "beam_nominal.targets.compose",
    "ValueType": "beam_nominal.model",
    "WriteToNominal": "beam_nominal.beam",
    "WriteToNominalResult": "beam_nominal.beam",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from beam_nominal.beam import FailedElement, WriteToNominal, WriteToNominalResult
    from beam_nominal.model import SeriesKey, ValueType
    from beam_nominal.server import LocalServer, LocalStore
    from beam_nominal.targets.avro import AvroFileTarget
    from beam_nominal.targets.compose import FallbackTarget, TeeTarget


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_nominal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
