package io.lockd.client;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * LockdLock is a {@link Lock} on one lockd key, exclusive (write) or shared (read) across every
 * process that uses lockd, and reentrant per thread like {@link
 * java.util.concurrent.locks.ReentrantLock}: a thread's first {@code lock} takes a lease (owned by
 * this client and thread, kept alive until the last {@code unlock}), and further {@code lock}s by
 * the same thread only count. Every lock object a client makes for a key shares these holds.
 *
 * <p>A thread holding the write lock may also take the read lock (downgrade); asking for the write
 * lock while holding only the read lock throws a {@link LockdException} with {@code
 * FAILED_PRECONDITION}, where a local lock would deadlock.
 *
 * <p>When the lease is lost (see {@link Lease}), re-entering throws {@link LeaseLostException} and
 * {@code unlock} throws {@link IllegalMonitorStateException}: the work done under the lock may have
 * overlapped another holder's. {@link #lease()} gives the thread's lease, for its fencing token and
 * loss signal.
 */
public final class LockdLock implements Lock {
  private static final long MAX_WAIT_CHUNK = TimeUnit.SECONDS.toNanos(60);

  /** Hold is one thread's hold on a key in one mode. */
  static final class Hold {
    final Lease lease;
    int count = 1;

    Hold(Lease lease) {
      this.lease = lease;
    }
  }

  private final LockdClient client;
  private final String key;
  private final LeaseOptions.Mode mode;

  LockdLock(LockdClient client, String key, LeaseOptions.Mode mode) {
    this.client = client;
    this.key = key;
    this.mode = mode;
  }

  /** The key this lock takes. */
  public String key() {
    return key;
  }

  /** Waits as long as it takes for the lock, ignoring interrupts (it keeps the interrupt flag). */
  @Override
  public void lock() {
    boolean interrupted = false;
    try {
      while (true) {
        try {
          take(-1);
          return;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Waits as long as it takes for the lock, unless interrupted. */
  @Override
  public void lockInterruptibly() throws InterruptedException {
    if (Thread.interrupted()) {
      throw new InterruptedException();
    }
    take(-1);
  }

  /** Takes the lock if it is free now (one call to lockd). */
  @Override
  public boolean tryLock() {
    try {
      return take(0);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  /** Takes the lock if it can be had within time, unless interrupted. */
  @Override
  public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
    if (Thread.interrupted()) {
      throw new InterruptedException();
    }
    return take(Math.max(0, unit.toNanos(time)));
  }

  /**
   * Takes one hold away; the last gives the lease back.
   *
   * @throws IllegalMonitorStateException when this thread does not hold the lock, or its lease was
   *     lost (the hold is dropped all the same)
   */
  @Override
  public void unlock() {
    String slot = slot();
    Hold h = client.holds.get(slot);
    if (h == null) {
      throw new IllegalMonitorStateException(
          mode + " lock on " + key + " is not held by " + Thread.currentThread().getName());
    }
    LeaseLostException lost = h.lease.lostWith();
    if (lost == null && --h.count > 0) {
      return;
    }
    client.holds.remove(slot);
    lost = h.lease.discard();
    if (lost != null) {
      IllegalMonitorStateException e =
          new IllegalMonitorStateException(mode + " lock on " + key + " was lost while held");
      e.initCause(lost);
      throw e;
    }
  }

  /** Conditions are not supported across processes. */
  @Override
  public Condition newCondition() {
    throw new UnsupportedOperationException("lockd locks have no conditions");
  }

  /** True when the current thread holds this lock and its lease is not known to be lost. */
  public boolean isHeldByCurrentThread() {
    Hold h = client.holds.get(slot());
    return h != null && h.lease.isHeld();
  }

  /** How many times the current thread holds this lock (0 when it does not). */
  public int getHoldCount() {
    Hold h = client.holds.get(slot());
    return h == null ? 0 : h.count;
  }

  /** The current thread's lease on the key (fencing token, loss signal), or null if not held. */
  public Lease lease() {
    Hold h = client.holds.get(slot());
    return h == null ? null : h.lease;
  }

  // take takes the lock within waitNanos (negative: no limit).
  private boolean take(long waitNanos) throws InterruptedException {
    String slot = slot();
    Hold h = client.holds.get(slot);
    if (h != null) {
      h.lease.checkHeld();
      h.count++;
      return true;
    }
    LeaseOptions o =
        (mode == LeaseOptions.Mode.READ ? LeaseOptions.read() : LeaseOptions.write())
            .owner(client.threadOwner());
    long end = System.nanoTime() + waitNanos;
    while (true) {
      long left = waitNanos < 0 ? MAX_WAIT_CHUNK : Math.max(0, end - System.nanoTime());
      Optional<Lease> l =
          client.tryAcquire(key, Duration.ofNanos(Math.min(left, MAX_WAIT_CHUNK)), o);
      if (l.isPresent()) {
        client.holds.put(slot, new Hold(l.get()));
        return true;
      }
      if (waitNanos >= 0 && System.nanoTime() - end >= 0) {
        return false;
      }
    }
  }

  private String slot() {
    return mode + "\u0000" + Thread.currentThread().getId() + "\u0000" + key;
  }
}
