package io.lockd.client;

import java.lang.System.Logger.Level;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * LeaderLatch takes part in an election for as long as it runs, in the manner of Curator's
 * LeaderLatch: {@link #start()} campaigns on a thread of its own; once elected, {@link
 * #hasLeadership()} is true and the listeners' {@code isLeader} runs; when the leadership is lost,
 * {@code notLeader} runs and the latch campaigns again (for a new term). {@link #close()} resigns
 * and stops.
 *
 * <pre>{@code
 * LeaderLatch latch = lockd.leaderLatch("scheduler", "10.0.0.7:8080");
 * latch.addListener(new LeaderLatch.Listener() {
 *   public void isLeader(Leadership l) { scheduler.start(l.term()); }
 *   public void notLeader() { scheduler.stop(); }
 * });
 * latch.start();
 * }</pre>
 */
public final class LeaderLatch implements AutoCloseable {
  private static final System.Logger log = System.getLogger(LeaderLatch.class.getName());

  /** Listener hears of the latch's leadership changes, on the latch's thread. */
  public interface Listener {
    /** Runs when elected, with the leadership (its term is the fencing token). */
    void isLeader(Leadership leadership);

    /** Runs when the leadership is lost, or resigned by {@link LeaderLatch#close()}. */
    void notLeader();
  }

  private final LockdClient client;
  private final String name;
  private final String value;
  private final LeaseOptions options;
  private final List<Listener> listeners = new CopyOnWriteArrayList<>();

  // Guarded by this.
  private Thread thread;
  private boolean closed;
  private Leadership current;

  LeaderLatch(LockdClient client, String name, String value, LeaseOptions options) {
    this.client = client;
    this.name = name;
    this.value = value;
    this.options = options;
  }

  /** Adds a listener; returns this latch. */
  public LeaderLatch addListener(Listener l) {
    listeners.add(l);
    return this;
  }

  /** Starts campaigning, on a daemon thread of the latch's own. */
  public synchronized void start() {
    if (thread != null || closed) {
      throw new IllegalStateException("the latch of " + name + " was started already");
    }
    thread = new Thread(this::run, "lockd-leader-latch-" + name);
    thread.setDaemon(true);
    thread.start();
  }

  /** True while this latch leads the election. */
  public synchronized boolean hasLeadership() {
    return current != null && current.isLeader();
  }

  /** The current leadership, while this latch leads. */
  public synchronized Optional<Leadership> leadership() {
    return hasLeadership() ? Optional.of(current) : Optional.empty();
  }

  /** Waits until this latch leads. */
  public synchronized void await() throws InterruptedException {
    while (!hasLeadership()) {
      if (closed) {
        throw new IllegalStateException("the latch of " + name + " is closed");
      }
      wait();
    }
  }

  /** Waits up to timeout until this latch leads; false when it did not in time. */
  public synchronized boolean await(long timeout, TimeUnit unit) throws InterruptedException {
    long end = System.nanoTime() + unit.toNanos(timeout);
    while (!hasLeadership() && !closed) {
      long left = end - System.nanoTime();
      if (left <= 0) {
        return false;
      }
      TimeUnit.NANOSECONDS.timedWait(this, left);
    }
    return hasLeadership();
  }

  /** Resigns (if leading) and stops campaigning. */
  @Override
  public void close() {
    Thread t;
    Leadership l;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      t = thread;
      l = current;
      notifyAll();
    }
    if (t != null) {
      t.interrupt();
    }
    if (l != null) {
      resignQuietly(l);
    }
    if (t != null) {
      try {
        t.join(TimeUnit.SECONDS.toMillis(30));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private void run() {
    while (true) {
      synchronized (this) {
        if (closed) {
          return;
        }
      }
      Leadership l;
      try {
        l = client.campaign(name, value, options);
      } catch (InterruptedException e) {
        return;
      } catch (LockdException e) {
        log.log(Level.WARNING, "campaigning for {0} failed; trying again: {1}", name, e);
        if (!pause()) {
          return;
        }
        continue;
      }
      synchronized (this) {
        if (closed) {
          resignQuietly(l);
          return;
        }
        current = l;
        notifyAll();
      }
      listeners.forEach(x -> x.isLeader(l));
      try {
        l.lost().get();
      } catch (InterruptedException e) {
        // closed: close() resigns
      } catch (java.util.concurrent.ExecutionException | java.util.concurrent.CancellationException e) {
        // resigned
      }
      synchronized (this) {
        current = null;
        notifyAll();
      }
      listeners.forEach(Listener::notLeader);
    }
  }

  /** Resigns l; its loss, if it was lost, was already told to the listeners (notLeader). */
  private static void resignQuietly(Leadership l) {
    try {
      l.close();
    } catch (LeaseLostException lost) {
      // Reported through notLeader.
    }
  }

  private boolean pause() {
    try {
      TimeUnit.SECONDS.sleep(1);
      return true;
    } catch (InterruptedException e) {
      return false;
    }
  }
}
