"""Lease: one hold on a key, kept alive by a KeepAlive stream until released."""

from __future__ import annotations

import logging
import random
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, List, Optional

import grpc

from ._transport import Transport, now
from .errors import LeaseLost, LockdError
from .v1 import lock_pb2

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("lockd")

MODES = {
    lock_pb2.LOCK_MODE_READ: "read",
    lock_pb2.LOCK_MODE_PERMIT: "permit",
}


def seconds(d) -> float:
    """seconds converts a google.protobuf.Duration or Timestamp to float seconds."""
    return d.seconds + d.nanos / 1e9


def to_datetime(ts) -> datetime:
    """to_datetime converts a google.protobuf.Timestamp to an aware datetime (UTC)."""
    return datetime.fromtimestamp(seconds(ts), tz=timezone.utc)


def run_callbacks(callbacks: List[Callable], arg) -> None:
    """Runs each callback on a thread of its own, so none can hold up the client."""
    for cb in callbacks:
        threading.Thread(target=cb, args=(arg,), daemon=True, name="lockd-callback").start()


class Lease:
    """Lease is one hold on a key, kept alive by a KeepAlive stream until released.

    It reports its loss before anyone else can be granted the key: when lockd
    ends the stream with NOT_FOUND, or when no renewal was confirmed before the
    lease could run out (a tenth of its ttl early, by a bound on Redis's clock
    learnt when the lease was granted and as each stream opens). Then ``held``
    turns False, ``check_held()`` raises the ``LeaseLost``, ``wait_lost()``
    returns it and ``on_lost`` callbacks run. When a replica goes away the
    stream resumes on the next target.

    A lease is a context manager: leaving the ``with`` block releases it, and
    raises its ``LeaseLost`` if it was lost meanwhile (unless another exception
    is already on its way out). Pass ``fencing_token`` with every write to the
    resource it protects.
    """

    def __init__(self, client: "Client", transport: Transport, granted: lock_pb2.Lease, sent_at: float):
        self._client = client
        self._transport = transport
        #: The key this lease holds.
        self.key: str = granted.key
        #: The lease's opaque id.
        self.lease_id: str = granted.lease_id
        #: Who holds the lease (as asked for, or made up by lockd).
        self.owner: str = granted.owner
        #: 'write', 'read', or 'permit' (one of a semaphore's permits).
        self.mode: str = MODES.get(granted.mode, "write")
        #: The fencing token: greater than every token issued before for this key.
        self.fencing_token: int = granted.fencing_token
        grant = seconds(granted.expire_time) - seconds(granted.ttl)
        #: When the lease was granted, by Redis's clock.
        self.grant_time: datetime = datetime.fromtimestamp(grant, tz=timezone.utc)
        # A local instant (time.monotonic) at or before which Redis's clock
        # read anchor_redis: first the send of the granting call and the
        # grant; then, for each KeepAlive stream, its opening and its first
        # renewal (lockd renews as soon as a stream opens).
        self._anchor_local = sent_at
        self._anchor_redis = grant
        self._last = granted
        self._cond = threading.Condition()
        self._closed = False
        self._lost: Optional[LeaseLost] = None
        self._lost_in_lockd = False
        self._lost_event = threading.Event()
        self._callbacks: List[Callable[[LeaseLost], None]] = []
        self._stream = 0
        self._call = None
        self._target = 0
        self._stall_at: Optional[float] = None
        self._deadline = 0.0

    # The public face.

    @property
    def held(self) -> bool:
        """True while the lease is neither lost nor released."""
        with self._cond:
            return not self._closed and self._lost is None

    @property
    def lost_error(self) -> Optional[LeaseLost]:
        """The LeaseLost if the lease was lost, else None."""
        with self._cond:
            return self._lost

    @property
    def hold_count(self) -> int:
        """How many times the owner holds the lease, as of the last renewal."""
        with self._cond:
            return self._last.hold_count

    @property
    def ttl(self) -> float:
        """The span of the last grant or renewal, in seconds."""
        with self._cond:
            return seconds(self._last.ttl)

    @property
    def expire_time(self) -> datetime:
        """When the lease runs out unless renewed, by Redis's clock, as of the last renewal."""
        with self._cond:
            return to_datetime(self._last.expire_time)

    def check_held(self) -> None:
        """Raises the LeaseLost if the lease was lost: call it before each guarded write."""
        with self._cond:
            if self._lost is not None:
                raise self._lost
            if self._closed:
                raise RuntimeError(f"lease on {self.key} was released")

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LeaseLost]:
        """Waits up to timeout seconds (None: for ever) for the lease to be lost;
        returns the LeaseLost, or None if it was not lost meanwhile."""
        self._lost_event.wait(timeout)
        return self.lost_error

    def on_lost(self, callback: Callable[[LeaseLost], None]) -> "Lease":
        """Runs callback(LeaseLost) on a thread of its own when the lease is lost
        (at once if it was); returns the lease."""
        with self._cond:
            if self._lost is None:
                self._callbacks.append(callback)
                return self
            lost = self._lost
        run_callbacks([callback], lost)
        return self

    def release(self) -> None:
        """Gives one hold back (retried safely on another replica) and stops keeping
        the lease alive. Releasing a released lease does nothing.

        Raises LeaseLost if the lease was lost (the first time it is released):
        the work it guarded may have overlapped another holder's. A lease given
        up for lack of confirmed renewals is still released in the background,
        in case lockd holds it. Other failures to release are logged; the lease
        then runs out by itself within its ttl.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            was_held = self._lost is None
            release_lost = not was_held and not self._lost_in_lockd
            call, self._call = self._call, None
            self._cond.notify_all()
        self._client._forget(self)
        try:
            if was_held:
                gone = self._release_now()
                if gone is not None:
                    with self._cond:
                        self._lost = gone
                    self._lost_event.set()
            elif release_lost:
                threading.Thread(target=self._release_now, daemon=True, name="lockd-release").start()
        finally:
            if call is not None:
                call.cancel()
        lost = self.lost_error
        if lost is not None:
            raise lost

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.release()
            return
        try:
            self.release()
        except LeaseLost:
            pass  # the exception on its way out goes on

    def __repr__(self) -> str:
        return f"Lease(key={self.key!r}, owner={self.owner!r}, mode={self.mode!r}, fencing_token={self.fencing_token})"

    # Keeping it alive.

    def _release_now(self) -> Optional[LeaseLost]:
        """Releases the lease; lockd not knowing it (NOT_FOUND) means it was lost,
        which is returned."""
        try:
            self._client._release(self.key, self.lease_id)
        except LockdError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                return LeaseLost(self.key, f"Release: {e.details}")
            if self._transport.closed:
                return None  # the client is closing: the lease runs out by itself
            log.warning("releasing the lease on %s failed; it runs out by itself: %s", self.key, e)
        return None

    def _start(self) -> None:
        """Starts keeping the lease alive."""
        # A grant that waited may have come long after the send that anchors
        # it, so until the first renewal re-anchors the clock (a round trip
        # away) the lease is trusted for a tenth of its ttl from now at least:
        # only a reply delayed by nine tenths of the ttl could make that late.
        t = now()
        with self._cond:
            self._renewed(self._last, t, t + seconds(self._last.ttl) / 10)
        threading.Thread(target=self._keep, daemon=True, name=f"lockd-keepalive {self.key}").start()
        threading.Thread(target=self._watch, daemon=True, name=f"lockd-deadline {self.key}").start()

    def _abandon(self) -> None:
        """Stops keeping the lease alive without releasing it (the client is closing)."""
        with self._cond:
            self._closed = True
            call, self._call = self._call, None
            self._cond.notify_all()
        if call is not None:
            call.cancel()

    def _renewed(self, lease: lock_pb2.Lease, received: float, floor: float = float("-inf")) -> None:
        # Records a lease lockd confirmed at or before `received` and moves the
        # loss deadline: its expiry mapped to the local clock through the
        # anchor (never later than received + ttl), less a tenth of its ttl,
        # and no earlier than floor. Called with the condition held.
        self._last = lease
        ttl = seconds(lease.ttl)
        expiry = min(self._anchor_local + (seconds(lease.expire_time) - self._anchor_redis), received + ttl)
        self._deadline = max(expiry - ttl / 10, floor)
        self._cond.notify_all()

    def _keep(self) -> None:
        """Runs the KeepAlive stream, resuming it on the next target when it ends."""
        backoff = 0.0
        while True:
            with self._cond:
                if self._closed or self._lost is not None:
                    return
                self._stream += 1
                sid = self._stream
                target = self._transport.current
                opened = now()
                try:
                    call = self._transport.stubs[target].locks.KeepAlive(
                        lock_pb2.KeepAliveRequest(key=self.key, lease_id=self.lease_id),
                        metadata=self._transport.metadata(),
                    )
                except ValueError:  # the channel was closed
                    return
                self._call = call
                self._target = target
                self._arm_stall()
            anchored = False
            code, details = grpc.StatusCode.UNAVAILABLE, "KeepAlive stream ended"
            try:
                for r in call:
                    with self._cond:
                        if sid != self._stream or self._closed or self._lost is not None:
                            break
                        backoff = 0.0
                        if not anchored:
                            self._anchor_local = opened
                            self._anchor_redis = seconds(r.lease.expire_time) - seconds(r.lease.ttl)
                            anchored = True
                        self._renewed(r.lease, now())
                        self._arm_stall()
            except grpc.RpcError as e:
                code, details = e.code(), e.details()
            with self._cond:
                if self._closed or self._lost is not None:
                    return
                if sid != self._stream:
                    continue  # left for the next target by _watch
                if code == grpc.StatusCode.NOT_FOUND:
                    self._lost_in_lockd = True
                    self._lose(f"lockd ended KeepAlive with NOT_FOUND: {details}")
                    return
                log.debug("KeepAlive on %s ended %s; resuming", self._transport.targets[target], code)
                self._transport.failed(target)
                self._stall_at = None
                backoff = min(max(backoff * 2, 0.025), self._ttl_locked() / 6)
                self._cond.wait(backoff / 2 + random.random() * backoff / 2)

    def _ttl_locked(self) -> float:
        # The last ttl, read with the condition already held.
        return seconds(self._last.ttl)

    def _arm_stall(self) -> None:
        # A stream silent for half a ttl (renewals come every third) is left
        # for the next target: a frozen or cut-off replica answers nothing. With
        # one target there is nowhere to go, and the silent stream may still
        # bring lockd's NOT_FOUND. Called with the condition held.
        if len(self._transport.targets) > 1:
            self._stall_at = now() + self._ttl_locked() / 2
        self._cond.notify_all()

    def _watch(self) -> None:
        """Declares the lease lost at its deadline, and leaves stalled streams."""
        with self._cond:
            while not self._closed and self._lost is None:
                t = now()
                if t >= self._deadline:
                    self._lose("no renewal was confirmed before the lease could run out")
                    return
                if self._stall_at is not None and t >= self._stall_at:
                    self._stall_at = None
                    self._transport.failed(self._target)
                    self._stream += 1
                    if self._call is not None:
                        self._call.cancel()
                    continue
                until = self._deadline if self._stall_at is None else min(self._deadline, self._stall_at)
                self._cond.wait(until - t)

    def _lose(self, reason: str) -> None:
        # Called with the condition held.
        err = LeaseLost(self.key, reason)
        self._lost = err
        self._stream += 1
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self._cond.notify_all()
        callbacks, self._callbacks = self._callbacks, []
        self._lost_event.set()
        log.warning("%s", err)
        self._client._forget(self)
        run_callbacks(callbacks, err)
