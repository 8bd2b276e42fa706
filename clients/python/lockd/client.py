"""Client: lockd's Python client."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Optional, Sequence, Set

import grpc

from ._election import LeaderInfo, Leadership, leader_info
from ._lease import Lease
from ._lease import duration as _duration
from ._ratelimit import Decision, Rate, take_once, wait_turn
from ._stream import Follow
from ._transport import TLS, Transport, now
from .errors import LockdError
from .tokens import TokenClient
from .v1 import election_pb2, lock_pb2, semaphore_pb2

#: Waits longer than this are made of several calls, each within lockd's limits.
MAX_WAIT_CHUNK = 60.0


def _positive(value: float, what: str) -> float:
    if value is None or value <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return float(value)


class Client:
    """Client talks to one or more lockd replicas.

    ``targets`` are lockd addresses ("host:port"), tried in order: a call that
    fails with UNAVAILABLE, or whose attempt runs past its own deadline (a
    frozen replica), moves to the next target and is retried with backoff
    until ``retry_timeout`` seconds beyond its wait. Acquire and Release carry
    a request_id, so a retried call never acts twice; KeepAlive streams resume
    on the next target for the same lease.

    ``token`` (or ``token_file``, read again when it changes) is sent as a
    bearer token; ``tls`` (a ``TLS``) turns TLS on. ``call_timeout`` is each
    attempt's deadline beyond its wait (default 10s), ``default_ttl`` the ttl
    of leases and leaderships whose call sets none (default 30s).

    A client is safe for use by many threads; make one per process and close
    it at shutdown (or use it in a ``with`` block), which resigns its
    leaderships and releases the leases still open.
    """

    def __init__(
        self,
        targets: Sequence[str],
        *,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        tls: Optional[TLS] = None,
        call_timeout: float = 10.0,
        retry_timeout: float = 15.0,
        default_ttl: float = 30.0,
    ):
        self._transport = Transport(targets, token, token_file, tls, call_timeout, retry_timeout)
        self._default_ttl = _positive(default_ttl, "default_ttl")
        self._owner_prefix = f"{socket.gethostname()}:{os.getpid()}"
        self._mu = threading.Lock()
        self._open: Set[Lease] = set()
        self._leading: Set[Leadership] = set()
        #: The token client: access tokens of the apps lockd is configured with.
        self.tokens = TokenClient(self._transport)

    # Locks.

    def acquire(self, key: str, *, mode: str = "write", ttl: Optional[float] = None, owner: str = "") -> Lease:
        """Takes a lease on key, waiting as long as it takes.

        ``mode`` is 'write' (one holder, the default) or 'read' (many readers,
        no writer); ``ttl`` in seconds (default the client's); the same
        ``owner`` re-enters its lease; an empty one means a fresh owner.
        """
        while True:
            lease = self._acquire_once(key, MAX_WAIT_CHUNK, mode, ttl, owner)
            if lease is not None:
                return lease

    def try_acquire(
        self, key: str, *, wait: float = 0.0, mode: str = "write", ttl: Optional[float] = None, owner: str = ""
    ) -> Optional[Lease]:
        """Takes a lease on key if it can be had within wait seconds (0, the
        default, tries once); None when the key stayed busy. Options as acquire."""
        end = now() + wait
        while True:
            left = max(0.0, end - now())
            lease = self._acquire_once(key, min(left, MAX_WAIT_CHUNK), mode, ttl, owner)
            if lease is not None or left <= MAX_WAIT_CHUNK:
                return lease

    # Semaphores.

    def acquire_permit(self, key: str, limit: int, *, ttl: Optional[float] = None, owner: str = "") -> Lease:
        """Takes one of the ``limit`` permits of the semaphore key, waiting as long
        as it takes. The permit is a Lease like a lock's (mode 'permit'), with its
        own fencing token and loss report. At most ``limit`` permits of key are
        held at once, by every holder together, who must all give the same limit
        (else FAILED_PRECONDITION)."""
        while True:
            lease = self._acquire_once(key, MAX_WAIT_CHUNK, "permit", ttl, owner, _check_limit(limit))
            if lease is not None:
                return lease

    def try_acquire_permit(
        self, key: str, limit: int, *, wait: float = 0.0, ttl: Optional[float] = None, owner: str = ""
    ) -> Optional[Lease]:
        """Takes a permit of the semaphore key if one comes free within wait seconds
        (0, the default, tries once); None when all stayed held."""
        limit = _check_limit(limit)
        end = now() + wait
        while True:
            left = max(0.0, end - now())
            lease = self._acquire_once(key, min(left, MAX_WAIT_CHUNK), "permit", ttl, owner, limit)
            if lease is not None or left <= MAX_WAIT_CHUNK:
                return lease

    # Rate limits.

    def take(self, key: str, rate: Rate, *, cost: int = 1) -> Decision:
        """Spends cost (default 1, at most the rate's burst) from the fleet-wide
        rate limiter of key if rate allows it now, and returns the Decision:
        not allowed is a decision (with ``retry_after``), not an error. Every
        caller of key must give the same rate while its limiter is in use
        (else LockdError FAILED_PRECONDITION). A retry on UNAVAILABLE, here or
        on the next target, carries the call's request_id, so it never spends
        twice. A bad cost or rate raises ValueError before any call."""
        return take_once(self._transport, key, rate, cost, 0.0)

    def wait(self, key: str, rate: Rate, *, cost: int = 1, timeout: Optional[float] = None) -> Decision:
        """Spends cost (default 1) from the rate limiter of key, waiting for its
        turn, and returns the allowed Decision. lockd keeps the caller's place
        among the waiters (served in the order they came, without polling) and
        answers when the turn comes. With ``timeout`` (seconds) it waits at most
        that long, and raises RateLimited at once, spending nothing, when the
        turn would come later; without it, it waits as long as it takes.
        Options and errors as take."""
        return wait_turn(self._transport, key, rate, cost, timeout)

    # Elections.

    def campaign(self, name: str, value: str, *, ttl: Optional[float] = None, owner: str = "") -> Leadership:
        """Enters the election name with value and returns the Leadership once
        elected, waiting as long as it takes. Campaigning again with the current
        leader's ``owner`` resumes its leadership; an empty owner is made up.
        While it waits, a replica that goes away is left for the next; once
        elected, the leadership lives and dies with its Campaign stream."""
        req = election_pb2.CampaignRequest(
            name=name,
            value=value,
            owner=owner or f"{self._owner_prefix}:{uuid.uuid4()}",
            ttl=_duration(_positive(ttl or self._default_ttl, "ttl")),
        )
        t = self._transport
        failing_since: Optional[float] = None
        backoff = 0.025
        while True:
            if t.closed:
                raise LockdError(f"Campaign {name}", grpc.StatusCode.CANCELLED, "the client is closed")
            target = t.current
            leadership = Leadership(self, t, name)
            try:
                first = leadership._begin(target, req)
            except LockdError as e:
                if e.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                # The replica went away while the candidate waited: wait on the
                # next one, under the same owner, so a leadership won on the
                # first but not reported is taken up, not waited out.
                t.failed(target)
                if failing_since is None:
                    failing_since = now()
                elif now() - failing_since > t.retry_timeout:
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            with self._mu:
                self._leading.add(leadership)
            try:
                leadership._elected(first)
            except BaseException:
                leadership._abandon()
                self._forget_leadership(leadership)
                raise
            return leadership

    def leader(self, name: str) -> Optional[LeaderInfo]:
        """The current leader of the election name, or None."""
        try:
            r = self._transport.call(
                f"Leader {name}", lambda s: s.elections.Leader, lambda _: election_pb2.LeaderRequest(name=name)
            )
        except LockdError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return leader_info(r.leader)

    def observe(self, name: str) -> "Follow[Optional[LeaderInfo]]":
        """Follows the election name: iterating gives the leader (or None when
        there is none) at once, then at each change, terms never going back,
        across replicas. ``close()`` it (or use it in a ``with`` block) to stop."""
        state = {"delivered": False, "last": None, "highest": 0}

        def accept(r: election_pb2.ObserveResponse) -> object:
            l = leader_info(r.leader) if r.has_leader else None
            if l is not None and l.term < state["highest"]:
                return Follow.SKIP  # an older state, from a replica that lags
            last = state["last"]
            same = (l is None and last is None) or (
                l is not None and last is not None and (l.term, l.value, l.owner) == (last.term, last.value, last.owner)
            )
            if state["delivered"] and same:
                return Follow.SKIP  # the same state again, as a new stream starts
            state.update(delivered=True, last=l)
            if l is not None:
                state["highest"] = l.term
            return l

        return Follow(
            self._transport,
            f"Observe {name}",
            lambda s, md: s.elections.Observe(election_pb2.ObserveRequest(name=name), metadata=md),
            accept,
        )

    # The client itself.

    def close(self) -> None:
        """Resigns every leadership, releases every lease still open and closes the connections."""
        with self._mu:
            leading, leases = list(self._leading), list(self._open)
        for l in leading:
            try:
                l.resign()
            except LockdError:
                pass  # lost or unreachable: it ends by itself
        for lease in leases:
            try:
                lease.release()
            except LockdError:
                pass  # lost meanwhile, as its own report says
        for lease in leases:
            lease._abandon()
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Internals shared with Lease and Leadership.

    def _acquire_once(
        self, key: str, wait: float, mode: str, ttl: Optional[float], owner: str, limit: int = 0
    ) -> Optional[Lease]:
        if mode not in ("write", "read", "permit"):
            raise ValueError(f"mode must be 'write' or 'read', got {mode!r}")
        ttl_pb = _duration(_positive(ttl if ttl is not None else self._default_ttl, "ttl"))
        request_id = str(uuid.uuid4())
        # A fresh owner of the client's own when none is asked for: lockd
        # replays a retried request_id only to the owner that sent it.
        owner = owner or f"{self._owner_prefix}:{uuid.uuid4()}"
        sent_at = now()
        if limit:
            r = self._transport.call(
                f"SemaphoreService.Acquire {key}",
                lambda s: s.semaphores.Acquire,
                lambda left: semaphore_pb2.SemaphoreServiceAcquireRequest(
                    key=key, limit=limit, owner=owner, ttl=ttl_pb, wait_timeout=_duration(left), request_id=request_id
                ),
                wait,
            )
        elif mode == "read":
            r = self._transport.call(
                f"RLock {key}",
                lambda s: s.locks.RLock,
                lambda left: lock_pb2.RLockRequest(
                    key=key, owner=owner, ttl=ttl_pb, wait_timeout=_duration(left), request_id=request_id
                ),
                wait,
            )
        else:
            r = self._transport.call(
                f"Acquire {key}",
                lambda s: s.locks.Acquire,
                lambda left: lock_pb2.AcquireRequest(
                    key=key, owner=owner, ttl=ttl_pb, wait_timeout=_duration(left), request_id=request_id
                ),
                wait,
            )
        if not r.acquired:
            return None
        lease = Lease(self, self._transport, r.lease, sent_at)
        with self._mu:
            self._open.add(lease)
        lease._start()
        return lease

    def _release(self, key: str, lease_id: str) -> None:
        request_id = str(uuid.uuid4())
        self._transport.call(
            f"Release {key}",
            lambda s: s.locks.Release,
            lambda _: lock_pb2.ReleaseRequest(key=key, lease_id=lease_id, request_id=request_id),
        )

    def _resign(self, name: str, lease_id: str) -> None:
        self._transport.call(
            f"Resign {name}",
            lambda s: s.elections.Resign,
            lambda _: election_pb2.ResignRequest(name=name, lease_id=lease_id),
        )

    def _forget(self, lease: Lease) -> None:
        with self._mu:
            self._open.discard(lease)

    def _forget_leadership(self, leadership: Leadership) -> None:
        with self._mu:
            self._leading.discard(leadership)


def _check_limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 0xFFFFFFFF:
        raise ValueError(f"a semaphore's limit must be an integer in [1, 2**32-1], got {limit!r}")
    return limit
