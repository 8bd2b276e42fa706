package io.lockd.client;

import java.time.Instant;
import java.util.Objects;

/** AccessToken is an app's WeChat or WeCom access_token as lockd serves it. */
public final class AccessToken {
  private final String token;
  private final Instant expireTime;

  AccessToken(String token, Instant expireTime) {
    this.token = Objects.requireNonNull(token);
    this.expireTime = Objects.requireNonNull(expireTime);
  }

  /** The access_token to send to the upstream API. */
  public String token() {
    return token;
  }

  /** When the upstream stops accepting the token. */
  public Instant expireTime() {
    return expireTime;
  }

  /** Prints the expiry only, never the token. */
  @Override
  public String toString() {
    return "AccessToken{expireTime=" + expireTime + "}";
  }
}
