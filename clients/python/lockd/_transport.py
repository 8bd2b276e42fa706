"""The connections to every lockd target, and calls that move on to the next
target on UNAVAILABLE (or when an attempt runs past its own deadline, as on a
frozen replica). Only calls that are safe to repeat go through here: lock calls
carry a request_id, so a retry never acts twice.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple, TypeVar

import grpc

from .errors import LockdError
from .v1 import election_pb2_grpc, lock_pb2_grpc, semaphore_pb2_grpc, token_pb2_grpc

T = TypeVar("T")

now = time.monotonic


@dataclass(frozen=True)
class TLS:
    """TLS to lockd: PEM file paths.

    ``ca`` is the CA bundle to trust (None: the system's); ``cert`` and
    ``key`` the client certificate for mutual TLS; ``server_name`` the name
    to expect in the server's certificate when it is not the target's host.
    """

    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    server_name: Optional[str] = None


def _read(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


class Stubs:
    """Stubs are the gRPC stubs of one target."""

    def __init__(self, channel: grpc.Channel):
        self.locks = lock_pb2_grpc.LockServiceStub(channel)
        self.tokens = token_pb2_grpc.TokenServiceStub(channel)
        self.elections = election_pb2_grpc.ElectionServiceStub(channel)
        self.semaphores = semaphore_pb2_grpc.SemaphoreServiceStub(channel)


class Transport:
    """Transport holds a channel per target and the retry policy."""

    def __init__(
        self,
        targets: Sequence[str],
        token: Optional[str],
        token_file: Optional[str],
        tls: Optional[TLS],
        call_timeout: float,
        retry_timeout: float,
    ):
        if isinstance(targets, str):
            targets = [targets]
        if not targets:
            raise ValueError('no target: pass ["127.0.0.1:50051"]')
        if call_timeout <= 0 or retry_timeout <= 0:
            raise ValueError("call_timeout and retry_timeout must be positive")
        self.targets: List[str] = list(targets)
        options: List[Tuple[str, object]] = []
        if tls is not None:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls.ca),
                private_key=_read(tls.key),
                certificate_chain=_read(tls.cert),
            )
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            self.channels = [grpc.secure_channel(t, creds, options) for t in self.targets]
        else:
            self.channels = [grpc.insecure_channel(t, options) for t in self.targets]
        self.stubs = [Stubs(c) for c in self.channels]
        self.call_timeout = call_timeout
        self.retry_timeout = retry_timeout
        self._token = token
        self._token_file = token_file
        self._token_read: Optional[float] = None
        self._token_from_file: Optional[str] = None
        self._mu = threading.Lock()
        self.current = 0
        self.closed = False

    def metadata(self) -> List[Tuple[str, str]]:
        """The call's metadata: the bearer token, re-read from token_file when it changed."""
        token = self._token
        if self._token_file:
            with self._mu:
                mtime = os.stat(self._token_file).st_mtime_ns
                if mtime != self._token_read:
                    with open(self._token_file, encoding="utf-8") as f:
                        self._token_from_file = f.read().strip()
                    self._token_read = mtime
                token = self._token_from_file
        return [("authorization", f"Bearer {token}")] if token else []

    def failed(self, i: int) -> None:
        """Moves calls off target i, unless another failure moved them already."""
        with self._mu:
            if self.current == i:
                self.current = (i + 1) % len(self.targets)

    def call(
        self,
        what: str,
        method: Callable[[Stubs], Callable[..., T]],
        request: Callable[[float], object],
        wait: float = 0.0,
    ) -> T:
        """Makes method(request(remaining_wait)), retrying as above until wait plus
        the retry timeout has passed."""
        start = now()
        wait_end = start + wait
        give_up = wait_end + self.retry_timeout
        backoff = 0.025
        while True:
            if self.closed:
                raise LockdError(what, grpc.StatusCode.CANCELLED, "the client is closed")
            target = self.current
            t = now()
            remaining = max(0.0, wait_end - t)
            deadline = max(min(give_up - t, remaining + self.call_timeout), 0.001)
            try:
                return method(self.stubs[target])(
                    request(remaining), timeout=deadline, metadata=self.metadata()
                )
            except grpc.RpcError as e:
                code, details = e.code(), e.details()
            attempt_timed_out = code == grpc.StatusCode.DEADLINE_EXCEEDED and now() < give_up
            if code != grpc.StatusCode.UNAVAILABLE and not attempt_timed_out:
                raise LockdError(f"{what} on {self.targets[target]}", code, details) from None
            self.failed(target)
            sleep = backoff / 2 + random.random() * (backoff / 2)
            if now() + sleep >= give_up:
                raise LockdError(
                    f"{what} on {self.targets[target]} (retries exhausted)", code, details
                ) from None
            time.sleep(sleep)
            backoff = min(backoff * 2, 1.0)

    def close(self) -> None:
        """Closes every channel; calls made after fail with CANCELLED."""
        self.closed = True
        for c in self.channels:
            c.close()
