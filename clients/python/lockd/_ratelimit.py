"""Fleet-wide rate limits (lockd.v1.RateLimitService): Rate, Decision, and
the calls behind ``Client.take`` and ``Client.wait``."""

from __future__ import annotations

import math
import numbers
import uuid
from dataclasses import dataclass
from typing import Optional

from ._lease import duration, seconds
from ._transport import Transport
from .errors import RateLimited
from .v1 import ratelimit_pb2

#: A wait without a bound is made of calls of at most this long each: a turn
#: further away is asked for again once it is within half of it.
MAX_WAIT_CHUNK = 60.0

_UINT32_MAX = 0xFFFFFFFF


def _count(value: object, what: str, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= _UINT32_MAX:
        raise ValueError(f"{what} must be an integer in [{low}, 2**32-1], got {value!r}")
    return value


def _finite(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Rate:
    """Rate is a fleet-wide rate limit: for a key, in any window of t seconds,
    at most ``burst + limit * t / period`` cost is allowed, however many
    processes take from it.

    Every caller of a key must give the same rate while the key's limiter is
    in use (else FAILED_PRECONDITION), so a misconfigured caller cannot widen
    a limit. A bad rate raises ValueError when it is made.

        wechat = Rate(600, 60, burst=10)  # 600 a minute, at most 10 at once
    """

    #: How much cost is allowed per period; at least 1.
    limit: int
    #: The span, in seconds, the limit applies to (lockd takes 1ms to 366 days).
    period: float
    #: How much cost an idle limiter allows at once; 0 (the default) means limit.
    burst: int = 0

    def __post_init__(self) -> None:
        _count(self.limit, "a rate's limit")
        _count(self.burst, "a rate's burst", allow_zero=True)
        if not _finite(self.period) or not self.period > 0:
            raise ValueError(f"a rate's period must be a positive number of seconds, got {self.period!r}")


@dataclass(frozen=True)
class Decision:
    """Decision is a rate limiter's answer."""

    #: True when the cost was spent: go ahead.
    allowed: bool
    #: How much more cost the limiter would allow at once.
    remaining: int
    #: When not allowed, seconds until the cost would be allowed if nobody
    #: else took from the key meanwhile; 0 when allowed.
    retry_after: float
    #: Seconds until the limiter is full again; 0 when it is full.
    reset_after: float


def take_once(transport: Transport, key: str, rate: Rate, cost: int, wait: float) -> Decision:
    """Asks once to spend cost from key's limiter, waiting up to wait seconds
    for its turn (0 decides at once). The call has one request_id, kept by
    its retries on UNAVAILABLE (on the next target too), so a decision whose
    reply was lost is returned by the retry instead of spending twice, and a
    retried waiter waits for the turn lockd already gave it."""
    if not isinstance(rate, Rate):
        raise ValueError(f"rate must be a lockd.Rate, got {rate!r}")
    _count(cost, "a take's cost")
    request_id = str(uuid.uuid4())
    period = duration(rate.period)
    r = transport.call(
        f"Take {key}",
        lambda s: s.rate_limits.Take,
        lambda left: ratelimit_pb2.TakeRequest(
            key=key,
            limit=rate.limit,
            period=period,
            burst=rate.burst,
            cost=cost,
            wait_timeout=duration(left if wait > 0 else 0.0),
            request_id=request_id,
        ),
        wait,
    )
    return Decision(r.allowed, r.remaining, seconds(r.retry_after), seconds(r.reset_after))


def wait_turn(transport: Transport, key: str, rate: Rate, cost: int, timeout: Optional[float]) -> Decision:
    """Spends cost from key's limiter, waiting for its turn (see Client.wait)."""
    if timeout is not None:
        if not _finite(timeout) or not timeout >= 0:
            raise ValueError(f"timeout must be None (as long as it takes) or seconds >= 0, got {timeout!r}")
        d = take_once(transport, key, rate, cost, float(timeout))
        if not d.allowed:
            raise RateLimited(key, d.retry_after)
        return d
    while True:
        d = take_once(transport, key, rate, cost, MAX_WAIT_CHUNK)
        if d.allowed:
            return d
        # The turn is further away than one call waits: ask again once it is near.
        transport.pause(max(0.0, d.retry_after - MAX_WAIT_CHUNK / 2))
