from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
LOCK_MODE_PERMIT: LockMode
LOCK_MODE_READ: LockMode
LOCK_MODE_UNSPECIFIED: LockMode
LOCK_MODE_WRITE: LockMode

class AcquireRequest(_message.Message):
    __slots__ = ["key", "owner", "request_id", "ttl", "wait_timeout"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner: str
    request_id: str
    ttl: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ["acquired", "holder", "lease", "retry_after"]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    holder: str
    lease: Lease
    retry_after: _duration_pb2.Duration
    def __init__(self, acquired: bool = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., holder: _Optional[str] = ...) -> None: ...

class HoldRequest(_message.Message):
    __slots__ = ["key", "mode", "owner", "ttl", "wait_timeout"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    key: str
    mode: LockMode
    owner: str
    ttl: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., owner: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class HoldResponse(_message.Message):
    __slots__ = ["acquired", "holder", "lease", "retry_after"]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    holder: str
    lease: Lease
    retry_after: _duration_pb2.Duration
    def __init__(self, acquired: bool = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., holder: _Optional[str] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ["key", "lease_id", "release_on_close", "ttl"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RELEASE_ON_CLOSE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    key: str
    lease_id: str
    release_on_close: bool
    ttl: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., lease_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., release_on_close: bool = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ["lease"]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ["expire_time", "fencing_token", "hold_count", "key", "lease_id", "mode", "owner", "ttl"]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLD_COUNT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    expire_time: _timestamp_pb2.Timestamp
    fencing_token: int
    hold_count: int
    key: str
    lease_id: str
    mode: LockMode
    owner: str
    ttl: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., lease_id: _Optional[str] = ..., owner: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., fencing_token: _Optional[int] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., hold_count: _Optional[int] = ...) -> None: ...

class RLockRequest(_message.Message):
    __slots__ = ["key", "owner", "request_id", "ttl", "wait_timeout"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner: str
    request_id: str
    ttl: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class RLockResponse(_message.Message):
    __slots__ = ["acquired", "holder", "lease", "retry_after"]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    holder: str
    lease: Lease
    retry_after: _duration_pb2.Duration
    def __init__(self, acquired: bool = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., holder: _Optional[str] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ["key", "lease_id", "request_id"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    lease_id: str
    request_id: str
    def __init__(self, key: _Optional[str] = ..., lease_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ["hold_count"]
    HOLD_COUNT_FIELD_NUMBER: _ClassVar[int]
    hold_count: int
    def __init__(self, hold_count: _Optional[int] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ["key", "lease_id", "ttl"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    key: str
    lease_id: str
    ttl: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., lease_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ["lease"]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class WLockRequest(_message.Message):
    __slots__ = ["key", "owner", "request_id", "ttl", "wait_timeout"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner: str
    request_id: str
    ttl: _duration_pb2.Duration
    wait_timeout: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class WLockResponse(_message.Message):
    __slots__ = ["acquired", "holder", "lease", "retry_after"]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    holder: str
    lease: Lease
    retry_after: _duration_pb2.Duration
    def __init__(self, acquired: bool = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., holder: _Optional[str] = ...) -> None: ...

class LockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
