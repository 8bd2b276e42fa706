package io.lockd.client;

import io.grpc.ClientCall;
import io.grpc.Status;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import io.lockd.v1.KeepAliveRequest;
import io.lockd.v1.KeepAliveResponse;
import io.lockd.v1.LockMode;
import io.lockd.v1.LockServiceGrpc;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Lease is one hold on a key, kept alive by a KeepAlive stream for as long as it is open.
 *
 * <p>The lease reports its loss through {@link #lost()} (and {@link #onLost}) before anyone else
 * can be granted the key: when lockd ends the KeepAlive stream with {@code NOT_FOUND}, or when no
 * renewal was confirmed in time before the lease could run out (a tenth of its ttl early, by a
 * bound on Redis's clock that the client learns when the lease is granted). When a replica goes
 * away the stream resumes on the next target with the same lease.
 *
 * <p>Pass {@link #fencingToken()} with every write to the resource the lease protects. {@link
 * #close()} gives the hold back (one Release, retried safely on another replica) and stops
 * keeping it alive.
 */
public final class Lease implements AutoCloseable {
  private static final System.Logger log = System.getLogger(Lease.class.getName());

  private final LockdClient client;
  private final Transport transport;
  private final String key;
  private final String leaseId;
  private final String owner;
  private final LeaseOptions.Mode mode;
  private final long fencingToken;
  private final Instant grantTime;
  private final CompletableFuture<LeaseLostException> lost = new CompletableFuture<>();

  // Guarded by this.
  // A local instant (System.nanoTime) at or before which Redis's clock read anchorRedis: first the
  // send of the call that granted the lease and the grant's instant by Redis; then, for each
  // KeepAlive stream, the stream's opening and its first renewal's instant by Redis (lockd renews
  // as soon as a stream opens, so this bound is within a round trip).
  private long anchorLocal;
  private long anchorRedis;
  private long streamOpened;
  private boolean streamAnchored;
  private io.lockd.v1.Lease last;
  private long deadline;
  private boolean closed;
  private LeaseLostException lostWith;
  private boolean lostInLockd;
  private ClientCall<KeepAliveRequest, KeepAliveResponse> call;
  private long stream;
  private long backoff;
  private ScheduledFuture<?> lossTimer;
  private ScheduledFuture<?> stallTimer;

  Lease(LockdClient client, Transport transport, io.lockd.v1.Lease granted, long sentNanos) {
    this.client = client;
    this.transport = transport;
    this.key = granted.getKey();
    this.leaseId = granted.getLeaseId();
    this.owner = granted.getOwner();
    this.mode =
        granted.getMode() == LockMode.LOCK_MODE_READ
            ? LeaseOptions.Mode.READ
            : granted.getMode() == LockMode.LOCK_MODE_PERMIT
                ? LeaseOptions.Mode.PERMIT
                : LeaseOptions.Mode.WRITE;
    this.fencingToken = granted.getFencingToken();
    long grant = redisNanos(granted) - ttlNanos(granted);
    this.grantTime = Instant.ofEpochSecond(0, grant);
    this.anchorLocal = sentNanos;
    this.anchorRedis = grant;
  }

  /** The key this lease holds. */
  public String key() {
    return key;
  }

  /** The lease's opaque id, as lockd granted it. */
  public String leaseId() {
    return leaseId;
  }

  /** Who holds the lease (as asked for, or made up by lockd when no owner was given). */
  public String owner() {
    return owner;
  }

  /** Whether the lease holds its key for reading or writing, or is a semaphore's permit. */
  public LeaseOptions.Mode mode() {
    return mode;
  }

  /**
   * The fencing token: greater than every token issued before for this key. Resources should
   * reject writes that carry a lower token than one they have already seen.
   */
  public long fencingToken() {
    return fencingToken;
  }

  /** How many times the owner holds this lease, as of the last renewal. */
  public synchronized int holdCount() {
    return last.getHoldCount();
  }

  /** The span of the last grant or renewal. */
  public synchronized Duration ttl() {
    return Duration.ofNanos(ttlNanos(last));
  }

  /** When the lease runs out unless renewed, by Redis's clock, as of the last renewal. */
  public synchronized Instant expireTime() {
    return Instant.ofEpochSecond(last.getExpireTime().getSeconds(), last.getExpireTime().getNanos());
  }

  /**
   * When the lease was granted (or last re-entered with its ttl) by Redis's clock: its first
   * expiry less its ttl.
   */
  public Instant grantTime() {
    return grantTime;
  }

  /** True while the lease is neither lost nor closed. */
  public synchronized boolean isHeld() {
    return !closed && lostWith == null;
  }

  /**
   * Throws unless the lease is held: call it before each write the lease guards.
   *
   * @throws LeaseLostException when the lease was lost
   * @throws IllegalStateException when the lease was closed
   */
  public synchronized void checkHeld() {
    if (lostWith != null) {
      throw lostWith;
    }
    if (closed) {
      throw new IllegalStateException("lease on " + key + " was closed");
    }
  }

  /**
   * A future completed with the reason when the lease is lost, before anyone else can be granted
   * the key. It is cancelled when the lease is closed without having been lost.
   */
  public CompletableFuture<LeaseLostException> lost() {
    return lost;
  }

  /** Runs callback (on a client thread) when the lease is lost; returns this lease. */
  public Lease onLost(Consumer<LeaseLostException> callback) {
    lost.thenAccept(callback);
    return this;
  }

  /**
   * Gives one hold of the lease back and stops keeping it alive. Closing a closed lease does
   * nothing. A release that fails (lockd unreachable past the retries) is logged; the lease then
   * runs out by itself within its ttl.
   *
   * @throws LeaseLostException when the lease was lost (the first time it is closed): the work it
   *     guarded may have overlapped another holder's. A lease given up for lack of confirmed
   *     renewals is still released in the background, in case lockd holds it.
   */
  @Override
  public void close() {
    LeaseLostException lostAtClose = discard();
    if (lostAtClose != null) {
      throw lostAtClose;
    }
  }

  /** Closes the lease as {@link #close()} does; returns its loss instead of throwing it. */
  LeaseLostException discard() {
    ClientCall<KeepAliveRequest, KeepAliveResponse> c;
    boolean held;
    boolean releaseLost;
    synchronized (this) {
      if (closed) {
        return null;
      }
      closed = true;
      held = lostWith == null;
      releaseLost = lostWith != null && !lostInLockd;
      c = call;
      call = null;
      cancelTimers();
    }
    client.forget(this);
    LeaseLostException gone = null;
    try {
      if (held) {
        gone = release();
      } else if (releaseLost) {
        transport.callbacks.execute(this::release);
      }
    } catch (RejectedExecutionException closing) {
      // The client is closing: the lease runs out by itself.
    } finally {
      if (c != null) {
        c.cancel("lease closed", null);
      }
    }
    synchronized (this) {
      if (lostWith == null) {
        lostWith = gone;
      }
    }
    if (gone != null) {
      lost.complete(gone);
    } else if (held) {
      lost.cancel(false);
    }
    return lostWith();
  }

  /** Releases the lease; lockd not knowing it (NOT_FOUND) means it was lost, which is returned. */
  private LeaseLostException release() {
    try {
      client.release(key, leaseId);
    } catch (LockdException e) {
      if (e.code() == Status.Code.NOT_FOUND) {
        return new LeaseLostException(key, "Release: " + e.status().getDescription());
      }
      log.log(Level.WARNING, "releasing the lease on {0} failed; it runs out by itself: {1}", key, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return null;
  }

  @Override
  public String toString() {
    return "Lease{key=" + key + ", owner=" + owner + ", mode=" + mode + ", fencingToken="
        + Long.toUnsignedString(fencingToken) + "}";
  }

  synchronized LeaseLostException lostWith() {
    return lostWith;
  }

  /** Starts keeping the lease alive; granted is the lease as the grant returned it. */
  synchronized void start(io.lockd.v1.Lease granted) {
    // A grant that waited may have come long after the send that anchors it, so until the first
    // renewal re-anchors the clock (a round trip away) the lease is trusted for a tenth of its ttl
    // from now at least: only a reply delayed by nine tenths of the ttl could make that late.
    long now = System.nanoTime();
    renewed(granted, now, now + ttlNanos(granted) / 10);
    if (lostWith == null) {
      open();
    }
  }

  /** Stops keeping the lease alive without releasing it (the client is closing). */
  void abandon() {
    ClientCall<KeepAliveRequest, KeepAliveResponse> c;
    boolean held;
    synchronized (this) {
      held = !closed && lostWith == null;
      closed = true;
      c = call;
      call = null;
      cancelTimers();
    }
    if (c != null) {
      c.cancel("client closed", null);
    }
    if (held) {
      lost.cancel(false);
    }
  }

  // renewed records a lease lockd confirmed at or before received (System.nanoTime) and moves the
  // loss deadline: the lease's expiry mapped to the local clock through the anchor (never later
  // than received + ttl), less a tenth of its ttl, and no earlier than floor.
  private void renewed(io.lockd.v1.Lease l, long received, long floor) {
    last = l;
    long ttl = ttlNanos(l);
    long expiry = Math.min(anchorLocal + (redisNanos(l) - anchorRedis), received + ttl);
    deadline = Math.max(expiry - ttl / 10, floor);
    if (lossTimer != null) {
      lossTimer.cancel(false);
    }
    long in = deadline - System.nanoTime();
    if (in <= 0) {
      lose("the lease ran out before its renewal was confirmed");
      return;
    }
    lossTimer = transport.scheduler.schedule(this::deadlinePassed, in, TimeUnit.NANOSECONDS);
  }

  private synchronized void deadlinePassed() {
    if (closed || lostWith != null) {
      return;
    }
    long in = deadline - System.nanoTime();
    if (in > 0) {
      lossTimer = transport.scheduler.schedule(this::deadlinePassed, in, TimeUnit.NANOSECONDS);
      return;
    }
    lose("no renewal was confirmed before the lease could run out");
  }

  // open starts a KeepAlive stream on the current target.
  private void open() {
    if (closed || lostWith != null) {
      return;
    }
    final long id = ++stream;
    final int target = transport.current();
    streamOpened = System.nanoTime();
    streamAnchored = false;
    ClientCall<KeepAliveRequest, KeepAliveResponse> c =
        transport.newCall(target, LockServiceGrpc.getKeepAliveMethod(), 0);
    call = c;
    KeepAliveRequest req = KeepAliveRequest.newBuilder().setKey(key).setLeaseId(leaseId).build();
    ClientCalls.asyncServerStreamingCall(
        c,
        req,
        new StreamObserver<KeepAliveResponse>() {
          @Override
          public void onNext(KeepAliveResponse r) {
            received(id, target, r.getLease());
          }

          @Override
          public void onError(Throwable t) {
            ended(id, target, Status.fromThrowable(t));
          }

          @Override
          public void onCompleted() {
            ended(id, target, Status.UNAVAILABLE.withDescription("KeepAlive stream ended"));
          }
        });
    armStall(id, target);
  }

  // A stream that stays silent for half a ttl (renewals come every third) is abandoned for the
  // next target: a frozen or cut-off replica answers nothing at all. With one target there is
  // nowhere to move, and the silent stream may still bring lockd's NOT_FOUND.
  private void armStall(long id, int target) {
    if (stallTimer != null) {
      stallTimer.cancel(false);
    }
    if (transport.channels.size() < 2) {
      return;
    }
    long after = Math.max(ttlNanos(last) / 2, TimeUnit.MILLISECONDS.toNanos(5));
    stallTimer =
        transport.scheduler.schedule(() -> stalled(id, target), after, TimeUnit.NANOSECONDS);
  }

  private synchronized void received(long id, int target, io.lockd.v1.Lease l) {
    if (id != stream || closed || lostWith != null) {
      return;
    }
    backoff = 0;
    if (!streamAnchored) {
      anchorLocal = streamOpened;
      anchorRedis = redisNanos(l) - ttlNanos(l);
      streamAnchored = true;
    }
    renewed(l, System.nanoTime(), Long.MIN_VALUE);
    if (lostWith == null) {
      armStall(id, target);
    }
  }

  private synchronized void stalled(long id, int target) {
    if (id != stream || closed || lostWith != null) {
      return;
    }
    log.log(Level.DEBUG, "KeepAlive on {0} silent; moving on", transport.targets.get(target));
    transport.failed(target);
    ClientCall<KeepAliveRequest, KeepAliveResponse> c = call;
    stream++;
    c.cancel("no renewal in time", null);
    open();
  }

  private synchronized void ended(long id, int target, Status status) {
    if (id != stream || closed || lostWith != null) {
      return;
    }
    if (status.getCode() == Status.Code.NOT_FOUND) {
      lostInLockd = true;
      lose("lockd ended KeepAlive with NOT_FOUND: " + status.getDescription());
      return;
    }
    log.log(Level.DEBUG, "KeepAlive on {0} ended {1}; resuming", transport.targets.get(target), status);
    transport.failed(target);
    stream++;
    if (stallTimer != null) {
      stallTimer.cancel(false);
    }
    backoff = Math.min(Math.max(backoff * 2, TimeUnit.MILLISECONDS.toNanos(25)), ttlNanos(last) / 6);
    long sleep = backoff / 2 + ThreadLocalRandom.current().nextLong(backoff / 2 + 1);
    final long next = stream;
    transport.scheduler.schedule(() -> resume(next), sleep, TimeUnit.NANOSECONDS);
  }

  private synchronized void resume(long id) {
    if (id == stream) {
      open();
    }
  }

  private void lose(String reason) {
    LeaseLostException e = new LeaseLostException(key, reason);
    lostWith = e;
    cancelTimers();
    if (call != null) {
      call.cancel("lease lost", null);
      call = null;
    }
    stream++;
    client.forget(this);
    log.log(Level.WARNING, "{0}", e.getMessage());
    try {
      transport.callbacks.execute(() -> lost.complete(e));
    } catch (RejectedExecutionException closing) {
      lost.complete(e);
    }
  }

  private void cancelTimers() {
    if (lossTimer != null) {
      lossTimer.cancel(false);
    }
    if (stallTimer != null) {
      stallTimer.cancel(false);
    }
  }

  private static long redisNanos(io.lockd.v1.Lease l) {
    return l.getExpireTime().getSeconds() * 1_000_000_000L + l.getExpireTime().getNanos();
  }

  private static long ttlNanos(io.lockd.v1.Lease l) {
    return l.getTtl().getSeconds() * 1_000_000_000L + l.getTtl().getNanos();
  }
}
