package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** Semaphores against real lockd and redis-server processes. */
class SemaphoreTest {
  static String key(String what) {
    return "java/semaphore/" + what + "/" + UUID.randomUUID();
  }

  @Test
  void permitsCappedAtTheLimit() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(8);
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd la = Processes.Lockd.start(redis);
        Processes.Lockd lb = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(la.addr).build();
        LockdClient b = LockdClient.builder().target(lb.addr).build()) {
      String k = key("cap");
      AtomicInteger in = new AtomicInteger();
      AtomicInteger most = new AtomicInteger();
      List<Future<?>> done = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        LockdSemaphore sem = (i % 2 == 0 ? a : b).asSemaphore(k, 3);
        done.add(
            pool.submit(
                () -> {
                  for (int round = 0; round < 3; round++) {
                    sem.acquire();
                    most.accumulateAndGet(in.incrementAndGet(), Math::max);
                    Thread.sleep(5);
                    in.decrementAndGet();
                    sem.release();
                  }
                  return null;
                }));
      }
      for (Future<?> f : done) {
        f.get(120, TimeUnit.SECONDS);
      }
      assertTrue(most.get() <= 3 && most.get() >= 1, "held at once: " + most.get());

      String full = key("full");
      List<Lease> held = new ArrayList<>();
      for (int i = 0; i < 2; i++) {
        Lease p = a.acquirePermit(full, 2);
        assertEquals(LeaseOptions.Mode.PERMIT, p.mode());
        held.add(p);
      }
      assertTrue(Long.compareUnsigned(held.get(1).fencingToken(), held.get(0).fencingToken()) > 0);
      assertEquals(Optional.empty(), b.tryAcquirePermit(full, 2, Duration.ZERO));
      LockdSemaphore sem = b.asSemaphore(full, 2);
      assertFalse(sem.tryAcquire(100, TimeUnit.MILLISECONDS));
      LockdException e = assertThrows(LockdException.class, () -> b.tryAcquirePermit(full, 3, Duration.ZERO));
      assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
      assertThrows(IllegalArgumentException.class, () -> b.asSemaphore(full, 0));
      assertThrows(IllegalStateException.class, sem::release);
      held.get(0).close();
      assertTrue(sem.tryAcquire(30, TimeUnit.SECONDS));
      assertEquals(1, sem.heldPermits());
      sem.release();
      held.get(1).close();
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * A holder killed outright (a lockd lock -n process, SIGKILL) gives its permit back once its ttl
   * runs out (killed uncleanly, lockd lock does not release it: CMD's processes may still run until
   * its guardian has stopped them): a waiting client gets it. A permit lost behind its holder's back
   * is signalled.
   */
  @Test
  void crashedHoldersPermitComesBack() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis);
        LockdClient c = LockdClient.builder().target(lockd.addr).build()) {
      String k = key("crash");
      Path up = Files.createTempFile("lockd-java-permit-", ".up");
      Files.delete(up);
      Processes.Server holder =
          new Processes.Server(
              List.of(
                  Processes.lockdBinary().toString(), "lock", "--addr=" + lockd.addr, "-n", "1",
                  "--ttl=5s", k, "--", "sh", "-c", "touch " + up + "; exec sleep 600"),
              "holder") {};
      try (holder) {
        Processes.Server.waitUntil("lockd lock -n 1", holder, () -> Files.exists(up));
        assertEquals(Optional.empty(), c.tryAcquirePermit(k, 1, Duration.ZERO));
        holder.kill();
        Lease p =
            c.tryAcquirePermit(k, 1, Duration.ofSeconds(20), LeaseOptions.write().ttl(Duration.ofSeconds(2)))
                .orElseThrow();
        // Taken back behind the holder's back: the loss is signalled.
        c.release(k, p.leaseId());
        p.lost().get(60, TimeUnit.SECONDS);
        assertFalse(p.isHeld());
      } finally {
        Files.deleteIfExists(up);
      }
    }
  }
}
