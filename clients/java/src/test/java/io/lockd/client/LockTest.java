package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReadWriteLock;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class LockTest {
  static Processes.Redis redis;
  static Processes.Lockd lockd;
  static LockdClient a;
  static LockdClient b;
  static ExecutorService pool = Executors.newCachedThreadPool();

  @BeforeAll
  static void start() throws Exception {
    redis = Processes.Redis.start();
    lockd = Processes.Lockd.start(redis);
    a = LockdClient.builder().target(lockd.addr).build();
    b = LockdClient.builder().target(lockd.addr).build();
  }

  @AfterAll
  static void stop() throws Exception {
    pool.shutdownNow();
    a.close();
    b.close();
    lockd.close();
    redis.close();
  }

  static String key(String name) {
    return "java/lock/" + name + "/" + UUID.randomUUID();
  }

  <T> T inOtherThread(java.util.concurrent.Callable<T> c) throws Exception {
    return pool.submit(c).get(60, TimeUnit.SECONDS);
  }

  @Test
  void reentrantPerThreadAndExclusiveAcrossThreads() throws Exception {
    LockdLock lock = a.asLock(key("reentrant"));
    lock.lock();
    lock.lock();
    assertEquals(2, lock.getHoldCount());
    assertTrue(lock.isHeldByCurrentThread());
    long token = lock.lease().fencingToken();
    assertFalse(inOtherThread(() -> lock.tryLock()), "another thread of the same client");
    assertFalse(inOtherThread(() -> b.asLock(lock.key()).tryLock()), "another client");
    lock.unlock();
    assertEquals(token, lock.lease().fencingToken());
    assertFalse(inOtherThread(() -> b.asLock(lock.key()).tryLock()), "one hold is left");
    lock.unlock();
    assertEquals(0, lock.getHoldCount());
    assertNull(lock.lease());
    assertTrue(
        inOtherThread(
            () -> {
              Lock other = b.asLock(lock.key());
              boolean got = other.tryLock();
              other.unlock();
              return got;
            }));
  }

  @Test
  void oneHolderAtATimeAmongManyThreadsAndClients() throws Exception {
    String k = key("exclusion");
    AtomicInteger inside = new AtomicInteger();
    AtomicInteger overlaps = new AtomicInteger();
    AtomicInteger entries = new AtomicInteger();
    List<Future<?>> workers = new ArrayList<>();
    for (int w = 0; w < 6; w++) {
      LockdLock lock = (w % 2 == 0 ? a : b).asLock(k);
      workers.add(
          pool.submit(
              () -> {
                for (int i = 0; i < 8; i++) {
                  lock.lock();
                  try {
                    if (inside.incrementAndGet() != 1) {
                      overlaps.incrementAndGet();
                    }
                    entries.incrementAndGet();
                    Thread.yield();
                    inside.decrementAndGet();
                  } finally {
                    lock.unlock();
                  }
                }
                return null;
              }));
    }
    for (Future<?> f : workers) {
      f.get(120, TimeUnit.SECONDS);
    }
    assertEquals(48, entries.get());
    assertEquals(0, overlaps.get());
  }

  @Test
  void tryLockWaitsForARelease() throws Exception {
    String k = key("trylock");
    Lock held = a.asLock(k);
    held.lock();
    assertFalse(inOtherThread(() -> b.asLock(k).tryLock(200, TimeUnit.MILLISECONDS)));
    CompletableFuture<Boolean> waiting = new CompletableFuture<>();
    pool.submit(
        () -> {
          Lock l = b.asLock(k);
          try {
            boolean got = l.tryLock(60, TimeUnit.SECONDS);
            if (got) {
              l.unlock();
            }
            waiting.complete(got);
          } catch (Throwable t) {
            waiting.completeExceptionally(t);
          }
        });
    held.unlock();
    assertTrue(waiting.get(60, TimeUnit.SECONDS));
  }

  @Test
  void lockInterruptiblyGivesUpWhenInterrupted() throws Exception {
    String k = key("interrupt");
    Lock held = a.asLock(k);
    held.lock();
    CompletableFuture<Throwable> outcome = new CompletableFuture<>();
    Thread t =
        new Thread(
            () -> {
              try {
                b.asLock(k).lockInterruptibly();
                outcome.complete(null);
              } catch (Throwable e) {
                outcome.complete(e);
              }
            });
    t.start();
    t.interrupt();
    assertTrue(outcome.get(60, TimeUnit.SECONDS) instanceof InterruptedException);
    held.unlock();
    // The interrupted waiter left nothing behind: the key is free at once.
    assertTrue(
        inOtherThread(
            () -> {
              Lock l = b.asLock(k);
              boolean got = l.tryLock();
              l.unlock();
              return got;
            }));
    Thread.currentThread().interrupt();
    assertThrows(InterruptedException.class, () -> a.asLock(k).lockInterruptibly());
  }

  @Test
  void unlockWithoutHoldingThrows() throws Exception {
    LockdLock lock = a.asLock(key("not-held"));
    assertThrows(IllegalMonitorStateException.class, lock::unlock);
    lock.lock();
    Throwable fromOther =
        inOtherThread(
            () -> {
              try {
                lock.unlock();
                return null;
              } catch (IllegalMonitorStateException e) {
                return e;
              }
            });
    assertTrue(fromOther instanceof IllegalMonitorStateException, "only the holder unlocks");
    assertTrue(lock.isHeldByCurrentThread());
    lock.unlock();
    assertThrows(UnsupportedOperationException.class, lock::newCondition);
  }

  @Test
  void readersShareWritersExcludeAndAWriterMayDowngrade() throws Exception {
    String k = key("rw");
    ReadWriteLock rwA = a.asReadWriteLock(k);
    ReadWriteLock rwB = b.asReadWriteLock(k);
    ExecutorService reader = Executors.newSingleThreadExecutor();
    try {
      rwA.readLock().lock();
      assertTrue(reader.submit(() -> rwB.readLock().tryLock()).get(), "readers share");
      assertFalse(inOtherThread(() -> rwA.writeLock().tryLock()), "a writer waits for readers");
      LockdException upgrade = assertThrows(LockdException.class, () -> rwA.writeLock().tryLock());
      assertEquals(Status.Code.FAILED_PRECONDITION, upgrade.code());
      rwA.readLock().unlock();
      reader.submit(() -> rwB.readLock().unlock()).get();

      rwA.writeLock().lock();
      rwA.readLock().lock();
      assertNotNull(((LockdLock) rwA.readLock()).lease(), "a writer may take the read lock");
      assertFalse(reader.submit(() -> rwB.readLock().tryLock()).get(), "the writer keeps readers out");
      rwA.writeLock().unlock();
      assertFalse(reader.submit(() -> rwB.writeLock().tryLock()).get(), "the downgraded reader stays");
      rwA.readLock().unlock();
      assertTrue(reader.submit(() -> rwB.writeLock().tryLock()).get());
      reader.submit(() -> rwB.writeLock().unlock()).get();
    } finally {
      reader.shutdownNow();
    }
  }
}
