package io.lockd.client;

import com.google.protobuf.Timestamp;
import io.grpc.Status;
import io.lockd.v1.GetAccessTokenRequest;
import io.lockd.v1.GetAccessTokenResponse;
import io.lockd.v1.RefreshAccessTokenRequest;
import io.lockd.v1.RefreshAccessTokenResponse;
import io.lockd.v1.TokenServiceGrpc;
import java.time.Instant;

/**
 * TokenClient asks lockd for apps' fleet-wide WeChat or WeCom access_tokens
 * (lockd.v1.TokenService). Calls are retried on another target when one is unavailable.
 */
public final class TokenClient {
  private final Transport transport;

  TokenClient(Transport transport) {
    this.transport = transport;
  }

  /**
   * The app's current access_token.
   *
   * @throws LockdException NOT_FOUND for an unknown app, FAILED_PRECONDITION when the upstream
   *     rejects the app's credentials, RESOURCE_EXHAUSTED on quota, UNAVAILABLE when the upstream
   *     or Redis stays unreachable
   */
  public AccessToken getAccessToken(String app) {
    GetAccessTokenResponse r =
        call(
            "GetAccessToken " + app,
            () ->
                transport.call(
                    "GetAccessToken " + app,
                    TokenServiceGrpc.getGetAccessTokenMethod(),
                    left -> GetAccessTokenRequest.newBuilder().setApp(app).build(),
                    0));
    return new AccessToken(r.getAccessToken(), instant(r.getExpireTime()));
  }

  /**
   * Reports a token the upstream rejected (errcode 40001 or 42001) and returns the one to use from
   * now on: the cached one if it is already another, else one new token minted for all reporters.
   */
  public AccessToken refreshAccessToken(String app, String invalidToken) {
    RefreshAccessTokenResponse r =
        call(
            "RefreshAccessToken " + app,
            () ->
                transport.call(
                    "RefreshAccessToken " + app,
                    TokenServiceGrpc.getRefreshAccessTokenMethod(),
                    left ->
                        RefreshAccessTokenRequest.newBuilder()
                            .setApp(app)
                            .setInvalidToken(invalidToken)
                            .build(),
                    0));
    return new AccessToken(r.getAccessToken(), instant(r.getExpireTime()));
  }

  private interface Call<T> {
    T run() throws InterruptedException;
  }

  private static <T> T call(String what, Call<T> c) {
    try {
      return c.run();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new LockdException(what + " interrupted", Status.CANCELLED.withCause(e));
    }
  }

  private static Instant instant(Timestamp t) {
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }
}
