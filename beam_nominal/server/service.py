"""gRPC handlers of the local server: Nominal's write API, read-back, capabilities, token check.

``WriteColumnBatches`` is registered without a request deserializer: the handler gets the raw
request bytes and hands them to the vectorised :func:`decode_request`, skipping the per-point
objects the generated classes would build.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

import beam_nominal
from beam_nominal._wire import decode as _decode
from beam_nominal._wire import metadata as _md
from beam_nominal._wire._proto.beam_nominal.local.v1 import local_pb2, local_pb2_grpc
from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError
from beam_nominal.model import ValueType
from beam_nominal.server._ledger import IdempotencyKeyReusedError
from beam_nominal.server.store import InvalidRequestError, LocalStore, SeriesInfo, StoppingError, _Committer

__all__ = [
    "CAPABILITIES_SERVICE",
    "READ_SERVICE",
    "SERVER_NAME",
    "BearerToken",
    "TokenInterceptor",
    "WriteRefusal",
    "WriterService",
    "classify_write_error",
    "column_values",
    "table_from_read_response",
]

_log = logging.getLogger(__name__)

SERVER_NAME = "beam_nominal.local"
READ_SERVICE = "beam_nominal.local.v1.LocalReadService"
CAPABILITIES_SERVICE = "beam_nominal.local.v1.CapabilitiesService"


# ---------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------


def _deny(_request: Any, context: grpc.ServicerContext) -> None:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong 'authorization: Bearer <token>' metadata")


_DENY_HANDLER = grpc.unary_unary_rpc_method_handler(_deny)


# grpc's classes are generic only in the type stubs.
if TYPE_CHECKING:
    _InterceptorBase = grpc.ServerInterceptor[Any, Any]
else:
    _InterceptorBase = grpc.ServerInterceptor


class BearerToken:
    """The server's token check, for both listeners: the whole ``Bearer <token>`` value, compared
    in constant time."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def accepts(self, authorization: bytes) -> bool:
        return hmac.compare_digest(authorization, self._expected)


