"""Leader election: Leadership, and the current leader as anyone sees it."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, List, Optional

import grpc

from ._lease import run_callbacks, seconds, to_datetime
from ._transport import Transport, now
from .errors import LeaseLost, LockdError
from .v1 import election_pb2, lock_pb2

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("lockd")


@dataclass(frozen=True)
class LeaderInfo:
    """LeaderInfo is an election's leader, as anyone may see it."""

    #: The election's name.
    name: str
    #: The value the leader proclaims (for example its address).
    value: str
    #: The leader's owner name.
    owner: str
    #: The term: a fencing token greater than every term of the election before.
    term: int
    #: When the leadership ends unless renewed, by Redis's clock.
    expire_time: datetime


def leader_info(leader: election_pb2.Leader) -> LeaderInfo:
    """leader_info converts a lockd.v1.Leader."""
    return LeaderInfo(leader.name, leader.value, leader.owner, leader.term, to_datetime(leader.expire_time))


class Leadership:
    """Leadership is a candidate's leadership of an election, won by
    ``Client.campaign`` and kept alive by its Campaign stream until resigned.

    Its loss is reported before lockd can elect another candidate: when the
    Campaign stream ends (lockd found the leadership gone, or the replica went
    away), or when no renewal was confirmed before it could run out (a tenth
    of its ttl early). A lost leadership is never resumed under its term:
    campaign again. Pass ``term`` with every write the leader makes.

    A leadership is a context manager: leaving the ``with`` block resigns it,
    and raises its ``LeaseLost`` if it was lost meanwhile (unless another
    exception is already on its way out).
    """

    def __init__(self, client: "Client", transport: Transport, name: str):
        self._client = client
        self._transport = transport
        #: The election's name.
        self.name = name
        #: The leader's owner name.
        self.owner = ""
        #: The leadership's lease id (for LockService calls).
        self.lease_id = ""
        #: The term: a fencing token greater than every term of the election before.
        self.term = 0
        #: When this candidate was elected, by Redis's clock.
        self.elected_time = datetime.fromtimestamp(0, tz=timezone.utc)
        self._value = ""
        self._cond = threading.Condition()
        self._closed = False
        self._lost: Optional[LeaseLost] = None
        self._lost_event = threading.Event()
        self._callbacks: List[Callable[[LeaseLost], None]] = []
        self._call = None
        self._anchored = False
        self._anchor_local = 0.0
        self._anchor_redis = 0.0
        self._expire = 0.0
        self._ttl = 0.0

    @property
    def value(self) -> str:
        """The value the leader proclaims."""
        with self._cond:
            return self._value

    @property
    def is_leader(self) -> bool:
        """True while the leadership is neither lost nor resigned."""
        with self._cond:
            return not self._closed and self._lost is None

    @property
    def lost_error(self) -> Optional[LeaseLost]:
        """The LeaseLost if the leadership was lost, else None."""
        with self._cond:
            return self._lost

    @property
    def expire_time(self) -> datetime:
        """When the leadership ends unless renewed, by Redis's clock, as last confirmed."""
        with self._cond:
            return datetime.fromtimestamp(self._expire, tz=timezone.utc)

    def check_leader(self) -> None:
        """Raises the LeaseLost unless still leader: call it before each write the leadership guards."""
        with self._cond:
            if self._lost is not None:
                raise self._lost
            if self._closed:
                raise RuntimeError(f"leadership of {self.name} was resigned")

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LeaseLost]:
        """Waits up to timeout seconds (None: for ever) for the leadership to be
        lost; returns the LeaseLost, or None if it was not lost meanwhile."""
        self._lost_event.wait(timeout)
        return self.lost_error

    def on_lost(self, callback: Callable[[LeaseLost], None]) -> "Leadership":
        """Runs callback(LeaseLost) on a thread of its own when the leadership is
        lost (at once if it was); returns the leadership."""
        with self._cond:
            if self._lost is None:
                self._callbacks.append(callback)
                return self
            lost = self._lost
        run_callbacks([callback], lost)
        return self

    def proclaim(self, value: str) -> None:
        """Sets the leader's value, for observers to see."""
        self.check_leader()
        try:
            r = self._transport.call(
                f"Proclaim {self.name}",
                lambda s: s.elections.Proclaim,
                lambda _: election_pb2.ProclaimRequest(name=self.name, lease_id=self.lease_id, value=value),
            )
        except LockdError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                raise LeaseLost(self.name, f"Proclaim: {e.details}") from None
            raise
        with self._cond:
            self._value = r.leader.value

    def resign(self) -> None:
        """Ends the leadership at once, so the next candidate is elected, and stops
        keeping it alive. Resigning a resigned leadership does nothing.

        Raises LeaseLost when the leadership was lost (the first time it is
        resigned), as releasing a lost lease does; LockdError when lockd could
        not be reached (the leadership then ends at its ttl).
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            gone = self._lost
            call = self._call
            self._cond.notify_all()
        self._client._forget_leadership(self)
        try:
            if gone is None:
                self._client._resign(self.name, self.lease_id)
        except LockdError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise
            gone = LeaseLost(self.name, f"Resign: {e.details}")
        finally:
            if call is not None:
                call.cancel()
        if gone is not None:
            with self._cond:
                self._lost = gone
            self._lost_event.set()
            raise gone

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.resign()
            return
        try:
            self.resign()
        except LockdError:
            pass  # the exception on its way out goes on

    def __repr__(self) -> str:
        return f"Leadership(name={self.name!r}, owner={self.owner!r}, term={self.term})"

    # Winning and keeping it.

    def _begin(self, target: int, req: election_pb2.CampaignRequest) -> election_pb2.Leader:
        """Opens the Campaign stream on target and waits until elected."""
        try:
            call = self._transport.stubs[target].elections.Campaign(req, metadata=self._transport.metadata())
        except ValueError:
            raise LockdError(f"Campaign {self.name}", grpc.StatusCode.CANCELLED, "the client is closed") from None
        with self._cond:
            self._call = call
        where = f"Campaign {self.name} on {self._transport.targets[target]}"
        try:
            first = next(call)
        except StopIteration:
            raise LockdError(where, grpc.StatusCode.UNAVAILABLE, "Campaign stream ended") from None
        except grpc.RpcError as e:
            raise LockdError(where, e.code(), e.details()) from None
        self._follow_thread = threading.Thread(
            target=self._follow, args=(call,), daemon=True, name=f"lockd-campaign {self.name}"
        )
        return first.leader

    def _elected(self, first: election_pb2.Leader) -> None:
        """Starts following the leadership once elected: one Renew relates its
        expiry to the local clock (the election may have come long after the
        stream opened)."""
        self.owner = first.owner
        self.lease_id = first.lease_id
        self.term = first.term
        self._value = first.value
        sent = now()
        r = self._transport.call(
            f"Renew {self.name}",
            lambda s: s.locks.Renew,
            lambda _: lock_pb2.RenewRequest(key=self.name, lease_id=self.lease_id),
        )
        ttl = seconds(r.lease.ttl)
        with self._cond:
            self._ttl = ttl
            self.elected_time = datetime.fromtimestamp(seconds(first.expire_time) - ttl, tz=timezone.utc)
            self._anchor_local = sent
            self._anchor_redis = seconds(r.lease.expire_time) - ttl
            self._expire = max(self._expire, seconds(r.lease.expire_time), seconds(first.expire_time))
            self._anchored = True
        self._follow_thread.start()
        threading.Thread(target=self._watch, daemon=True, name=f"lockd-leader-deadline {self.name}").start()

    def _follow(self, call) -> None:
        code, details = grpc.StatusCode.UNAVAILABLE, "Campaign stream ended"
        try:
            for r in call:
                with self._cond:
                    self._value = r.leader.value
                    self._expire = max(self._expire, seconds(r.leader.expire_time))
                    self._cond.notify_all()
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        with self._cond:
            if self._closed or self._lost is not None:
                return
            if code == grpc.StatusCode.NOT_FOUND:
                self._lose(f"lockd ended the Campaign stream with NOT_FOUND: {details}", resign=False)
            else:
                self._lose(f"the Campaign stream ended: {code.name} {details or ''}".rstrip(), resign=True)

    def _watch(self) -> None:
        with self._cond:
            while not self._closed and self._lost is None:
                deadline = self._anchor_local + (self._expire - self._anchor_redis) - self._ttl / 10
                t = now()
                if t >= deadline:
                    self._lose("no renewal was confirmed before the leadership could run out", resign=True)
                    return
                self._cond.wait(deadline - t)

    def _lose(self, reason: str, resign: bool) -> None:
        # Reports the loss; when lockd may still hold the leadership (the
        # replica went away, or no renewal came) it is resigned in the
        # background, so the next candidate need not wait it out. Called with
        # the condition held.
        err = LeaseLost(self.name, reason)
        self._lost = err
        if self._call is not None:
            self._call.cancel()
        self._cond.notify_all()
        callbacks, self._callbacks = self._callbacks, []
        self._lost_event.set()
        log.warning("%s", err)
        self._client._forget_leadership(self)
        run_callbacks(callbacks, err)
        if resign:
            threading.Thread(target=self._resign_quietly, daemon=True, name="lockd-resign").start()

    def _resign_quietly(self) -> None:
        try:
            self._client._resign(self.name, self.lease_id)
        except LockdError:
            pass

    def _abandon(self) -> None:
        """Stops following without resigning by call (the stream's close resigns)."""
        with self._cond:
            self._closed = True
            call = self._call
            self._cond.notify_all()
        if call is not None:
            call.cancel()
