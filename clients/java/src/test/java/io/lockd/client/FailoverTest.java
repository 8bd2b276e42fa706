package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Several lockd replicas on one Redis: a lease outlives the replica it was granted on. */
class FailoverTest {
  static final Duration TTL = Duration.ofSeconds(2);
  static Processes.Redis redis;

  @BeforeAll
  static void start() throws Exception {
    redis = Processes.Redis.start();
  }

  @AfterAll
  static void stop() {
    redis.close();
  }

  @Test
  void aLeaseSurvivesItsReplicaDrainingAndTheNextBeingKilled() throws Exception {
    try (Processes.Lockd first = Processes.Lockd.start(redis);
        Processes.Lockd second = Processes.Lockd.start(redis);
        Processes.Lockd third = Processes.Lockd.start(redis);
        LockdClient c =
            LockdClient.builder()
                .targets(List.of(first.addr, second.addr, third.addr))
                .defaultTtl(TTL)
                .build();
        LockdClient other = LockdClient.builder().target(third.addr).build()) {
      String k = "java/failover/" + UUID.randomUUID();
      Lease lease = c.acquire(k);

      first.terminate(); // drains: its KeepAlive streams end UNAVAILABLE, the lease stays
      Thread.sleep(TTL.multipliedBy(2).toMillis());
      assertTrue(lease.isHeld(), "kept alive on the second replica");
      assertTrue(other.tryAcquire(k, Duration.ZERO).isEmpty());

      second.kill(); // no goodbye at all
      Thread.sleep(TTL.multipliedBy(2).toMillis());
      assertTrue(lease.isHeld(), "kept alive on the third replica");
      assertFalse(lease.lost().isDone());
      assertTrue(other.tryAcquire(k, Duration.ZERO).isEmpty());
      assertEquals(1, lease.holdCount());

      lease.close(); // released through the third replica
      other.tryAcquire(k, Duration.ZERO).orElseThrow().close();
    }
  }

  @Test
  void callsMoveOnFromDeadAndFrozenReplicas() throws Exception {
    String dead = "127.0.0.1:" + Processes.freePort();
    try (Processes.Lockd frozen = Processes.Lockd.start(redis);
        Processes.Lockd alive = Processes.Lockd.start(redis);
        LockdClient c =
            LockdClient.builder()
                .targets(List.of(dead, frozen.addr, alive.addr))
                .callTimeout(Duration.ofSeconds(1))
                .build()) {
      frozen.freeze();
      String k = "java/move-on/" + UUID.randomUUID();
      try (Lease lease = c.tryAcquire(k, Duration.ZERO).orElseThrow()) {
        assertTrue(lease.isHeld());
      }
      c.tryAcquire(k, Duration.ZERO).orElseThrow().close();
      frozen.resume();
    }
  }
}
