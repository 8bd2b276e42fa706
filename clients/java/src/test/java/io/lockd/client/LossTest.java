package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * A lease's loss is signalled before anyone else is granted its key. Both sides run on this
 * machine, so the loss (read from the wall clock when the callback runs) and the other owner's
 * grant (by Redis's clock, the same wall clock) are compared on one clock.
 */
class LossTest {
  static final Duration TTL = Duration.ofSeconds(2);

  /** Records when the loss callback ran. */
  static AtomicReference<Instant> recordLoss(Lease lease) {
    AtomicReference<Instant> at = new AtomicReference<>();
    lease.onLost(e -> at.set(Instant.now()));
    return at;
  }

  static CompletableFuture<Lease> waitFor(LockdClient c, String key) {
    return CompletableFuture.supplyAsync(
        () -> {
          try {
            return c.tryAcquire(key, Duration.ofSeconds(90)).orElseThrow();
          } catch (InterruptedException e) {
            throw new IllegalStateException(e);
          }
        });
  }

  @Test
  void redisFrozenPastTheLease() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(lockd.addr).defaultTtl(TTL).build();
        LockdClient b =
            LockdClient.builder().target(lockd.addr).retryTimeout(Duration.ofSeconds(90)).build()) {
      String k = "java/loss/redis/" + UUID.randomUUID();
      Lease lease = a.acquire(k);
      AtomicReference<Instant> lostAt = recordLoss(lease);

      // Renewals cannot reach Redis; another owner waits meanwhile.
      redis.freeze();
      CompletableFuture<Lease> other = waitFor(b, k);
      Thread.sleep(TTL.multipliedBy(2).toMillis());
      redis.resume();

      Lease next = other.get(120, TimeUnit.SECONDS);
      LeaseLostException why = lease.lost().get(10, TimeUnit.SECONDS);
      assertNotNull(lostAt.get(), "the loss callback ran");
      assertTrue(
          lostAt.get().isBefore(next.grantTime()),
          "lost at " + lostAt.get() + ", next owner granted at " + next.grantTime());
      assertFalse(lease.isHeld());
      assertThrows(LeaseLostException.class, lease::checkHeld);
      assertEquals(k, why.key());
      assertTrue(Long.compareUnsigned(next.fencingToken(), lease.fencingToken()) > 0);
      // Closing a lost lease is an error: the work it guarded may have overlapped the next
      // owner's. Closing it again does nothing.
      assertSame(why, assertThrows(LeaseLostException.class, lease::close));
      lease.close();
      next.close();
    }
  }

  @Test
  void replicaCutOffFromTheClient() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd cutOff = Processes.Lockd.start(redis);
        Processes.Lockd other = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(cutOff.addr).defaultTtl(TTL).build();
        LockdClient b = LockdClient.builder().target(other.addr).build()) {
      String k = "java/loss/cut-off/" + UUID.randomUUID();
      LockdLock lock = a.asLock(k);
      lock.lock();
      Lease lease = lock.lease();
      AtomicReference<Instant> lostAt = recordLoss(lease);

      // The only replica a knows answers nothing: lockd cannot tell the client, so the client's
      // own deadline must. b's replica grants the key once the lease runs out in Redis.
      cutOff.freeze();
      Lease next = waitFor(b, k).get(120, TimeUnit.SECONDS);
      lease.lost().get(10, TimeUnit.SECONDS);
      assertNotNull(lostAt.get(), "the loss callback ran");
      assertTrue(
          lostAt.get().isBefore(next.grantTime()),
          "lost at " + lostAt.get() + ", next owner granted at " + next.grantTime());
      assertFalse(lock.isHeldByCurrentThread());
      assertThrows(LeaseLostException.class, lock::lock, "re-entering a lost lock");
      IllegalMonitorStateException e = assertThrows(IllegalMonitorStateException.class, lock::unlock);
      assertTrue(e.getCause() instanceof LeaseLostException);
      assertEquals(0, lock.getHoldCount());
      next.close();
      cutOff.resume();
    }
  }
}
