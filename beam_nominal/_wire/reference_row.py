"""Reference codec for Nominal's row-oriented ``WriteRequestNominal``, built on the generated classes.

Slow and obviously correct: the oracle the fast codec in :mod:`write_nominal` is tested against,
and the decoder it falls back to for a ``Series`` laid out in a way its vector paths do not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_nominal._wire._proto.nominal.write import nominal_write_pb2 as nw
from beam_nominal._wire.batch import DecodedRequest, MalformedBatchError, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType

_NS = 10**9
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# Points oneof member -> (value type, name of the value field in its point message).
_MEMBERS = {
    "double_points": (ValueType.DOUBLE, "value"),
    "string_points": (ValueType.STRING, "value"),
    "integer_points": (ValueType.INT64, "value"),
    "uint64_points": (ValueType.UINT64, "value"),
    "struct_points": (ValueType.STRUCT, "json_string"),
}
_MEMBER_OF = {vt: (member, field) for member, (vt, field) in _MEMBERS.items()}


def to_proto(batches: Sequence[SeriesBatch], session_name: str | None = None) -> nw.WriteRequestNominal:
    req = nw.WriteRequestNominal()
    if session_name is not None:
        req.session_name = session_name
    for b in batches:
        series = req.series.add(channel=nw.Channel(name=b.key.channel), tags=dict(b.key.tags))
        vt = b.value_type
        points: Any
        if vt is ValueType.DOUBLE_ARRAY:
            points = series.points.array_points.double_array_points
            rows = [np.asarray(row, dtype=np.float64).tolist() for row in b.values]
        elif vt is ValueType.STRING_ARRAY:
            points = series.points.array_points.string_array_points
            rows = [list(row) for row in b.values]
        else:
            member, field = _MEMBER_OF[vt]
            points = getattr(series.points, member)
            values = b.values.tolist() if isinstance(b.values, np.ndarray) else list(b.values)
        # An empty series still names its points type.
        points.SetInParent()
        for j, ns in enumerate(np.asarray(b.timestamps).tolist()):
            point = points.points.add()
            point.timestamp.seconds, point.timestamp.nanos = divmod(int(ns), _NS)
            if vt.is_array:
                point.value.extend(rows[j])
            else:
                setattr(point, field, values[j])
    return req


def encode(batches: Sequence[SeriesBatch], session_name: str | None = None) -> bytes:
    return to_proto(batches, session_name).SerializeToString(deterministic=True)


def series_batch(index: int, series: nw.Series) -> SeriesBatch:
    """One ``Series`` as a :class:`SeriesBatch`; ``index`` names it in errors."""
    if not series.HasField("channel"):
        raise MalformedBatchError(index, "", "channel not set")
    channel = series.channel.name
    which = series.points.WhichOneof("points_type")
    values: Any
    if which is None:
        raise MalformedBatchError(index, channel, "points type not set")
    if which == "array_points":
        kind = series.points.array_points.WhichOneof("array_type")
        if kind == "double_array_points":
            vt = ValueType.DOUBLE_ARRAY
            points: Any = series.points.array_points.double_array_points.points
            values = [np.array(p.value, dtype=np.float64) for p in points]
        elif kind == "string_array_points":
            vt = ValueType.STRING_ARRAY
            points = series.points.array_points.string_array_points.points
            values = [list(p.value) for p in points]
        else:
            raise MalformedBatchError(index, channel, "array points type not set")
    else:
        vt, field = _MEMBERS[which]
        points = getattr(series.points, which).points
        column = [getattr(p, field) for p in points]
        values = column if vt.numpy_dtype is None else np.array(column, dtype=vt.numpy_dtype)
    ns = []
    for j, p in enumerate(points):
        t = p.timestamp.seconds * _NS + p.timestamp.nanos
        if not _INT64_MIN <= t <= _INT64_MAX:
            raise MalformedBatchError(
                index, channel, f"timestamps[{j}] ({p.timestamp.seconds} s, {p.timestamp.nanos} ns) is outside "
                "the int64 nanosecond range"
            )
        ns.append(t)
    key = SeriesKey(channel, tuple(sorted(series.tags.items())))
    return SeriesBatch(key, vt, np.array(ns, dtype=np.int64), values)


def from_proto(req: nw.WriteRequestNominal, dataset_rid: str) -> DecodedRequest:
    batches = [series_batch(i, s) for i, s in enumerate(req.series)]
    return DecodedRequest(dataset_rid, req.session_name if req.HasField("session_name") else None, batches)


def decode(data: bytes | bytearray | memoryview, dataset_rid: str) -> DecodedRequest:
    return from_proto(nw.WriteRequestNominal.FromString(bytes(data)), dataset_rid)
