from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReloadAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RELOAD_ACTION_UNSPECIFIED: _ClassVar[ReloadAction]
    RELOAD_ACTION_UNCHANGED: _ClassVar[ReloadAction]
    RELOAD_ACTION_RELOADED: _ClassVar[ReloadAction]
    RELOAD_ACTION_ADDED: _ClassVar[ReloadAction]
    RELOAD_ACTION_FAILED: _ClassVar[ReloadAction]
RELOAD_ACTION_UNSPECIFIED: ReloadAction
RELOAD_ACTION_UNCHANGED: ReloadAction
RELOAD_ACTION_RELOADED: ReloadAction
RELOAD_ACTION_ADDED: ReloadAction
RELOAD_ACTION_FAILED: ReloadAction

class ReloadRequest(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[str]] = ...) -> None: ...

class ModelReload(_message.Message):
    __slots__ = ("name", "action", "version", "error")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    name: str
    action: ReloadAction
    version: str
    error: str
    def __init__(self, name: _Optional[str] = ..., action: _Optional[_Union[ReloadAction, str]] = ..., version: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelReload]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelReload, _Mapping]]] = ...) -> None: ...
