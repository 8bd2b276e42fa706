from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
TICKET_TYPE_AGENT_CONFIG: TicketType
TICKET_TYPE_JSAPI: TicketType
TICKET_TYPE_UNSPECIFIED: TicketType
TICKET_TYPE_WX_CARD: TicketType

class GetAccessTokenRequest(_message.Message):
    __slots__ = ["app"]
    APP_FIELD_NUMBER: _ClassVar[int]
    app: str
    def __init__(self, app: _Optional[str] = ...) -> None: ...

class GetAccessTokenResponse(_message.Message):
    __slots__ = ["access_token", "expire_time"]
    ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    access_token: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, access_token: _Optional[str] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetTicketRequest(_message.Message):
    __slots__ = ["app", "type"]
    APP_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    app: str
    type: TicketType
    def __init__(self, app: _Optional[str] = ..., type: _Optional[_Union[TicketType, str]] = ...) -> None: ...

class GetTicketResponse(_message.Message):
    __slots__ = ["expire_time", "ticket"]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    expire_time: _timestamp_pb2.Timestamp
    ticket: str
    def __init__(self, ticket: _Optional[str] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RefreshAccessTokenRequest(_message.Message):
    __slots__ = ["app", "invalid_token"]
    APP_FIELD_NUMBER: _ClassVar[int]
    INVALID_TOKEN_FIELD_NUMBER: _ClassVar[int]
    app: str
    invalid_token: str
    def __init__(self, app: _Optional[str] = ..., invalid_token: _Optional[str] = ...) -> None: ...

class RefreshAccessTokenResponse(_message.Message):
    __slots__ = ["access_token", "expire_time"]
    ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    access_token: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, access_token: _Optional[str] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WatchAccessTokenRequest(_message.Message):
    __slots__ = ["app"]
    APP_FIELD_NUMBER: _ClassVar[int]
    app: str
    def __init__(self, app: _Optional[str] = ...) -> None: ...

class WatchAccessTokenResponse(_message.Message):
    __slots__ = ["access_token", "expire_time"]
    ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    access_token: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, access_token: _Optional[str] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TicketType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
