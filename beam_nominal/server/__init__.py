"""The local ingest server: Nominal's gRPC and HTTP write APIs stored as Parquet, plus read-back.

``LocalServer`` serves ``nominal.channel_writer.v1.NominalChannelWriterService`` (WriteColumnBatches,
WriteBatches) and ``beam_nominal.local.v1`` read-back and capabilities services, and with
``http_port`` Nominal's HTTP write API (:mod:`beam_nominal.server.http`); ``LocalStore``
reads its data directory directly and ``RemoteStore`` reads through a running server. The command
line face is ``beam-nominal serve`` / ``beam-nominal inspect``.
"""

from __future__ import annotations

from beam_nominal.server.app import LocalServer, RemoteStore
from beam_nominal.server.store import InvalidRequestError, LocalStore, SeriesInfo

__all__ = ["InvalidRequestError", "LocalServer", "LocalStore", "RemoteStore", "SeriesInfo"]
