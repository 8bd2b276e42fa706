from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CampaignRequest(_message.Message):
    __slots__ = ["name", "owner", "ttl", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    ttl: _duration_pb2.Duration
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ["leader"]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class Leader(_message.Message):
    __slots__ = ["expire_time", "lease_id", "name", "owner", "term", "value"]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    expire_time: _timestamp_pb2.Timestamp
    lease_id: str
    name: str
    owner: str
    term: int
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., owner: _Optional[str] = ..., term: _Optional[int] = ..., lease_id: _Optional[str] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ["leader"]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ["has_leader", "leader"]
    HAS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    has_leader: bool
    leader: Leader
    def __init__(self, has_leader: bool = ..., leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ["lease_id", "name", "value"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ["leader"]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ["lease_id", "name"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    name: str
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...
