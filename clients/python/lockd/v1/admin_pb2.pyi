from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from lockd.v1 import lock_pb2 as _lock_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
LOCK_KIND_ELECTION: LockKind
LOCK_KIND_LOCK: LockKind
LOCK_KIND_SEMAPHORE: LockKind
LOCK_KIND_UNSPECIFIED: LockKind

class AppInfo(_message.Message):
    __slots__ = ["app", "expire_time", "failed_attempts", "has_token", "last_error", "last_mint_time", "mints_today", "next_refresh_time", "retry_time"]
    APP_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_MINT_TIME_FIELD_NUMBER: _ClassVar[int]
    MINTS_TODAY_FIELD_NUMBER: _ClassVar[int]
    NEXT_REFRESH_TIME_FIELD_NUMBER: _ClassVar[int]
    RETRY_TIME_FIELD_NUMBER: _ClassVar[int]
    app: str
    expire_time: _timestamp_pb2.Timestamp
    failed_attempts: int
    has_token: bool
    last_error: str
    last_mint_time: _timestamp_pb2.Timestamp
    mints_today: int
    next_refresh_time: _timestamp_pb2.Timestamp
    retry_time: _timestamp_pb2.Timestamp
    def __init__(self, app: _Optional[str] = ..., has_token: bool = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_mint_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., mints_today: _Optional[int] = ..., next_refresh_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., failed_attempts: _Optional[int] = ..., retry_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DescribeAppRequest(_message.Message):
    __slots__ = ["app"]
    APP_FIELD_NUMBER: _ClassVar[int]
    app: str
    def __init__(self, app: _Optional[str] = ...) -> None: ...

class DescribeAppResponse(_message.Message):
    __slots__ = ["app"]
    APP_FIELD_NUMBER: _ClassVar[int]
    app: AppInfo
    def __init__(self, app: _Optional[_Union[AppInfo, _Mapping]] = ...) -> None: ...

class DescribeLockRequest(_message.Message):
    __slots__ = ["key"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class DescribeLockResponse(_message.Message):
    __slots__ = ["lock"]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    lock: LockInfo
    def __init__(self, lock: _Optional[_Union[LockInfo, _Mapping]] = ...) -> None: ...

class ElectionState(_message.Message):
    __slots__ = ["has_leader", "leader", "term", "value"]
    HAS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    has_leader: bool
    leader: str
    term: int
    value: str
    def __init__(self, has_leader: bool = ..., leader: _Optional[str] = ..., term: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...

class ForceReleaseRequest(_message.Message):
    __slots__ = ["key", "owner"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner: str
    def __init__(self, key: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class ForceReleaseResponse(_message.Message):
    __slots__ = ["released"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedCompositeFieldContainer[LockHolder]
    def __init__(self, released: _Optional[_Iterable[_Union[LockHolder, _Mapping]]] = ...) -> None: ...

class ListAppsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListAppsResponse(_message.Message):
    __slots__ = ["apps"]
    APPS_FIELD_NUMBER: _ClassVar[int]
    apps: _containers.RepeatedCompositeFieldContainer[AppInfo]
    def __init__(self, apps: _Optional[_Iterable[_Union[AppInfo, _Mapping]]] = ...) -> None: ...

class ListLocksRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "prefix"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListLocksResponse(_message.Message):
    __slots__ = ["locks", "next_page_token"]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[LockInfo]
    next_page_token: str
    def __init__(self, locks: _Optional[_Iterable[_Union[LockInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class LockHolder(_message.Message):
    __slots__ = ["client", "expire_time", "fencing_token", "hold_count", "mode", "owner", "ttl", "ttl_left"]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLD_COUNT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    TTL_LEFT_FIELD_NUMBER: _ClassVar[int]
    client: str
    expire_time: _timestamp_pb2.Timestamp
    fencing_token: int
    hold_count: int
    mode: _lock_pb2.LockMode
    owner: str
    ttl: _duration_pb2.Duration
    ttl_left: _duration_pb2.Duration
    def __init__(self, owner: _Optional[str] = ..., mode: _Optional[_Union[_lock_pb2.LockMode, str]] = ..., hold_count: _Optional[int] = ..., fencing_token: _Optional[int] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ttl_left: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., client: _Optional[str] = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ["election", "holders", "key", "kind", "last_fencing_token", "semaphore", "waiting_writers"]
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LAST_FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SEMAPHORE_FIELD_NUMBER: _ClassVar[int]
    WAITING_WRITERS_FIELD_NUMBER: _ClassVar[int]
    election: ElectionState
    holders: _containers.RepeatedCompositeFieldContainer[LockHolder]
    key: str
    kind: LockKind
    last_fencing_token: int
    semaphore: SemaphoreState
    waiting_writers: int
    def __init__(self, key: _Optional[str] = ..., kind: _Optional[_Union[LockKind, str]] = ..., holders: _Optional[_Iterable[_Union[LockHolder, _Mapping]]] = ..., waiting_writers: _Optional[int] = ..., last_fencing_token: _Optional[int] = ..., election: _Optional[_Union[ElectionState, _Mapping]] = ..., semaphore: _Optional[_Union[SemaphoreState, _Mapping]] = ...) -> None: ...

class SemaphoreState(_message.Message):
    __slots__ = ["limit", "permits_in_use"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERMITS_IN_USE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    permits_in_use: int
    def __init__(self, limit: _Optional[int] = ..., permits_in_use: _Optional[int] = ...) -> None: ...

class LockKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
