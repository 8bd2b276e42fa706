package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class LeaseTest {
  static Processes.Redis redis;
  static Processes.Lockd lockd;
  static LockdClient a;
  static LockdClient b;

  @BeforeAll
  static void start() throws Exception {
    redis = Processes.Redis.start();
    lockd = Processes.Lockd.start(redis);
    a = LockdClient.builder().target(lockd.addr).build();
    b = LockdClient.builder().target(lockd.addr).build();
  }

  @AfterAll
  static void stop() throws Exception {
    a.close();
    b.close();
    lockd.close();
    redis.close();
  }

  static String key(String name) {
    return "java/" + name + "/" + UUID.randomUUID();
  }

  @Test
  void everyNewLeaseGetsAGreaterFencingToken() throws Exception {
    String k = key("fencing");
    long first;
    try (Lease l = a.acquire(k)) {
      assertEquals(k, l.key());
      assertEquals(LeaseOptions.Mode.WRITE, l.mode());
      assertEquals(1, l.holdCount());
      assertTrue(l.isHeld());
      first = l.fencingToken();
    }
    try (Lease l = b.acquire(k)) {
      assertTrue(
          Long.compareUnsigned(l.fencingToken(), first) > 0,
          l.fencingToken() + " after " + first);
    }
  }

  @Test
  void aBusyKeyIsNotGrantedAndCloseFreesItAtOnce() throws Exception {
    String k = key("busy");
    Lease held = a.tryAcquire(k, Duration.ZERO).orElseThrow();
    assertTrue(b.tryAcquire(k, Duration.ZERO).isEmpty());
    assertTrue(b.tryAcquire(k, Duration.ofMillis(300)).isEmpty());
    held.close();
    assertFalse(held.isHeld());
    assertTrue(held.lost().isCancelled(), "a closed lease is not reported lost");
    try (Lease l = b.tryAcquire(k, Duration.ZERO).orElseThrow()) {
      assertNotEquals(held.leaseId(), l.leaseId());
    }
  }

  @Test
  void aWaiterIsGrantedWhenTheHolderCloses() throws Exception {
    String k = key("wait");
    Lease held = a.acquire(k);
    CountDownLatch asking = new CountDownLatch(1);
    CompletableFuture<Optional<Lease>> waiter =
        CompletableFuture.supplyAsync(
            () -> {
              asking.countDown();
              try {
                return b.tryAcquire(k, Duration.ofSeconds(60));
              } catch (InterruptedException e) {
                throw new IllegalStateException(e);
              }
            });
    asking.await();
    assertFalse(waiter.isDone() && waiter.get().isPresent() && held.isHeld());
    held.close();
    try (Lease l = waiter.get(60, TimeUnit.SECONDS).orElseThrow()) {
      assertTrue(Long.compareUnsigned(l.fencingToken(), held.fencingToken()) > 0);
    }
  }

  @Test
  void aLeaseGrantedAfterAWaitLongerThanItsTtlIsHeld() throws Exception {
    String k = key("long-wait");
    Lease held = a.acquire(k);
    CompletableFuture<Optional<Lease>> waiter =
        CompletableFuture.supplyAsync(
            () -> {
              try {
                return b.tryAcquire(k, Duration.ofSeconds(60), LeaseOptions.write().ttl(Duration.ofSeconds(1)));
              } catch (InterruptedException e) {
                throw new IllegalStateException(e);
              }
            });
    Thread.sleep(2500); // the waiter waits longer than its lease's ttl
    held.close();
    try (Lease l = waiter.get(60, TimeUnit.SECONDS).orElseThrow()) {
      Thread.sleep(2500);
      assertTrue(l.isHeld(), "lost: " + l.lost().getNow(null));
      assertTrue(a.tryAcquire(k, Duration.ZERO).isEmpty());
    }
  }

  @Test
  void keepAliveHoldsTheLeasePastItsTtl() throws Exception {
    String k = key("keepalive");
    try (Lease l = a.acquire(k, LeaseOptions.write().ttl(Duration.ofSeconds(2)))) {
      Thread.sleep(5000);
      assertTrue(l.isHeld());
      assertFalse(l.lost().isDone());
      assertTrue(b.tryAcquire(k, Duration.ZERO).isEmpty());
      assertEquals(Duration.ofSeconds(2), l.ttl());
    }
  }

  @Test
  void readLeasesShareTheKeyAndKeepWritersOut() throws Exception {
    String k = key("read");
    try (Lease r1 = a.acquire(k, LeaseOptions.read());
        Lease r2 = b.tryAcquire(k, Duration.ZERO, LeaseOptions.read()).orElseThrow()) {
      assertEquals(LeaseOptions.Mode.READ, r1.mode());
      assertEquals(LeaseOptions.Mode.READ, r2.mode());
      assertTrue(b.tryAcquire(k, Duration.ZERO).isEmpty());
    }
    b.tryAcquire(k, Duration.ZERO).orElseThrow().close();
  }

  @Test
  void theSameOwnerReentersItsLease() throws Exception {
    String k = key("reenter");
    LeaseOptions o = LeaseOptions.write().owner("billing-1");
    Lease first = a.acquire(k, o);
    Lease second = a.acquire(k, o);
    assertEquals(first.leaseId(), second.leaseId());
    assertEquals(first.fencingToken(), second.fencingToken());
    assertEquals(2, second.holdCount());
    assertEquals("billing-1", first.owner());
    first.close();
    assertTrue(b.tryAcquire(k, Duration.ZERO).isEmpty(), "one hold is left");
    second.close();
    b.tryAcquire(k, Duration.ZERO).orElseThrow().close();
  }

  @Test
  void badInputIsReportedWithItsStatus() {
    LockdException e =
        assertThrows(LockdException.class, () -> a.tryAcquire("bad\u0001key", Duration.ZERO));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
    LockdException ttl =
        assertThrows(
            LockdException.class,
            () -> a.tryAcquire(key("ttl"), Duration.ZERO, LeaseOptions.write().ttl(Duration.ofNanos(1))));
    assertEquals(Status.Code.INVALID_ARGUMENT, ttl.code());
  }

  @Test
  void closingTheClientReleasesItsLeases() throws Exception {
    String k = key("client-close");
    LockdClient c = LockdClient.builder().target(lockd.addr).build();
    Lease l = c.acquire(k);
    c.close();
    assertFalse(l.isHeld());
    b.tryAcquire(k, Duration.ZERO).orElseThrow().close();
  }
}
