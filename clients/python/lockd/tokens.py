"""The token client: access tokens lockd keeps for upstream APIs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ._lease import to_datetime
from ._stream import Follow
from ._transport import Transport
from .v1 import token_pb2


@dataclass(frozen=True)
class AccessToken:
    """AccessToken is an app's access token."""

    #: The token to send to the upstream API.
    access_token: str
    #: When the upstream stops accepting it.
    expire_time: datetime


class TokenClient:
    """TokenClient gets the access tokens of the apps lockd is configured with
    (``Client.tokens``). Every replica shares one token per app."""

    def __init__(self, transport: Transport):
        self._transport = transport

    def get_access_token(self, app: str) -> AccessToken:
        """The app's current token (lockd mints one when it is missing or about to expire)."""
        r = self._transport.call(
            f"GetAccessToken {app}",
            lambda s: s.tokens.GetAccessToken,
            lambda _: token_pb2.GetAccessTokenRequest(app=app),
        )
        return AccessToken(r.access_token, to_datetime(r.expire_time))

    def refresh_access_token(self, app: str, invalid_token: str) -> AccessToken:
        """Reports a token the upstream rejected (WeChat errcode 40001 or 42001) and
        returns the one to use now: the cached one if it is already another, else
        one new token minted for all reporters."""
        r = self._transport.call(
            f"RefreshAccessToken {app}",
            lambda s: s.tokens.RefreshAccessToken,
            lambda _: token_pb2.RefreshAccessTokenRequest(app=app, invalid_token=invalid_token),
        )
        return AccessToken(r.access_token, to_datetime(r.expire_time))

    def watch_access_token(self, app: str) -> "Follow[AccessToken]":
        """Follows the app's token: iterating gives the current token at once, then
        every new one as soon as any replica stores it, across replicas, so that
        nothing polls. ``close()`` it (or use it in a ``with`` block) to stop;
        iterating raises LockdError when lockd refuses (an unknown app)."""
        last: list = [None]

        def accept(r: token_pb2.WatchAccessTokenResponse) -> object:
            if r.access_token == last[0]:
                return Follow.SKIP  # the same token again, as a new stream starts
            last[0] = r.access_token
            return AccessToken(r.access_token, to_datetime(r.expire_time))

        return Follow(
            self._transport,
            f"WatchAccessToken {app}",
            lambda s, md: s.tokens.WatchAccessToken(token_pb2.WatchAccessTokenRequest(app=app), metadata=md),
            accept,
        )
