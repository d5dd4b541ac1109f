import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import direct_channel_writer_common_pb2 as _direct_channel_writer_common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WriteColumnBatchesRequest(_message.Message):
    __slots__ = ("data_source_rid", "batches", "source_name")
    DATA_SOURCE_RID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    data_source_rid: str
    batches: _containers.RepeatedCompositeFieldContainer[ColumnBatch]
    source_name: str
    def __init__(self, data_source_rid: _Optional[str] = ..., batches: _Optional[_Iterable[_Union[ColumnBatch, _Mapping]]] = ..., source_name: _Optional[str] = ...) -> None: ...

class WriteColumnBatchesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ColumnBatch(_message.Message):
    __slots__ = ("channel", "tags", "timestamps", "values")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    channel: str
    tags: _containers.ScalarMap[str, str]
    timestamps: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    values: ColumnValues
    def __init__(self, channel: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ..., timestamps: _Optional[_Iterable[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]]] = ..., values: _Optional[_Union[ColumnValues, _Mapping]] = ...) -> None: ...

class ColumnValues(_message.Message):
    __slots__ = ("doubles", "strings", "int64s", "uint64s", "arrays", "structs")
    DOUBLES_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    INT64S_FIELD_NUMBER: _ClassVar[int]
    UINT64S_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    STRUCTS_FIELD_NUMBER: _ClassVar[int]
    doubles: _direct_channel_writer_common_pb2.DoublePoints
    strings: _direct_channel_writer_common_pb2.StringPoints
    int64s: _direct_channel_writer_common_pb2.IntPoints
    uint64s: _direct_channel_writer_common_pb2.Uint64Points
    arrays: _direct_channel_writer_common_pb2.ArrayPoints
    structs: _direct_channel_writer_common_pb2.StructPoints
    def __init__(self, doubles: _Optional[_Union[_direct_channel_writer_common_pb2.DoublePoints, _Mapping]] = ..., strings: _Optional[_Union[_direct_channel_writer_common_pb2.StringPoints, _Mapping]] = ..., int64s: _Optional[_Union[_direct_channel_writer_common_pb2.IntPoints, _Mapping]] = ..., uint64s: _Optional[_Union[_direct_channel_writer_common_pb2.Uint64Points, _Mapping]] = ..., arrays: _Optional[_Union[_direct_channel_writer_common_pb2.ArrayPoints, _Mapping]] = ..., structs: _Optional[_Union[_direct_channel_writer_common_pb2.StructPoints, _Mapping]] = ...) -> None: ...

class WriteBatchesRequest(_message.Message):
    __slots__ = ("data_source_rid", "batches", "source_name")
    DATA_SOURCE_RID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    data_source_rid: str
    batches: _containers.RepeatedCompositeFieldContainer[RowBatch]
    source_name: str
    def __init__(self, data_source_rid: _Optional[str] = ..., batches: _Optional[_Iterable[_Union[RowBatch, _Mapping]]] = ..., source_name: _Optional[str] = ...) -> None: ...

class WriteBatchesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RowBatch(_message.Message):
    __slots__ = ("channel", "tags", "points", "unit")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    channel: str
    tags: _containers.ScalarMap[str, str]
    points: Points
    unit: str
    def __init__(self, channel: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ..., points: _Optional[_Union[Points, _Mapping]] = ..., unit: _Optional[str] = ...) -> None: ...

class Points(_message.Message):
    __slots__ = ("double_points", "string_points", "int64_points", "uint64_points", "array_points", "struct_points")
    DOUBLE_POINTS_FIELD_NUMBER: _ClassVar[int]
    STRING_POINTS_FIELD_NUMBER: _ClassVar[int]
    INT64_POINTS_FIELD_NUMBER: _ClassVar[int]
    UINT64_POINTS_FIELD_NUMBER: _ClassVar[int]
    ARRAY_POINTS_FIELD_NUMBER: _ClassVar[int]
    STRUCT_POINTS_FIELD_NUMBER: _ClassVar[int]
    double_points: DoublePoints
    string_points: StringPoints
    int64_points: Int64Points
    uint64_points: Uint64Points
    array_points: ArrayPoints
    struct_points: StructPoints
    def __init__(self, double_points: _Optional[_Union[DoublePoints, _Mapping]] = ..., string_points: _Optional[_Union[StringPoints, _Mapping]] = ..., int64_points: _Optional[_Union[Int64Points, _Mapping]] = ..., uint64_points: _Optional[_Union[Uint64Points, _Mapping]] = ..., array_points: _Optional[_Union[ArrayPoints, _Mapping]] = ..., struct_points: _Optional[_Union[StructPoints, _Mapping]] = ...) -> None: ...

class DoublePoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[DoublePoint]
    def __init__(self, points: _Optional[_Iterable[_Union[DoublePoint, _Mapping]]] = ...) -> None: ...

class DoublePoint(_message.Message):
    __slots__ = ("timestamp", "value")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    value: float
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., value: _Optional[float] = ...) -> None: ...

class StringPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[StringPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[StringPoint, _Mapping]]] = ...) -> None: ...

class StringPoint(_message.Message):
    __slots__ = ("timestamp", "value")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    value: str
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., value: _Optional[str] = ...) -> None: ...

class Int64Points(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[Int64Point]
    def __init__(self, points: _Optional[_Iterable[_Union[Int64Point, _Mapping]]] = ...) -> None: ...

class Int64Point(_message.Message):
    __slots__ = ("timestamp", "value")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    value: int
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., value: _Optional[int] = ...) -> None: ...

class Uint64Points(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[Uint64Point]
    def __init__(self, points: _Optional[_Iterable[_Union[Uint64Point, _Mapping]]] = ...) -> None: ...

class Uint64Point(_message.Message):
    __slots__ = ("timestamp", "value")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    value: int
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., value: _Optional[int] = ...) -> None: ...

class ArrayPoints(_message.Message):
    __slots__ = ("double_array_points", "string_array_points")
    DOUBLE_ARRAY_POINTS_FIELD_NUMBER: _ClassVar[int]
    STRING_ARRAY_POINTS_FIELD_NUMBER: _ClassVar[int]
    double_array_points: DoubleArrayPoints
    string_array_points: StringArrayPoints
    def __init__(self, double_array_points: _Optional[_Union[DoubleArrayPoints, _Mapping]] = ..., string_array_points: _Optional[_Union[StringArrayPoints, _Mapping]] = ...) -> None: ...

class DoubleArrayPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[DoubleArrayPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[DoubleArrayPoint, _Mapping]]] = ...) -> None: ...

class DoubleArrayPoint(_message.Message):
    __slots__ = ("timestamp", "values")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class StringArrayPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[StringArrayPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[StringArrayPoint, _Mapping]]] = ...) -> None: ...

class StringArrayPoint(_message.Message):
    __slots__ = ("timestamp", "values")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., values: _Optional[_Iterable[str]] = ...) -> None: ...

class StructPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[StructPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[StructPoint, _Mapping]]] = ...) -> None: ...

class StructPoint(_message.Message):
    __slots__ = ("timestamp", "json")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    json: str
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., json: _Optional[str] = ...) -> None: ...
