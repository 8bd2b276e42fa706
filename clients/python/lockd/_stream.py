"""Following a server stream across replicas, as an iterator."""

from __future__ import annotations

import queue
import random
import threading
from typing import Callable, Generic, Iterator, Optional, TypeVar

import grpc

from ._transport import Stubs, Transport
from .errors import LockdError

T = TypeVar("T")

#: Codes after which following again cannot help: the call itself is refused.
FATAL = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
)

_END = object()


class Follow(Generic[T]):
    """Follow iterates over what a server stream sends, opening it again on the
    next target when a replica goes away.

    ``accept`` turns each response into the item to deliver, or ``Follow.SKIP``
    (a state seen already, as a new stream starts). When lockd refuses the
    call, iterating raises its ``LockdError``. ``close()`` (or leaving a
    ``with`` block) stops it; iterating then ends.
    """

    SKIP = object()

    def __init__(
        self,
        transport: Transport,
        what: str,
        open_call: Callable[[Stubs, list], object],
        accept: Callable[[object], object],
    ):
        self._transport = transport
        self._what = what
        self._open_call = open_call
        self._accept = accept
        self._items: "queue.Queue[object]" = queue.Queue()
        self._mu = threading.Condition()
        self._closed = False
        self._call = None
        threading.Thread(target=self._run, daemon=True, name=f"lockd-follow {what}").start()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        return self._deliver(self._items.get())

    def next(self, timeout: Optional[float] = None) -> T:
        """The next item, waiting up to timeout seconds (None: for ever); raises
        queue.Empty when none came in time, StopIteration once closed."""
        return self._deliver(self._items.get(timeout=timeout))

    def _deliver(self, item: object) -> T:
        if item is _END:
            self._items.put(_END)  # for the next reader too
            raise StopIteration
        if isinstance(item, LockdError):
            self._items.put(_END)
            raise item
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Stops following."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            call, self._call = self._call, None
            self._mu.notify_all()
        if call is not None:
            call.cancel()
        self._items.put(_END)

    def __enter__(self) -> "Follow[T]":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self) -> None:
        backoff = 0.0
        while True:
            with self._mu:
                if self._closed or self._transport.closed:
                    break
                target = self._transport.current
                try:
                    call = self._open_call(self._transport.stubs[target], self._transport.metadata())
                except ValueError:  # the channel was closed
                    break
                self._call = call
            code, details = grpc.StatusCode.UNAVAILABLE, f"{self._what} stream ended"
            try:
                for r in call:
                    backoff = 0.0
                    item = self._accept(r)
                    if item is not Follow.SKIP:
                        self._items.put(item)
            except grpc.RpcError as e:
                code, details = e.code(), e.details()
            with self._mu:
                if self._closed:
                    return
                if code in FATAL:
                    self._closed = True
                    self._items.put(LockdError(f"{self._what} on {self._transport.targets[target]}", code, details))
                    return
                self._transport.failed(target)
                backoff = min(max(backoff * 2, 0.025), 1.0)
                self._mu.wait(backoff / 2 + random.random() * backoff / 2)
        self.close()
