package io.lockd.client;

import java.time.Duration;

/** Decision is a rate limiter's answer to a take. */
public final class Decision {
  private final boolean allowed;
  private final int remaining;
  private final Duration retryAfter;
  private final Duration resetAfter;

  Decision(boolean allowed, int remaining, Duration retryAfter, Duration resetAfter) {
    this.allowed = allowed;
    this.remaining = remaining;
    this.retryAfter = retryAfter;
    this.resetAfter = resetAfter;
  }

  /** True when the cost was spent: go ahead. */
  public boolean allowed() {
    return allowed;
  }

  /** How much more cost the limiter would allow at once. */
  public int remaining() {
    return remaining;
  }

  /**
   * When not allowed, how long until the cost would be allowed if nobody else took from the key
   * meanwhile; zero when allowed.
   */
  public Duration retryAfter() {
    return retryAfter;
  }

  /** How long until the limiter is full again. */
  public Duration resetAfter() {
    return resetAfter;
  }

  @Override
  public String toString() {
    return allowed
        ? "allowed, " + remaining + " remaining"
        : "not allowed, retry after " + retryAfter;
  }
}
