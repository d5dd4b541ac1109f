from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DoublePoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, points: _Optional[_Iterable[float]] = ...) -> None: ...

class StringPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, points: _Optional[_Iterable[str]] = ...) -> None: ...

class IntPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, points: _Optional[_Iterable[int]] = ...) -> None: ...

class Uint64Points(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, points: _Optional[_Iterable[int]] = ...) -> None: ...

class StructPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, points: _Optional[_Iterable[str]] = ...) -> None: ...

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
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, value: _Optional[_Iterable[float]] = ...) -> None: ...

class StringArrayPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[StringArrayPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[StringArrayPoint, _Mapping]]] = ...) -> None: ...

class StringArrayPoint(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, value: _Optional[_Iterable[str]] = ...) -> None: ...
