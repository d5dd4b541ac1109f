"""The local ingest server: Nominal's gRPC write API stored as Parquet, plus read-back.

``LocalServer`` serves ``nominal.channel_writer.v1.NominalChannelWriterService`` (WriteColumnBatches,
WriteBatches) and ``beam_nominal.local.v1`` read-back and capabilities services; ``LocalStore``
reads its data directory directly and ``RemoteStore`` reads through a running server. The command
line face is ``beam-nominal serve`` / ``beam-nominal inspect``.
"""

from __future__ import annotations

from beam_nominal.server.app import LocalServer, RemoteStore
from beam_nominal.server.store import InvalidRequestError, LocalStore, SeriesInfo

__all__ = ["InvalidRequestError", "LocalServer", "LocalStore", "RemoteStore", "SeriesInfo"]
