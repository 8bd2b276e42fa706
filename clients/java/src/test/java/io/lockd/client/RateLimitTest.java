package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Fleet-wide rate limits against real lockd and redis-server processes. */
class RateLimitTest {
  static String key(String what) {
    return "java/ratelimit/" + what + "/" + UUID.randomUUID();
  }

  /** Two clients on two replicas share one budget; waiting gets the next turn. */
  @Test
  void takeAndAcquireShareOneBudget() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd la = Processes.Lockd.start(redis);
        Processes.Lockd lb = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(la.addr).build();
        LockdClient b = LockdClient.builder().target(lb.addr).build()) {
      String k = key("share");
      Rate rate = Rate.of(20, Duration.ofMinutes(1)).withBurst(2); // a turn every 3s
      LockdRateLimiter ra = a.rateLimiter(k, rate);
      LockdRateLimiter rb = b.rateLimiter(k, rate);

      Decision first = ra.take();
      assertTrue(first.allowed(), first.toString());
      assertEquals(1, first.remaining());
      Decision second = rb.take();
      assertTrue(second.allowed(), second.toString());
      assertEquals(0, second.remaining());
      Decision third = ra.take();
      assertFalse(third.allowed(), third.toString());
      assertTrue(
          third.retryAfter().compareTo(Duration.ZERO) > 0
              && third.retryAfter().compareTo(Duration.ofSeconds(3)) <= 0,
          third.toString());

      rb.acquire(); // waits for the next turn

      // A turn beyond the timeout is refused at once, saying when it would come.
      Decision late = ra.tryAcquire(2, 1, TimeUnit.SECONDS);
      assertFalse(late.allowed(), late.toString());
      assertTrue(late.retryAfter().compareTo(Duration.ofSeconds(1)) > 0, late.toString());
      Decision soon = ra.tryAcquire(1, 30, TimeUnit.SECONDS);
      assertTrue(soon.allowed(), soon.toString());

      LockdException e =
          assertThrows(
              LockdException.class, () -> a.rateLimiter(k, Rate.of(40, Duration.ofMinutes(1))).take());
      assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
      assertThrows(IllegalArgumentException.class, () -> ra.take(0));
      assertThrows(IllegalArgumentException.class, () -> Rate.of(0, Duration.ofSeconds(1)));
    }
  }

  /** A replica that is down is left for the next: the take is decided there. */
  @Test
  void takeMovesToAReplicaThatAnswers() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis);
        LockdClient c =
            LockdClient.builder()
                .target("127.0.0.1:" + Processes.freePort())
                .target(lockd.addr)
                .build()) {
      Decision d = c.rateLimiter(key("failover"), Rate.of(3, Duration.ofHours(1))).take();
      assertTrue(d.allowed(), d.toString());
      assertEquals(2, d.remaining());
    }
  }
}
