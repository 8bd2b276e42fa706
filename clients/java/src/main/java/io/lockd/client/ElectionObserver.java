package io.lockd.client;

import io.grpc.ClientCall;
import io.grpc.Status;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import io.lockd.v1.ElectionServiceGrpc;
import io.lockd.v1.ObserveRequest;
import io.lockd.v1.ObserveResponse;
import java.lang.System.Logger.Level;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * ElectionObserver follows an election (see {@link LockdClient#observe}): its listener gets the
 * current state at once (the leader, or empty for none), then each change, one at a time, terms
 * never going back. When a replica goes away it follows on the next one. {@link #close()} stops
 * it.
 */
public final class ElectionObserver implements AutoCloseable {
  private static final System.Logger log = System.getLogger(ElectionObserver.class.getName());

  private final Transport transport;
  private final String name;
  private final Consumer<Optional<LeaderInfo>> listener;

  // Guarded by this.
  private ClientCall<ObserveRequest, ObserveResponse> call;
  private long stream;
  private boolean closed;
  private boolean delivered;
  private LeaderInfo last;
  private long highestTerm;
  private long backoff;
  private Status endedWith;

  ElectionObserver(Transport transport, String name, Consumer<Optional<LeaderInfo>> listener) {
    this.transport = transport;
    this.name = name;
    this.listener = listener;
  }

  /** The election's name. */
  public String name() {
    return name;
  }

  /**
   * Why lockd stopped the observer (a bad name, no permission), or empty while it runs or after
   * {@link #close()}.
   */
  public synchronized Optional<Status> failure() {
    return Optional.ofNullable(endedWith);
  }

  /** Stops observing. */
  @Override
  public void close() {
    ClientCall<ObserveRequest, ObserveResponse> c;
    synchronized (this) {
      closed = true;
      c = call;
      call = null;
    }
    if (c != null) {
      c.cancel("observer closed", null);
    }
  }

  synchronized void open() {
    if (closed) {
      return;
    }
    final long id = ++stream;
    final int target = transport.current();
    ClientCall<ObserveRequest, ObserveResponse> c =
        transport.newCall(target, ElectionServiceGrpc.getObserveMethod(), 0);
    call = c;
    ClientCalls.asyncServerStreamingCall(
        c,
        ObserveRequest.newBuilder().setName(name).build(),
        new StreamObserver<ObserveResponse>() {
          @Override
          public void onNext(ObserveResponse r) {
            state(id, r);
          }

          @Override
          public void onError(Throwable t) {
            ended(id, target, Status.fromThrowable(t));
          }

          @Override
          public void onCompleted() {
            ended(id, target, Status.UNAVAILABLE.withDescription("Observe stream ended"));
          }
        });
  }

  private synchronized void state(long id, ObserveResponse r) {
    if (id != stream || closed) {
      return;
    }
    backoff = 0;
    LeaderInfo l = r.getHasLeader() ? new LeaderInfo(r.getLeader()) : null;
    if (l != null && Long.compareUnsigned(l.term(), highestTerm) < 0) {
      return; // an older state, from a replica that lags
    }
    if (delivered && (l == null ? last == null : l.sameAs(last))) {
      return; // the same state again, as a new stream starts
    }
    delivered = true;
    last = l;
    if (l != null) {
      highestTerm = l.term();
    }
    try {
      listener.accept(Optional.ofNullable(l));
    } catch (RuntimeException e) {
      log.log(Level.WARNING, "election observer of {0} threw: {1}", name, e);
    }
  }

  private synchronized void ended(long id, int target, Status status) {
    if (id != stream || closed) {
      return;
    }
    switch (status.getCode()) {
      case INVALID_ARGUMENT:
      case PERMISSION_DENIED:
      case UNAUTHENTICATED:
      case UNIMPLEMENTED:
        endedWith = status;
        closed = true;
        log.log(Level.WARNING, "observing {0} stopped: {1}", name, status);
        return;
      default:
        break;
    }
    transport.failed(target);
    stream++;
    backoff = Math.min(Math.max(backoff * 2, TimeUnit.MILLISECONDS.toNanos(25)), TimeUnit.SECONDS.toNanos(1));
    long sleep = backoff / 2 + ThreadLocalRandom.current().nextLong(backoff / 2 + 1);
    final long next = stream;
    try {
      transport.scheduler.schedule(() -> resume(next), sleep, TimeUnit.NANOSECONDS);
    } catch (java.util.concurrent.RejectedExecutionException closing) {
      closed = true;
    }
  }

  private synchronized void resume(long id) {
    if (id == stream) {
      open();
    }
  }
}
