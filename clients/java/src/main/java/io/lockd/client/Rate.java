package io.lockd.client;

import java.time.Duration;
import java.util.Objects;

/**
 * Rate is a fleet-wide rate limit (lockd.v1.RateLimitService): for a key, in any window of length
 * t, at most {@code burst + limit × t / period} cost is allowed, however many processes take from
 * it. Every caller of a key must give the same rate while the key's limiter is in use ({@code
 * FAILED_PRECONDITION} otherwise), so a misconfigured caller cannot widen a limit.
 *
 * <pre>{@code
 * Rate wechat = Rate.of(600, Duration.ofMinutes(1)).withBurst(10);
 * }</pre>
 */
public final class Rate {
  private final int limit;
  private final Duration period;
  private final int burst;

  private Rate(int limit, Duration period, int burst) {
    this.limit = limit;
    this.period = period;
    this.burst = burst;
  }

  /** At most limit cost per period, in bursts of up to limit. */
  public static Rate of(int limit, Duration period) {
    if (limit < 1) {
      throw new IllegalArgumentException("a rate's limit must be at least 1, got " + limit);
    }
    if (Objects.requireNonNull(period, "period").isNegative() || period.isZero()) {
      throw new IllegalArgumentException("a rate's period must be positive, got " + period);
    }
    return new Rate(limit, period, 0);
  }

  /** This rate with bursts of up to burst cost (an idle limiter allows that much at once). */
  public Rate withBurst(int burst) {
    if (burst < 1) {
      throw new IllegalArgumentException("a rate's burst must be at least 1, got " + burst);
    }
    return new Rate(limit, period, burst);
  }

  /** How much cost is allowed per period. */
  public int limit() {
    return limit;
  }

  /** The span the limit applies to. */
  public Duration period() {
    return period;
  }

  /** How much cost an idle limiter allows at once. */
  public int burst() {
    return burst == 0 ? limit : burst;
  }

  int burstField() {
    return burst;
  }

  @Override
  public String toString() {
    return limit + " per " + period + ", burst " + burst();
  }
}
