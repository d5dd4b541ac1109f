"""Nominal's columnar HTTP write body, ``nominal.direct_channel_writer.v2.WriteBatchesRequest``.

Posted by newer Nominal clients to ``POST {base}/storage/writer/v1/nominal-columnar``::

    WriteBatchesRequest { repeated RecordsBatch batches = 1; string data_source_rid = 2; }
    RecordsBatch { string channel = 1; map<string, string> tags = 2; Points points = 3; optional string unit = 4; }
    Points { repeated nominal.types.time.Timestamp timestamps = 1;
             oneof points { DoublePoints double_points = 2; StringPoints string_points = 3; LogPoints log_points = 4;
                            IntPoints int_points = 5; ArrayPoints array_points = 6; StructPoints struct_points = 7;
                            Uint64Points uint64_points = 8; } }
    Timestamp { optional int64 seconds = 1; optional int64 nanos = 2; }

The same columns as the gRPC ``ColumnBatch``, so the gRPC codec (:mod:`encode`, :mod:`decode`)
serves it through a :class:`ColumnLayout`: the timestamps and the value member sit in the
``Points`` message, with other field numbers; the value messages are the same. Bytes are the
gRPC form's layout (fixed-width timestamps, packed columns, deterministic), so a batch costs the
same bytes plus the ``Points`` header. The decoder reads any
valid encoding, as :func:`decode.decode_request` does; in addition it refuses log points
(``MalformedBatchError``: we do not store logs) and nanos outside [0, 1e9), which the int64
nanos field can carry. ``unit`` is read (checked as UTF-8) and dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from beam_nominal._wire import reference_columnar
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import (
    direct_channel_writer_common_pb2 as common,
)
from beam_nominal._wire.batch import DecodedRequest, SeriesBatch
from beam_nominal._wire.decode import ColumnReader, decode_columns
from beam_nominal._wire.encode import ColumnLayout, encode_columns
from beam_nominal.model import ValueType

__all__ = [
    "WRITE_BATCHES_V2",
    "decode_write_batches_v2",
    "encode_write_batches_v2",
]

#: The layout of ``direct_channel_writer.v2.WriteBatchesRequest``.
WRITE_BATCHES_V2 = ColumnLayout(
    name="direct_channel_writer.v2.WriteBatchesRequest",
    rid_field=2,
    batches_field=1,
    source_field=None,
    points_field=3,
    timestamps_field=1,
    values_field=None,
    members={
        ValueType.DOUBLE: 2,
        ValueType.STRING: 3,
        ValueType.INT64: 5,
        ValueType.DOUBLE_ARRAY: 6,
        ValueType.STRING_ARRAY: 6,
        ValueType.STRUCT: 7,
        ValueType.UINT64: 8,
    },
    refused={reference_columnar.LOG_POINTS_FIELD: reference_columnar.LOG_POINTS_REASON},
    dropped_strings=(4,),  # unit
    nanos_int64=True,
    nanos_checked=True,
    unset_reason="points type not set",
)


def _upb_batch(buf: bytes, start: int, stop: int, index: int) -> SeriesBatch:
    """Decode one RecordsBatch with upb and the reference converter."""
    return reference_columnar.batch_from_proto(index, common.RecordsBatch.FromString(buf[start:stop]))


_READER = ColumnReader(WRITE_BATCHES_V2, common.RecordsBatch.FromString, _upb_batch)


def encode_write_batches_v2(dataset_rid: str, batches: Sequence[SeriesBatch]) -> bytes:
    """Serialise a columnar ``WriteBatchesRequest`` carrying ``batches`` for ``dataset_rid``.

    One ``RecordsBatch`` per batch, in order, without ``unit``; the rid is written first
    (omitted when empty). Deterministic. Errors as :func:`encode.encode_request`'s (ValueError,
    TypeError naming the batch index and series).
    """
    return encode_columns(WRITE_BATCHES_V2, dataset_rid, batches)


def decode_write_batches_v2(data: bytes | bytearray | memoryview) -> DecodedRequest:
    """Parse columnar ``WriteBatchesRequest`` bytes into columns (``source_name`` is None).

    Raises:
        MalformedBatchError: the first batch without a points type, with log points, with a
            nanos outside [0, 1e9) or a timestamp outside int64 nanoseconds, or whose value
            count differs from its timestamp count.
        google.protobuf.message.DecodeError: bytes that are not a valid request; broken bytes
            anywhere take precedence over a malformed batch.
    """
    return decode_columns(data, _READER)
