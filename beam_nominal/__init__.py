"""beam_nominal: land telemetry in Nominal from Apache Beam pipelines and plain Python.

The public surface is what ``__all__`` lists: the entry points and every type a public call gives
back or raises (reports, results, failed elements, written files, stored series, errors), so a user
never imports from a submodule. Everything in a module or package whose name starts with an
underscore is private. Names are imported lazily, so ``import beam_nominal`` for the stream
client does not pay for importing Apache Beam.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AvroFileTarget": "beam_nominal.targets.avro",
    "BackpressureError": "beam_nominal.errors",
    "BatchSettings": "beam_nominal.settings",
    "BeamNominalError": "beam_nominal.errors",
    "DeliveryError": "beam_nominal.errors",
    "DeliveryReport": "beam_nominal.stream",
    "ElementError": "beam_nominal.errors",
    "FailedElement": "beam_nominal.beam",
    "FallbackTarget": "beam_nominal.targets.compose",
    "GrpcTarget": "beam_nominal.targets.grpc",
    "HttpTarget": "beam_nominal.targets.http",
    "InputError": "beam_nominal.errors",
    "InvalidTypeError": "beam_nominal.errors",
    "InvalidValueError": "beam_nominal.errors",
    "LocalServer": "beam_nominal.server",
    "LocalStore": "beam_nominal.server",
    "NominalStream": "beam_nominal.stream",
    "RemoteStore": "beam_nominal.server",
    "RetrySettings": "beam_nominal.settings",
    "SeriesInfo": "beam_nominal.server",
    "SeriesKey": "beam_nominal.model",
    "SeriesTypeError": "beam_nominal.errors",
    "StreamClosedError": "beam_nominal.errors",
    "StreamState": "beam_nominal.stream",
    "TargetError": "beam_nominal.errors",
    "TeeTarget": "beam_nominal.targets.compose",
    "UploadSettings": "beam_nominal.settings",
    "ValueType": "beam_nominal.model",
    "WriteToNominal": "beam_nominal.beam",
    "WriteToNominalResult": "beam_nominal.beam",
    "WrittenFile": "beam_nominal.targets.avro_prefix",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    # `X as X` marks the re-exports for linters (the names are loaded lazily below).
    from beam_nominal.beam import FailedElement as FailedElement
    from beam_nominal.beam import WriteToNominal as WriteToNominal
    from beam_nominal.beam import WriteToNominalResult as WriteToNominalResult
    from beam_nominal.errors import BackpressureError as BackpressureError
    from beam_nominal.errors import BeamNominalError as BeamNominalError
    from beam_nominal.errors import DeliveryError as DeliveryError
    from beam_nominal.errors import ElementError as ElementError
    from beam_nominal.errors import InputError as InputError
    from beam_nominal.errors import InvalidTypeError as InvalidTypeError
    from beam_nominal.errors import InvalidValueError as InvalidValueError
    from beam_nominal.errors import SeriesTypeError as SeriesTypeError
    from beam_nominal.errors import StreamClosedError as StreamClosedError
    from beam_nominal.errors import TargetError as TargetError
    from beam_nominal.model import SeriesKey as SeriesKey
    from beam_nominal.model import ValueType as ValueType
    from beam_nominal.server import LocalServer as LocalServer
    from beam_nominal.server import LocalStore as LocalStore
    from beam_nominal.server import RemoteStore as RemoteStore
    from beam_nominal.server import SeriesInfo as SeriesInfo
    from beam_nominal.settings import BatchSettings as BatchSettings
    from beam_nominal.settings import RetrySettings as RetrySettings
    from beam_nominal.settings import UploadSettings as UploadSettings
    from beam_nominal.stream import DeliveryReport as DeliveryReport
    from beam_nominal.stream import NominalStream as NominalStream
    from beam_nominal.stream import StreamState as StreamState
    from beam_nominal.targets.avro import AvroFileTarget as AvroFileTarget
    from beam_nominal.targets.avro_prefix import WrittenFile as WrittenFile
    from beam_nominal.targets.compose import FallbackTarget as FallbackTarget
    from beam_nominal.targets.compose import TeeTarget as TeeTarget
    from beam_nominal.targets.grpc import GrpcTarget as GrpcTarget
    from beam_nominal.targets.http import HttpTarget as HttpTarget


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_nominal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
