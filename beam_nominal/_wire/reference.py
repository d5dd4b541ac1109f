"""Reference codec built on the generated protobuf classes: slow, obviously correct.

The fast numpy codec in :mod:`encode` / :mod:`decode` must agree with this one; tests compare
them, and the decoder falls back to it for encodings the fast path does not recognise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as cw
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType


def to_proto(
    dataset_rid: str, batches: Sequence[SeriesBatch], source_name: str | None = None
) -> cw.WriteColumnBatchesRequest:
    req = cw.WriteColumnBatchesRequest(data_source_rid=dataset_rid)
    if source_name is not None:
        req.source_name = source_name
    for b in batches:
        cb = req.batches.add(channel=b.key.channel, tags=dict(b.key.tags))
        for ns in b.timestamps.tolist():
            ts = cb.timestamps.add()
            ts.seconds, ts.nanos = divmod(int(ns), 10**9)
        vt = b.value_type
        if vt is ValueType.DOUBLE:
            cb.values.doubles.points.extend(b.values.tolist())
        elif vt is ValueType.INT64:
            cb.values.int64s.points.extend(b.values.tolist())
        elif vt is ValueType.UINT64:
            cb.values.uint64s.points.extend(b.values.tolist())
        elif vt is ValueType.STRING:
            cb.values.strings.points.extend(b.values)
        elif vt is ValueType.STRUCT:
            cb.values.structs.points.extend(b.values)
        elif vt is ValueType.DOUBLE_ARRAY:
            dap = cb.values.arrays.double_array_points
            dap.SetInParent()
            for row in b.values:
                dap.points.add().value.extend(np.asarray(row, dtype=np.float64).tolist())
        elif vt is ValueType.STRING_ARRAY:
            sap = cb.values.arrays.string_array_points
            sap.SetInParent()
            for row in b.values:
                sap.points.add().value.extend(row)
        else:  # pragma: no cover - exhaustive
            raise AssertionError(vt)
    return req


def encode(dataset_rid: str, batches: Sequence[SeriesBatch], source_name: str | None = None) -> bytes:
    return to_proto(dataset_rid, batches, source_name).SerializeToString(deterministic=True)


def from_proto(req: cw.WriteColumnBatchesRequest) -> DecodedRequest:
    out: list[SeriesBatch] = []
    for i, cb in enumerate(req.batches):
        ts = np.array([t.seconds * 10**9 + t.nanos for t in cb.timestamps], dtype=np.int64)
        which = cb.values.WhichOneof("values")
        values: Any
        if which == "doubles":
            vt, values = ValueType.DOUBLE, np.array(cb.values.doubles.points, dtype=np.float64)
        elif which == "int64s":
            vt, values = ValueType.INT64, np.array(cb.values.int64s.points, dtype=np.int64)
        elif which == "uint64s":
            vt, values = ValueType.UINT64, np.array(cb.values.uint64s.points, dtype=np.uint64)
        elif which == "strings":
            vt, values = ValueType.STRING, list(cb.values.strings.points)
        elif which == "structs":
            vt, values = ValueType.STRUCT, list(cb.values.structs.points)
        elif which == "arrays":
            kind = cb.values.arrays.WhichOneof("array_type")
            if kind == "double_array_points":
                vt = ValueType.DOUBLE_ARRAY
                rows = cb.values.arrays.double_array_points.points
                values = [np.array(p.value, dtype=np.float64) for p in rows]
            elif kind == "string_array_points":
                vt = ValueType.STRING_ARRAY
                values = [list(p.value) for p in cb.values.arrays.string_array_points.points]
            else:
                raise MalformedBatchError(i, cb.channel, "array value type not set")
        else:
            raise MalformedBatchError(i, cb.channel, "value type not set")
        if len(values) != len(ts):
            raise MalformedBatchError(
                i, cb.channel, f"{len(ts)} timestamps but {len(values)} values"
            )
        out.append(SeriesBatch(SeriesKey(cb.channel, tuple(sorted(cb.tags.items()))), vt, ts, values))
    return DecodedRequest(req.data_source_rid, req.source_name if req.HasField("source_name") else None, out)


def decode(data: bytes) -> DecodedRequest:
    req = cw.WriteColumnBatchesRequest()
    req.ParseFromString(data)
    return from_proto(req)
