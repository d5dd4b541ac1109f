from beam_nominal._wire._proto.nominal.channel_writer.v1 import nominal_channel_writer_pb2 as _nominal_channel_writer_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListSeriesRequest(_message.Message):
    __slots__ = ("dataset_rid",)
    DATASET_RID_FIELD_NUMBER: _ClassVar[int]
    dataset_rid: str
    def __init__(self, dataset_rid: _Optional[str] = ...) -> None: ...

class SeriesInfo(_message.Message):
    __slots__ = ("dataset_rid", "channel", "tags", "value_type", "count", "min_timestamp_ns", "max_timestamp_ns")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DATASET_RID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    VALUE_TYPE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MIN_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    dataset_rid: str
    channel: str
    tags: _containers.ScalarMap[str, str]
    value_type: str
    count: int
    min_timestamp_ns: int
    max_timestamp_ns: int
    def __init__(self, dataset_rid: _Optional[str] = ..., channel: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ..., value_type: _Optional[str] = ..., count: _Optional[int] = ..., min_timestamp_ns: _Optional[int] = ..., max_timestamp_ns: _Optional[int] = ...) -> None: ...

class ListSeriesResponse(_message.Message):
    __slots__ = ("series",)
    SERIES_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[SeriesInfo]
    def __init__(self, series: _Optional[_Iterable[_Union[SeriesInfo, _Mapping]]] = ...) -> None: ...

class ReadSeriesRequest(_message.Message):
    __slots__ = ("dataset_rid", "channel", "tags")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DATASET_RID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    dataset_rid: str
    channel: str
    tags: _containers.ScalarMap[str, str]
    def __init__(self, dataset_rid: _Optional[str] = ..., channel: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ReadSeriesResponse(_message.Message):
    __slots__ = ("info", "timestamps_ns", "values")
    INFO_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_NS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    info: SeriesInfo
    timestamps_ns: _containers.RepeatedScalarFieldContainer[int]
    values: _nominal_channel_writer_pb2.ColumnValues
    def __init__(self, info: _Optional[_Union[SeriesInfo, _Mapping]] = ..., timestamps_ns: _Optional[_Iterable[int]] = ..., values: _Optional[_Union[_nominal_channel_writer_pb2.ColumnValues, _Mapping]] = ...) -> None: ...

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("server", "version", "services", "value_types", "idempotency_metadata_key", "max_request_bytes", "durable_acknowledgements")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    VALUE_TYPES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_METADATA_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    DURABLE_ACKNOWLEDGEMENTS_FIELD_NUMBER: _ClassVar[int]
    server: str
    version: str
    services: _containers.RepeatedScalarFieldContainer[str]
    value_types: _containers.RepeatedScalarFieldContainer[str]
    idempotency_metadata_key: str
    max_request_bytes: int
    durable_acknowledgements: bool
    def __init__(self, server: _Optional[str] = ..., version: _Optional[str] = ..., services: _Optional[_Iterable[str]] = ..., value_types: _Optional[_Iterable[str]] = ..., idempotency_metadata_key: _Optional[str] = ..., max_request_bytes: _Optional[int] = ..., durable_acknowledgements: _Optional[bool] = ...) -> None: ...
