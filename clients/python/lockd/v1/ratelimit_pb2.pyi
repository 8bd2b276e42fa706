from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TakeRequest(_message.Message):
    __slots__ = ["burst", "cost", "key", "limit", "period", "request_id", "wait_timeout"]
    BURST_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    burst: int
    cost: int
    key: str
    limit: int
    period: _duration_pb2.Duration
    request_id: str
    wait_timeout: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., limit: _Optional[int] = ..., period: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., burst: _Optional[int] = ..., cost: _Optional[int] = ..., wait_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class TakeResponse(_message.Message):
    __slots__ = ["allowed", "remaining", "reset_after", "retry_after"]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    RESET_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    remaining: int
    reset_after: _duration_pb2.Duration
    retry_after: _duration_pb2.Duration
    def __init__(self, allowed: bool = ..., remaining: _Optional[int] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reset_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...
