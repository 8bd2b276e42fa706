"""An application using lockd-client as installed from its wheel: test_package
runs it in a virtualenv of its own against a lockd at LOCKD_ADDR."""

import os
import sys
from importlib import metadata

import grpc

import lockd
from lockd import Client, LockdError

dist = metadata.distribution("lockd-client")
print(f"installed lockd-client {dist.version} ({dist.metadata['License']}) at {os.path.dirname(lockd.__file__)}")
assert dist.version == lockd.__version__, (dist.version, lockd.__version__)

with Client([os.environ.get("LOCKD_ADDR", "127.0.0.1:50051")], default_ttl=5) as client:
    with client.acquire("consumer/orders/42") as lease:
        busy = client.try_acquire("consumer/orders/42", owner="someone else")
        print(f"holding {lease.key} ({lease.mode}) with fencing token {lease.fencing_token}; a second owner got it: {busy is not None}")
    with client.acquire_permit("consumer/upstream", 2) as permit:
        print(f"permit: {permit.mode}")
    with client.campaign("consumer/scheduler", "py-1") as leader:
        leader.proclaim("py-1:8080")
        seen = client.leader("consumer/scheduler")
        print(f"leader {seen.value} in term {'matching' if seen.term == leader.term else 'other'}")
    print(f"leader after resigning: {client.leader('consumer/scheduler')}")
    try:
        client.try_acquire("")
    except LockdError as e:
        print(f"empty key: {e.code.name}")
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT
sys.exit(0)
