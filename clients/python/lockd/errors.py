"""Errors raised by lockd's Python client."""

from __future__ import annotations

from typing import Optional

import grpc


class LockdError(Exception):
    """LockdError is a call to lockd that failed, after any retries.

    ``code`` is the gRPC status code (a ``grpc.StatusCode``) and ``details``
    the message lockd sent with it.
    """

    def __init__(self, message: str, code: grpc.StatusCode, details: Optional[str] = None):
        text = f"{message}: {code.name}" + (f" {details}" if details else "")
        super().__init__(text)
        self.code = code
        self.details = details


class LeaseLost(LockdError):
    """LeaseLost says a lease (or a leadership) is no longer held.

    It is reported before anyone else can be granted the key: when lockd ends
    the KeepAlive (or Campaign) stream with NOT_FOUND, or when no renewal was
    confirmed before the lease could run out. Releasing a lost lease raises
    it, since the work it guarded may have overlapped another holder's.
    """

    def __init__(self, key: str, reason: str):
        super().__init__(f"lease on {key} lost", grpc.StatusCode.NOT_FOUND, reason)
        self.key = key
        self.reason = reason
