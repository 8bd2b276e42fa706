package io.lockd.client;

import io.grpc.ClientCall;
import io.grpc.Status;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import io.lockd.v1.CampaignRequest;
import io.lockd.v1.CampaignResponse;
import io.lockd.v1.ElectionServiceGrpc;
import io.lockd.v1.LockServiceGrpc;
import io.lockd.v1.ProclaimRequest;
import io.lockd.v1.ProclaimResponse;
import io.lockd.v1.RenewRequest;
import io.lockd.v1.RenewResponse;
import io.lockd.v1.ResignRequest;
import java.lang.System.Logger.Level;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Leadership is a candidate's leadership of an election, won by {@link LockdClient#campaign} and
 * kept alive by its Campaign stream until {@link #resign()} or {@link #close()}.
 *
 * <p>Its loss is reported through {@link #lost()} (and {@link #onLost}) before lockd can elect
 * another candidate: when the Campaign stream ends (lockd found the leadership gone, or the
 * replica went away), or when no renewal was confirmed in time before it could run out (a tenth of
 * its ttl early). A leadership reported lost is never resumed: campaign again, for a new term.
 *
 * <p>Pass {@link #term()} with every write the leader makes, and have the resources reject terms
 * lower than one they have seen.
 */
public final class Leadership implements AutoCloseable {
  private static final System.Logger log = System.getLogger(Leadership.class.getName());

  private final LockdClient client;
  private final Transport transport;
  private final String name;
  private final CompletableFuture<io.lockd.v1.Leader> first = new CompletableFuture<>();
  private final CompletableFuture<LeaseLostException> lost = new CompletableFuture<>();
  private ClientCall<CampaignRequest, CampaignResponse> call;

  // Set once elected.
  private String owner;
  private String leaseId;
  private long term;
  private Instant electedTime;

  // Guarded by this.
  private String value;
  private long expireRedis; // the latest expiry, by Redis's clock (nanoseconds since the epoch)
  private long anchorLocal; // a System.nanoTime at or before Redis's clock read anchorRedis
  private long anchorRedis;
  private long ttl;
  private boolean anchored;
  private boolean closed;
  private LeaseLostException lostWith;
  private ScheduledFuture<?> lossTimer;

  /**
   * Campaigns with req until elected, moving to the next target while waiting when one goes away;
   * register learns of the leadership before it is confirmed.
   */
  static Leadership campaign(
      LockdClient client, Transport transport, CampaignRequest req, Consumer<Leadership> register)
      throws InterruptedException {
    String name = req.getName();
    long failingSince = 0;
    long backoff = TimeUnit.MILLISECONDS.toNanos(25);
    while (true) {
      if (transport.isShutdown()) {
        throw new LockdException("Campaign " + name, Status.CANCELLED.withDescription("the client is closed"));
      }
      int target = transport.current();
      Leadership l = new Leadership(client, transport, name);
      CompletableFuture<io.lockd.v1.Leader> elected = l.begin(target, req);
      io.lockd.v1.Leader first;
      try {
        first = elected.get();
      } catch (InterruptedException e) {
        l.abandon("interrupted"); // closing the stream resigns a leadership won meanwhile
        throw e;
      } catch (ExecutionException e) {
        Status st = Status.fromThrowable(e.getCause());
        if (st.getCode() != Status.Code.UNAVAILABLE) {
          throw new LockdException("Campaign " + name + " on " + transport.targets.get(target), st);
        }
        // The replica went away while the candidate waited: wait on the next one, under the same
        // owner, so a leadership won on the first but not reported is taken up, not waited out.
        transport.failed(target);
        long now = System.nanoTime();
        if (failingSince == 0) {
          failingSince = now;
        } else if (now - failingSince > transport.retryTimeoutNanos) {
          throw new LockdException("Campaign " + name + " (retries exhausted)", st);
        }
        TimeUnit.NANOSECONDS.sleep(backoff);
        backoff = Math.min(backoff * 2, TimeUnit.SECONDS.toNanos(1));
        continue;
      }
      register.accept(l);
      try {
        l.elected(first);
      } catch (InterruptedException | RuntimeException e) {
        l.abandon("not confirmed");
        client.forget(l);
        throw e;
      }
      LeaseLostException lost = l.lostWith();
      if (lost != null) {
        throw lost;
      }
      return l;
    }
  }

  Leadership(LockdClient client, Transport transport, String name) {
    this.client = client;
    this.transport = transport;
    this.name = name;
  }

  /** The election's name. */
  public String name() {
    return name;
  }

  /** The leader's owner name. */
  public String owner() {
    return owner;
  }

  /** The leadership's lease (for LockService calls by lease_id). */
  public String leaseId() {
    return leaseId;
  }

  /**
   * The term: a fencing token greater than every term of the election before. Resources should
   * reject writes that carry a lower term than one they have already seen.
   */
  public long term() {
    return term;
  }

  /** When this candidate was elected, by Redis's clock. */
  public Instant electedTime() {
    return electedTime;
  }

  /** The value the leader proclaims. */
  public synchronized String value() {
    return value;
  }

  /** When the leadership ends unless renewed, by Redis's clock, as last confirmed. */
  public synchronized Instant expireTime() {
    return Instant.ofEpochSecond(0, expireRedis);
  }

  /** True while the leadership is neither lost nor resigned. */
  public synchronized boolean isLeader() {
    return !closed && lostWith == null;
  }

  /**
   * Throws unless still leader: call it before each write the leadership guards.
   *
   * @throws LeaseLostException when the leadership was lost
   * @throws IllegalStateException when it was resigned
   */
  public synchronized void checkLeader() {
    if (lostWith != null) {
      throw lostWith;
    }
    if (closed) {
      throw new IllegalStateException("leadership of " + name + " was resigned");
    }
  }

  /**
   * A future completed with the reason when the leadership is lost, before lockd can elect
   * another candidate. It is cancelled when the leadership is resigned without having been lost.
   */
  public CompletableFuture<LeaseLostException> lost() {
    return lost;
  }

  /** Runs callback (on a client thread) when the leadership is lost; returns this leadership. */
  public Leadership onLost(Consumer<LeaseLostException> callback) {
    lost.thenAccept(callback);
    return this;
  }

  /**
   * Sets the leader's value, for observers to see.
   *
   * @throws LeaseLostException when the leadership was lost
   * @throws IllegalStateException when it was resigned
   */
  public void proclaim(String newValue) throws InterruptedException {
    checkLeader();
    ProclaimResponse r;
    try {
      r =
          transport.call(
              "Proclaim " + name,
              ElectionServiceGrpc.getProclaimMethod(),
              left ->
                  ProclaimRequest.newBuilder()
                      .setName(name)
                      .setLeaseId(leaseId)
                      .setValue(newValue)
                      .build(),
              0);
    } catch (LockdException e) {
      if (e.code() == Status.Code.NOT_FOUND) {
        throw new LeaseLostException(name, "Proclaim: " + e.status().getDescription());
      }
      throw e;
    }
    synchronized (this) {
      value = r.getLeader().getValue();
    }
  }

  /**
   * Ends the leadership at once, so the next candidate is elected, and stops keeping it alive.
   * Resigning a resigned leadership does nothing.
   *
   * @throws LeaseLostException when the leadership was lost (the first time it is resigned), as
   *     closing a lost {@link Lease} does
   * @throws LockdException when lockd could not be reached; the leadership then ends at its ttl
   */
  public void resign() throws InterruptedException {
    ClientCall<CampaignRequest, CampaignResponse> c;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      cancelTimer();
      c = call;
    }
    client.forget(this);
    LeaseLostException gone = lostWith();
    try {
      if (gone == null) {
        client.resign(name, leaseId);
      }
    } catch (LockdException e) {
      if (e.code() != Status.Code.NOT_FOUND) {
        throw e;
      }
      gone = new LeaseLostException(name, "Resign: " + e.status().getDescription());
    } finally {
      c.cancel("resigned", null);
      if (gone == null) {
        lost.cancel(false);
      }
    }
    if (gone != null) {
      lost.complete(gone);
      throw gone;
    }
  }

  /**
   * Resigns; a failure to reach lockd is logged (the leadership then ends at its ttl).
   *
   * @throws LeaseLostException when the leadership was lost (the first time it is closed)
   */
  @Override
  public void close() {
    try {
      resign();
    } catch (LeaseLostException e) {
      throw e;
    } catch (LockdException e) {
      log.log(Level.WARNING, "resigning {0} failed; the leadership ends at its ttl: {1}", name, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public String toString() {
    return "Leadership{name=" + name + ", owner=" + owner + ", term=" + Long.toUnsignedString(term)
        + "}";
  }

  synchronized LeaseLostException lostWith() {
    return lostWith;
  }

  /** Opens the Campaign stream on target; the future completes when elected. */
  CompletableFuture<io.lockd.v1.Leader> begin(int target, CampaignRequest req) {
    call = transport.newCall(target, ElectionServiceGrpc.getCampaignMethod(), 0);
    ClientCalls.asyncServerStreamingCall(
        call,
        req,
        new StreamObserver<CampaignResponse>() {
          @Override
          public void onNext(CampaignResponse r) {
            if (!first.complete(r.getLeader())) {
              renewed(r.getLeader());
            }
          }

          @Override
          public void onError(Throwable t) {
            ended(Status.fromThrowable(t));
          }

          @Override
          public void onCompleted() {
            ended(Status.UNAVAILABLE.withDescription("Campaign stream ended"));
          }
        });
    return first;
  }

  /** Gives up a campaign that was not elected (or whose election came too late). */
  void abandon(String why) {
    call.cancel(why, null);
  }

  /**
   * Starts following the leadership once elected: one Renew relates its expiry to the local clock
   * (the election may have come long after the stream opened).
   */
  void elected(io.lockd.v1.Leader l) throws InterruptedException {
    owner = l.getOwner();
    leaseId = l.getLeaseId();
    term = l.getTerm();
    long sent = System.nanoTime();
    RenewResponse r =
        transport.call(
            "Renew " + name,
            LockServiceGrpc.getRenewMethod(),
            left -> RenewRequest.newBuilder().setKey(name).setLeaseId(leaseId).build(),
            0);
    io.lockd.v1.Lease lease = r.getLease();
    synchronized (this) {
      value = l.getValue();
      ttl = lease.getTtl().getSeconds() * 1_000_000_000L + lease.getTtl().getNanos();
      long renewedExpiry = nanos(lease.getExpireTime());
      electedTime = Instant.ofEpochSecond(0, nanos(l.getExpireTime()) - ttl);
      anchorLocal = sent;
      anchorRedis = renewedExpiry - ttl;
      expireRedis = Math.max(expireRedis, Math.max(renewedExpiry, nanos(l.getExpireTime())));
      anchored = true;
      if (lostWith == null && !closed) {
        schedule();
      }
    }
  }

  private synchronized void renewed(io.lockd.v1.Leader l) {
    value = l.getValue();
    expireRedis = Math.max(expireRedis, nanos(l.getExpireTime()));
    if (anchored && lostWith == null && !closed) {
      schedule();
    }
  }

  private void schedule() {
    cancelTimer();
    long deadline = anchorLocal + (expireRedis - anchorRedis) - ttl / 10;
    long in = deadline - System.nanoTime();
    if (in <= 0) {
      lose("no renewal was confirmed before the leadership could run out", true);
      return;
    }
    lossTimer = transport.scheduler.schedule(this::deadlinePassed, in, TimeUnit.NANOSECONDS);
  }

  private synchronized void deadlinePassed() {
    if (closed || lostWith != null) {
      return;
    }
    long in = anchorLocal + (expireRedis - anchorRedis) - ttl / 10 - System.nanoTime();
    if (in > 0) {
      lossTimer = transport.scheduler.schedule(this::deadlinePassed, in, TimeUnit.NANOSECONDS);
      return;
    }
    lose("no renewal was confirmed before the leadership could run out", true);
  }

  private synchronized void ended(Status status) {
    if (!first.isDone()) {
      first.completeExceptionally(status.asRuntimeException());
      return;
    }
    if (closed || lostWith != null) {
      return;
    }
    if (status.getCode() == Status.Code.NOT_FOUND) {
      lose("lockd ended the Campaign stream with NOT_FOUND: " + status.getDescription(), false);
    } else {
      lose("the Campaign stream ended: " + status, true);
    }
  }

  // lose reports the loss; when lockd may still hold the leadership (the replica went away, or no
  // renewal came), it is resigned in the background so the next candidate need not wait it out.
  private void lose(String reason, boolean resign) {
    LeaseLostException e = new LeaseLostException(name, reason);
    lostWith = e;
    cancelTimer();
    call.cancel("leadership lost", null);
    client.forget(this);
    log.log(Level.WARNING, "{0}", e.getMessage());
    try {
      transport.callbacks.execute(
          () -> {
            lost.complete(e);
            if (resign) {
              try {
                client.resign(name, leaseId);
              } catch (LockdException | InterruptedException ignored) {
                // It ends at its ttl.
              }
            }
          });
    } catch (RejectedExecutionException closing) {
      lost.complete(e);
    }
  }

  /** Stops following the leadership without resigning by call (the client is closing). */
  void abandon() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      cancelTimer();
    }
    call.cancel("client closed", null);
    lost.cancel(false);
  }

  private void cancelTimer() {
    if (lossTimer != null) {
      lossTimer.cancel(false);
    }
  }

  private static long nanos(com.google.protobuf.Timestamp t) {
    return t.getSeconds() * 1_000_000_000L + t.getNanos();
  }
}
