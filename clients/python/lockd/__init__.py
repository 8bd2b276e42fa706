"""lockd's Python client: leases that keep themselves alive and report their
loss, semaphores, leader election, fleet-wide rate limits and access tokens,
over gRPC.

    from lockd import Client, Rate

    with Client(["127.0.0.1:50051"]) as lockd:
        with lockd.acquire("orders/42") as lease:
            charge(order=42, fencing_token=lease.fencing_token)
        # At most 600 calls a minute across the fleet: wait for this one's turn.
        lockd.wait("wechat/message/custom/send", Rate(600, 60))
        send_message()

lockd.v1 holds the generated messages and stubs of lockd's wire API.
"""

from ._election import LeaderInfo, Leadership
from ._lease import Lease
from ._ratelimit import Decision, Rate
from ._stream import Follow
from ._transport import TLS
from .client import Client
from .errors import LeaseLost, LockdError, RateLimited
from .tokens import AccessToken, TokenClient

__version__ = "0.1.0"

__all__ = [
    "AccessToken",
    "Client",
    "Decision",
    "Follow",
    "LeaderInfo",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LockdError",
    "Rate",
    "RateLimited",
    "TLS",
    "TokenClient",
]
