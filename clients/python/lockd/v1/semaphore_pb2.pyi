from google.protobuf import duration_pb2 as _duration_pb2
from lockd.v1 import lock_pb2 as _lock_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SemaphoreServiceAcquireRequest(_message.Message):
    __slots__ = ["key", "limit", "owner", "request_id", "ttl", "wait_timeout"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    key: str
    limit: int
    owner: str
    request_id: str
    ttl: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., limit: _Optional[int] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SemaphoreServiceAcquireResponse(_message.Message):
    __slots__ = ["acquired", "available", "lease", "retry_after"]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    available: int
    lease: _lock_pb2.Lease
    retry_after: _duration_pb2.Duration
    def __init__(self, acquired: bool = ..., lease: _Optional[_Union[_lock_pb2.Lease, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., available: _Optional[int] = ...) -> None: ...
