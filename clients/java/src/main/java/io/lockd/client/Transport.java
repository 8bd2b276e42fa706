package io.lockd.client;

import com.google.common.util.concurrent.ListenableFuture;
import io.grpc.CallCredentials;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.stub.ClientCalls;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongFunction;

/**
 * Transport holds the channels to every lockd target and makes calls on the current one,
 * retrying on {@code UNAVAILABLE} (and on an attempt that ran past its own deadline, as a frozen
 * replica does) on the next target with backoff. Only calls that are safe to repeat go through
 * it: lock calls carry a request_id, so a retry never acts twice.
 */
final class Transport {
  final List<String> targets;
  final List<ManagedChannel> channels;
  final CallCredentials credentials;
  final ScheduledExecutorService scheduler;
  final ExecutorService callbacks;
  final long callTimeoutNanos;
  final long retryTimeoutNanos;

  private final AtomicInteger current = new AtomicInteger();
  private volatile boolean shutdown;

  Transport(
      List<String> targets,
      List<ManagedChannel> channels,
      CallCredentials credentials,
      ScheduledExecutorService scheduler,
      ExecutorService callbacks,
      long callTimeoutNanos,
      long retryTimeoutNanos) {
    this.targets = targets;
    this.channels = channels;
    this.credentials = credentials;
    this.scheduler = scheduler;
    this.callbacks = callbacks;
    this.callTimeoutNanos = callTimeoutNanos;
    this.retryTimeoutNanos = retryTimeoutNanos;
  }

  /** The index of the target calls go to now. */
  int current() {
    return current.get();
  }

  /** Moves calls off target i (unless another failure moved them already). */
  void failed(int i) {
    current.compareAndSet(i, (i + 1) % channels.size());
  }

  CallOptions options(long deadlineNanos) {
    CallOptions o = CallOptions.DEFAULT;
    if (credentials != null) {
      o = o.withCallCredentials(credentials);
    }
    if (deadlineNanos > 0) {
      o = o.withDeadlineAfter(deadlineNanos, TimeUnit.NANOSECONDS);
    }
    return o;
  }

  <Q, R> ClientCall<Q, R> newCall(int target, MethodDescriptor<Q, R> method, long deadlineNanos) {
    return channels.get(target).newCall(method, options(deadlineNanos));
  }

  /**
   * Calls method with the request built for the wait that remains (in nanoseconds), retrying as
   * described above until the wait plus the retry timeout has passed.
   *
   * @throws InterruptedException when the thread is interrupted; the call in flight is cancelled
   */
  <Q, R> R call(String what, MethodDescriptor<Q, R> method, LongFunction<Q> request, long waitNanos)
      throws InterruptedException {
    long start = System.nanoTime();
    long waitEnd = start + waitNanos;
    long giveUp = waitEnd + retryTimeoutNanos;
    long backoff = TimeUnit.MILLISECONDS.toNanos(25);
    while (true) {
      if (shutdown) {
        throw new LockdException(what, Status.CANCELLED.withDescription("the client is closed"));
      }
      int target = current();
      long now = System.nanoTime();
      long remainingWait = Math.max(0, waitEnd - now);
      long deadline = Math.max(Math.min(giveUp - now, remainingWait + callTimeoutNanos), 1);
      ClientCall<Q, R> call = newCall(target, method, deadline);
      ListenableFuture<R> f = ClientCalls.futureUnaryCall(call, request.apply(remainingWait));
      Status status;
      try {
        return f.get();
      } catch (InterruptedException e) {
        f.cancel(true);
        throw e;
      } catch (ExecutionException e) {
        status = Status.fromThrowable(e.getCause());
      }
      now = System.nanoTime();
      boolean attemptTimedOut =
          status.getCode() == Status.Code.DEADLINE_EXCEEDED && now < giveUp;
      if (status.getCode() != Status.Code.UNAVAILABLE && !attemptTimedOut) {
        throw new LockdException(what + " on " + targets.get(target), status);
      }
      failed(target);
      long sleep = backoff / 2 + ThreadLocalRandom.current().nextLong(backoff / 2 + 1);
      if (now + sleep >= giveUp) {
        throw new LockdException(what + " on " + targets.get(target) + " (retries exhausted)", status);
      }
      TimeUnit.NANOSECONDS.sleep(sleep);
      backoff = Math.min(backoff * 2, TimeUnit.SECONDS.toNanos(1));
    }
  }

  boolean isShutdown() {
    return shutdown;
  }

  void shutdown() {
    shutdown = true;
    for (ManagedChannel c : channels) {
      c.shutdown();
    }
    for (ManagedChannel c : channels) {
      try {
        if (!c.awaitTermination(5, TimeUnit.SECONDS)) {
          c.shutdownNow();
        }
      } catch (InterruptedException e) {
        c.shutdownNow();
        Thread.currentThread().interrupt();
      }
    }
    scheduler.shutdownNow();
    callbacks.shutdown();
  }
}
