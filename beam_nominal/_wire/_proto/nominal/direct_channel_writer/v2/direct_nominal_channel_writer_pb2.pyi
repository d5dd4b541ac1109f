from beam_nominal._wire._proto.nominal.direct_channel_writer.v2 import direct_channel_writer_common_pb2 as _direct_channel_writer_common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WriteBatchesRequest(_message.Message):
    __slots__ = ("batches", "data_source_rid")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    DATA_SOURCE_RID_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[_direct_channel_writer_common_pb2.RecordsBatch]
    data_source_rid: str
    def __init__(self, batches: _Optional[_Iterable[_Union[_direct_channel_writer_common_pb2.RecordsBatch, _Mapping]]] = ..., data_source_rid: _Optional[str] = ...) -> None: ...

class WriteBatchesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
