"""Reference codec for Nominal's columnar HTTP body, on the generated classes: slow, obviously correct.

``nominal.direct_channel_writer.v2.WriteBatchesRequest``: the oracle the fast codec in
:mod:`write_batches_v2` is tested against, and the decoder it falls back to, one ``RecordsBatch``
at a time, for encodings its vector paths do not read. Mirrors :mod:`reference`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from google.protobuf import unknown_fields

from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_channel_writer_common_pb2 as common,
)
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_nominal_channel_writer_pb2 as dcw,
)
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType

_NS = 10**9
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
#: ``Points.log_points``: left out of our copy of the proto, so upb keeps it as an unknown field.
LOG_POINTS_FIELD = 4
LOG_POINTS_REASON = "log points are not stored (numeric, string, struct and array points are)"

# Points oneof member -> value type, for the members that are one repeated field.
_SCALARS = {
    "double_points": ValueType.DOUBLE,
    "string_points": ValueType.STRING,
    "int_points": ValueType.INT64,
    "uint64_points": ValueType.UINT64,
    "struct_points": ValueType.STRUCT,
}
_MEMBER_OF = {vt: member for member, vt in _SCALARS.items()}


def to_proto(dataset_rid: str, batches: Sequence[SeriesBatch]) -> dcw.WriteBatchesRequest:
    req = dcw.WriteBatchesRequest(data_source_rid=dataset_rid)
    for b in batches:
        rb = req.batches.add(channel=b.key.channel, tags=dict(b.key.tags))
        points = rb.points
        for ns in np.asarray(b.timestamps).tolist():
            ts = points.timestamps.add()
            ts.seconds, ts.nanos = divmod(int(ns), _NS)
        vt = b.value_type
        if vt is ValueType.DOUBLE_ARRAY:
            dap = points.array_points.double_array_points
            dap.SetInParent()
            for row in b.values:
                dap.points.add().value.extend(np.asarray(row, dtype=np.float64).tolist())
        elif vt is ValueType.STRING_ARRAY:
            sap = points.array_points.string_array_points
            sap.SetInParent()
            for row in b.values:
                sap.points.add().value.extend(row)
        else:
            member = getattr(points, _MEMBER_OF[vt])
            # An empty series still names its points type.
            member.SetInParent()
            values = b.values.tolist() if isinstance(b.values, np.ndarray) else list(b.values)
            member.points.extend(values)
    return req


def encode(dataset_rid: str, batches: Sequence[SeriesBatch]) -> bytes:
    return to_proto(dataset_rid, batches).SerializeToString(deterministic=True)


def _has_log_points(points: common.Points) -> bool:
    fields = unknown_fields.UnknownFieldSet(points)
    return any(fields[i].field_number == LOG_POINTS_FIELD and fields[i].wire_type == 2 for i in range(len(fields)))


def batch_from_proto(index: int, rb: common.RecordsBatch) -> SeriesBatch:
    """One ``RecordsBatch`` as a :class:`SeriesBatch` (its ``unit`` is dropped); ``index`` names it
    in errors."""
    channel = rb.channel
    points = rb.points
    if _has_log_points(points):
        raise MalformedBatchError(index, channel, LOG_POINTS_REASON)
    which = points.WhichOneof("points")
    values: Any
    if which is None:
        raise MalformedBatchError(index, channel, "points type not set")
    if which == "array_points":
        kind = points.array_points.WhichOneof("array_type")
        if kind == "double_array_points":
            vt = ValueType.DOUBLE_ARRAY
            values = [np.array(p.value, dtype=np.float64) for p in points.array_points.double_array_points.points]
        elif kind == "string_array_points":
            vt = ValueType.STRING_ARRAY
            values = [list(p.value) for p in points.array_points.string_array_points.points]
        else:
            raise MalformedBatchError(index, channel, "array value type not set")
    else:
        vt = _SCALARS[which]
        column = getattr(points, which).points
        values = list(column) if vt.numpy_dtype is None else np.array(column, dtype=vt.numpy_dtype)
    stamps = [(t.seconds, t.nanos) for t in points.timestamps]
    for j, (sec, nanos) in enumerate(stamps):
        if not 0 <= nanos < _NS:
            raise MalformedBatchError(index, channel, f"timestamps[{j}] nanos ({nanos}) is outside [0, 1e9)")
        if not _INT64_MIN <= sec * _NS + nanos <= _INT64_MAX:
            raise MalformedBatchError(
                index, channel, f"timestamps[{j}] ({sec} s, {nanos} ns) is outside the int64 nanosecond range"
            )
    ts = np.array([sec * _NS + nanos for sec, nanos in stamps], dtype=np.int64)
    if len(values) != len(ts):
        raise MalformedBatchError(index, channel, f"{len(ts)} timestamps but {len(values)} values")
    return SeriesBatch(SeriesKey(channel, tuple(sorted(rb.tags.items()))), vt, ts, values)


def from_proto(req: dcw.WriteBatchesRequest) -> DecodedRequest:
    batches = [batch_from_proto(i, rb) for i, rb in enumerate(req.batches)]
    return DecodedRequest(req.data_source_rid, None, batches)


def decode(data: bytes) -> DecodedRequest:
    return from_proto(dcw.WriteBatchesRequest.FromString(bytes(data)))
