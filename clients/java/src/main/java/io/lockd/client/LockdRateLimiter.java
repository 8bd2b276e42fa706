package io.lockd.client;

import com.google.protobuf.Duration;
import io.grpc.Status;
import io.lockd.v1.RateLimitServiceGrpc;
import io.lockd.v1.TakeRequest;
import io.lockd.v1.TakeResponse;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * LockdRateLimiter is one fleet-wide rate limiter (lockd.v1.RateLimitService), in the manner of
 * Guava's {@code RateLimiter}: every process that takes from the same key with the same {@link
 * Rate} shares one budget, judged by Redis's clock.
 *
 * <pre>{@code
 * LockdRateLimiter send = lockd.rateLimiter("wechat/message/custom/send",
 *     Rate.of(600, Duration.ofMinutes(1)).withBurst(10));
 * send.acquire();          // waits its turn, then go ahead
 * callWeChat();
 * }</pre>
 *
 * <p>{@link #take} decides at once; {@link #acquire} waits for the caller's turn, which lockd keeps
 * among the waiters (served in order, without polling); {@link #tryAcquire} waits only as long as
 * given and answers at once when the turn would come later. Each call carries a request_id, so a
 * retry on another replica gets the first attempt's decision instead of spending twice.
 */
public final class LockdRateLimiter {
  private static final long MAX_WAIT_CHUNK = TimeUnit.SECONDS.toNanos(60);

  private final Transport transport;
  private final String key;
  private final Rate rate;

  LockdRateLimiter(Transport transport, String key, Rate rate) {
    this.transport = transport;
    this.key = Objects.requireNonNull(key, "key");
    this.rate = Objects.requireNonNull(rate, "rate");
  }

  /** The limiter's key. */
  public String key() {
    return key;
  }

  /** The limiter's rate. */
  public Rate rate() {
    return rate;
  }

  /** Spends one if the rate allows it now; not allowed is a decision, not an exception. */
  public Decision take() {
    return take(1);
  }

  /** Spends cost (at most the burst) if the rate allows it now. */
  public Decision take(int cost) {
    try {
      return call(cost, 0);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new LockdException("Take " + key + " interrupted", Status.CANCELLED.withCause(e));
    }
  }

  /** Spends one, waiting for its turn as long as it takes. */
  public void acquire() throws InterruptedException {
    acquire(1);
  }

  /** Spends cost, waiting for its turn as long as it takes. */
  public void acquire(int cost) throws InterruptedException {
    while (true) {
      Decision d = call(cost, MAX_WAIT_CHUNK);
      if (d.allowed()) {
        return;
      }
      // The turn is further away than a wait lockd grants at once: ask again once it is near.
      long sleep = d.retryAfter().toNanos() - MAX_WAIT_CHUNK / 2;
      if (sleep > 0) {
        TimeUnit.NANOSECONDS.sleep(sleep);
      }
    }
  }

  /**
   * Spends cost if its turn comes within timeout, waiting for it; when the turn would come later,
   * answers not allowed at once (with when it would come).
   */
  public Decision tryAcquire(int cost, long timeout, TimeUnit unit) throws InterruptedException {
    return call(cost, Math.max(0, unit.toNanos(timeout)));
  }

  private Decision call(int cost, long waitNanos) throws InterruptedException {
    if (cost < 1) {
      throw new IllegalArgumentException("a take's cost must be at least 1, got " + cost);
    }
    String requestId = UUID.randomUUID().toString();
    TakeResponse r =
        transport.call(
            "Take " + key,
            RateLimitServiceGrpc.getTakeMethod(),
            left ->
                TakeRequest.newBuilder()
                    .setKey(key)
                    .setLimit(rate.limit())
                    .setPeriod(LockdClient.proto(rate.period()))
                    .setBurst(rate.burstField())
                    .setCost(cost)
                    .setWaitTimeout(LockdClient.proto(waitNanos > 0 ? left : 0))
                    .setRequestId(requestId)
                    .build(),
            waitNanos);
    return new Decision(
        r.getAllowed(), r.getRemaining(), duration(r.getRetryAfter()), duration(r.getResetAfter()));
  }

  private static java.time.Duration duration(Duration d) {
    return java.time.Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }
}
