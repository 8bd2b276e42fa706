"""lockd's Python client: leases that keep themselves alive and report their
loss, semaphores, leader election and access tokens, over gRPC.

    from lockd import Client

    with Client(["127.0.0.1:50051"]) as lockd:
        with lockd.acquire("orders/42") as lease:
            charge(order=42, fencing_token=lease.fencing_token)

lockd.v1 holds the generated messages and stubs of lockd's wire API.
"""

from ._election import LeaderInfo, Leadership
from ._lease import Lease
from ._stream import Follow
from ._transport import TLS
from .client import Client
from .errors import LeaseLost, LockdError
from .tokens import AccessToken, TokenClient

__version__ = "0.1.0"

__all__ = [
    "AccessToken",
    "Client",
    "Follow",
    "LeaderInfo",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LockdError",
    "TLS",
    "TokenClient",
]
