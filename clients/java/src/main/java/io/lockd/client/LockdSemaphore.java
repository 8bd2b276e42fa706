package io.lockd.client;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * LockdSemaphore is a semaphore of lockd ({@link LockdClient#asSemaphore}) in the manner of
 * {@link java.util.concurrent.Semaphore}: at most {@link #limit()} permits of its key are held at
 * once, by every process together. Each permit is a {@link Lease} kept alive until {@link
 * #release()}; the permit of a process that dies comes back when its lease runs out.
 *
 * <p>Unlike a local semaphore, permits cannot be created by releasing: {@link #release()} gives
 * back a permit acquired through this object (the oldest), and throws when there is none. Use
 * {@link LockdClient#acquirePermit} for the permit's lease itself (its fencing token and loss
 * signal).
 */
public final class LockdSemaphore {
  private final LockdClient client;
  private final String key;
  private final int limit;
  private final LeaseOptions options;
  private final Deque<Lease> held = new ArrayDeque<>();

  LockdSemaphore(LockdClient client, String key, int limit, LeaseOptions options) {
    this.client = client;
    this.key = key;
    this.limit = limit;
    this.options = options;
  }

  /** The semaphore's key. */
  public String key() {
    return key;
  }

  /** How many permits of the key may be held at once. */
  public int limit() {
    return limit;
  }

  /** Waits for a permit. */
  public void acquire() throws InterruptedException {
    add(client.acquirePermit(key, limit, options));
  }

  /** Takes a permit if one is free now. */
  public boolean tryAcquire() throws InterruptedException {
    return tryAcquire(0, TimeUnit.NANOSECONDS);
  }

  /** Takes a permit if one comes free within the timeout. */
  public boolean tryAcquire(long timeout, TimeUnit unit) throws InterruptedException {
    Optional<Lease> p =
        client.tryAcquirePermit(key, limit, Duration.ofNanos(unit.toNanos(timeout)), options);
    p.ifPresent(this::add);
    return p.isPresent();
  }

  /**
   * Gives back the oldest permit acquired through this semaphore.
   *
   * @throws IllegalStateException when no permit is held through this semaphore
   * @throws LeaseLostException when that permit was lost meanwhile (see {@link Lease#lost()}): it
   *     is dropped all the same, but the work it guarded may have overlapped another holder's
   */
  public void release() {
    Lease l;
    synchronized (held) {
      l = held.pollFirst();
    }
    if (l == null) {
      throw new IllegalStateException("no permit of " + key + " is held through this semaphore");
    }
    l.close();
  }

  /** How many permits this semaphore holds now (lost ones aside). */
  public int heldPermits() {
    synchronized (held) {
      held.removeIf(l -> !l.isHeld());
      return held.size();
    }
  }

  private void add(Lease l) {
    synchronized (held) {
      held.addLast(l);
    }
  }
}