class TokenInterceptor(_InterceptorBase):
    """Rejects every call, on every service, that lacks ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._token = BearerToken(token)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        given = b""
        for k, v in handler_call_details.invocation_metadata or ():
            if k == _md.AUTHORIZATION:
                given = v.encode() if isinstance(v, str) else bytes(v)
                break
        if self._token.accepts(given):
            return continuation(handler_call_details)
        return _DENY_HANDLER


# ---------------------------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------------------------


def _idempotency_key(context: grpc.ServicerContext) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k == _md.IDEMPOTENCY_KEY:
            return v if isinstance(v, str) else bytes(v).decode("utf-8", "replace")
    return None


class WriterService:
    """``nominal.channel_writer.v1.NominalChannelWriterService`` over a :class:`_Committer`."""

    def __init__(self, committer: _Committer) -> None:
        self._committer = committer

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        return grpc.method_handlers_generic_handler(
            _md.WRITER_SERVICE,
            {
                "WriteColumnBatches": grpc.unary_unary_rpc_method_handler(self.write_column_batches),
                "WriteBatches": grpc.unary_unary_rpc_method_handler(self.write_batches),
            },
        )

    def write_column_batches(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self._write(request, context, _decode.decode_request, "WriteColumnBatchesRequest")

    def write_batches(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self._write(request, context, _decode.decode_write_batches, "WriteBatchesRequest")

    def _write(
        self,
        request: bytes,
        context: grpc.ServicerContext,
        decode: Callable[[bytes], DecodedRequest],
        what: str,
    ) -> bytes:
        try:
            decoded = decode(request)
        except Exception as exc:
            _abort_or_raise(context, exc, what)
        try:
            stored = self._committer.commit(
                decoded.dataset_rid, decoded.batches, _idempotency_key(context), decoded.source_name
            )
        except Exception as exc:
            _abort_or_raise(context, exc, None, decoded.dataset_rid)
        if not stored:
            context.set_trailing_metadata(((_md.ALREADY_STORED, "1"),))
        # An empty WriteColumnBatchesResponse / WriteBatchesResponse serialises to no bytes.
        return b""


def _abort_or_raise(
    context: grpc.ServicerContext, exc: Exception, what: str | None, rid: str | None = None
) -> NoReturn:
    refusal = classify_write_error(exc, what, rid)
    if refusal is None:
        raise exc
    if refusal.rejected:
        names = json.dumps(_md.rejected_json(refusal.rejected)).encode()
        context.set_trailing_metadata(((_md.REJECTED_BATCHES, names),))
    context.abort(refusal.grpc_code, refusal.detail)


@dataclasses.dataclass(frozen=True)
class WriteRefusal:
    """How a write that raised is answered; one decision for the gRPC and the HTTP handlers.

    ``error`` is a short stable name (the HTTP JSON body's ``error``), ``detail`` the message.
    ``retryable``: nothing was stored and the same request may succeed later (gRPC UNAVAILABLE,
    HTTP 503 with ``Retry-After``); otherwise the request itself is at fault (INVALID_ARGUMENT, 400).
    """

    error: str
    detail: str
    retryable: bool
    #: Batches refused for good, by index (``_md.REJECTED_BATCHES``); empty when unknown.
    rejected: dict[int, str] = dataclasses.field(default_factory=dict)
    #: Overrides of the code and status ``retryable`` implies.
    code: grpc.StatusCode | None = None
    status: int | None = None

    @property
    def grpc_code(self) -> grpc.StatusCode:
        if self.code is not None:
            return self.code
        return grpc.StatusCode.UNAVAILABLE if self.retryable else grpc.StatusCode.INVALID_ARGUMENT

    @property
    def http_status(self) -> int:
        if self.status is not None:
            return self.status
        return 503 if self.retryable else 400


def classify_write_error(exc: Exception, what: str | None, rid: str | None = None) -> WriteRefusal | None:
    """The answer to a write whose decoding (``what``: the message name) or commit (``what`` None) raised.

    None for anything else: a server fault, left to propagate. A storage error is logged here
    (with ``rid``), so each handler need not.
    """
    if isinstance(exc, IdempotencyKeyReusedError):
        # The answers the IETF Idempotency-Key draft and gRPC's status meanings give a key bound
        # to another request: permanent for every client (none retries 422 or ALREADY_EXISTS).
        return WriteRefusal(
            "idempotency_key_reused", str(exc), retryable=False, code=grpc.StatusCode.ALREADY_EXISTS, status=422
        )
    if isinstance(exc, MalformedBatchError):
        return WriteRefusal("invalid_request", str(exc), retryable=False, rejected=exc.rejected)
    if isinstance(exc, InvalidRequestError):
        return WriteRefusal("invalid_request", str(exc), retryable=False)
    if what is not None and isinstance(exc, DecodeError | ValueError | OverflowError):
        return WriteRefusal("malformed_request", f"not a valid {what}: {exc}", retryable=False)
    if what is None and isinstance(exc, StoppingError):
        return WriteRefusal("unavailable", str(exc), retryable=True)
    if what is None and isinstance(exc, OSError):
        _log.error("commit of dataset %r failed", rid, exc_info=exc)
        return WriteRefusal("storage_error", f"storage error, nothing stored: {exc}", retryable=True)
    return None


# ---------------------------------------------------------------------------------------------
# Read-back and capabilities
# ---------------------------------------------------------------------------------------------


def _info_message(info: SeriesInfo) -> local_pb2.SeriesInfo:
    return local_pb2.SeriesInfo(
        dataset_rid=info.dataset_rid,
        channel=info.channel,
        tags=info.tags,
        value_type=info.value_type.value,
        count=info.count,
        min_timestamp_ns=info.min_timestamp_ns,
        max_timestamp_ns=info.max_timestamp_ns,
    )


def info_from_message(msg: local_pb2.SeriesInfo) -> SeriesInfo:
    """The :class:`SeriesInfo` carried by a ``beam_nominal.local.v1.SeriesInfo`` message."""
    return SeriesInfo(
        msg.dataset_rid,
        msg.channel,
        dict(msg.tags),
        ValueType(msg.value_type),
        msg.count,
        msg.min_timestamp_ns,
        msg.max_timestamp_ns,
    )


def column_values(vt: ValueType, column: pa.Array | pa.ChunkedArray) -> cw.ColumnValues:
    """A stored ``value`` column as the ``ColumnValues`` message it was written from."""
    out = cw.ColumnValues()
    if vt is ValueType.DOUBLE:
        out.doubles.points.extend(column.to_numpy().tolist())
    elif vt is ValueType.INT64:
        out.int64s.points.extend(column.to_numpy().tolist())
    elif vt is ValueType.UINT64:
        out.uint64s.points.extend(column.to_numpy().tolist())
    elif vt is ValueType.STRING:
        out.strings.points.extend(column.to_pylist())
    elif vt is ValueType.STRUCT:
        out.structs.points.extend(column.to_pylist())
    elif vt is ValueType.DOUBLE_ARRAY:
        dap = out.arrays.double_array_points
        dap.SetInParent()
        for row in column.to_pylist():
            dap.points.add().value.extend(row)
    else:
        sap = out.arrays.string_array_points
        sap.SetInParent()
        for row in column.to_pylist():
            sap.points.add().value.extend(row)
    return out


def table_from_read_response(resp: local_pb2.ReadSeriesResponse) -> pa.Table:
    """The ``timestamp``/``value`` table :meth:`LocalStore.read` would give for the same series."""
    vt = ValueType(resp.info.value_type)
    ts = pa.array(np.array(resp.timestamps_ns, dtype=np.int64), type=pa.int64())
    v = resp.values
    value: pa.Array
    if vt is ValueType.DOUBLE:
        value = pa.array(np.array(v.doubles.points, dtype=np.float64))
    elif vt is ValueType.INT64:
        value = pa.array(np.array(v.int64s.points, dtype=np.int64))
    elif vt is ValueType.UINT64:
        value = pa.array(np.array(v.uint64s.points, dtype=np.uint64))
    elif vt is ValueType.STRING:
        value = pa.array(list(v.strings.points), type=pa.string())
    elif vt is ValueType.STRUCT:
        value = pa.array(list(v.structs.points), type=pa.string())
    elif vt is ValueType.DOUBLE_ARRAY:
        value = pa.array([list(p.value) for p in v.arrays.double_array_points.points], type=pa.list_(pa.float64()))
    else:
        value = pa.array([list(p.value) for p in v.arrays.string_array_points.points], type=pa.list_(pa.string()))
    return pa.table({"timestamp": ts, "value": value})


class ReadService(local_pb2_grpc.LocalReadServiceServicer):  # type: ignore[misc]
    """``beam_nominal.local.v1.LocalReadService`` over a :class:`LocalStore`."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    def ListSeries(
        self, request: local_pb2.ListSeriesRequest, context: grpc.ServicerContext
    ) -> local_pb2.ListSeriesResponse:
        try:
            rids = [request.dataset_rid] if request.dataset_rid else self._store.list_datasets()
            infos = [i for rid in rids for i in self._store.list_series(rid)]
        except InvalidRequestError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return local_pb2.ListSeriesResponse(series=[_info_message(i) for i in infos])

    def ReadSeries(
        self, request: local_pb2.ReadSeriesRequest, context: grpc.ServicerContext
    ) -> local_pb2.ReadSeriesResponse:
        tags = dict(request.tags)
        try:
            info = self._store.series_info(request.dataset_rid, request.channel, tags)
            table = self._store.read(request.dataset_rid, request.channel, tags)
        except InvalidRequestError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc.args[0]))
        # The info is taken before the read; a commit landing in between would make them disagree.
        info = SeriesInfo(
            info.dataset_rid,
            info.channel,
            info.tags,
            info.value_type,
            table.num_rows,
            *_bounds(table, info),
        )
        return local_pb2.ReadSeriesResponse(
            info=_info_message(info),
            timestamps_ns=table.column("timestamp").to_numpy().tolist(),
            values=column_values(info.value_type, table.column("value")),
        )


def _bounds(table: pa.Table, info: SeriesInfo) -> tuple[int, int]:
    if table.num_rows == 0:
        return info.min_timestamp_ns, info.max_timestamp_ns
    ts = table.column("timestamp").to_numpy()
    return int(ts.min()), int(ts.max())


class CapabilitiesService(local_pb2_grpc.CapabilitiesServiceServicer):  # type: ignore[misc]
    """``beam_nominal.local.v1.CapabilitiesService``: what this server supports."""

    def GetCapabilities(
        self, request: local_pb2.GetCapabilitiesRequest, context: grpc.ServicerContext
    ) -> local_pb2.Capabilities:
        return local_pb2.Capabilities(
            server=SERVER_NAME,
            version=beam_nominal.__version__,
            services=[_md.WRITER_SERVICE, READ_SERVICE, CAPABILITIES_SERVICE],
            value_types=[vt.value for vt in ValueType],
            idempotency_metadata_key=_md.IDEMPOTENCY_KEY,
            max_request_bytes=_md.MAX_MESSAGE_BYTES,
            durable_acknowledgements=True,
        )
