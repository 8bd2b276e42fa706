package com.example.orders;

import io.lockd.client.Lease;
import io.lockd.client.LeaseOptions;
import io.lockd.client.Leadership;
import io.lockd.client.LockdClient;
import io.lockd.client.LockdException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.locks.Lock;

/**
 * Main charges an order under its lock, as a service would: one lockd address per argument
 * (default 127.0.0.1:50051).
 */
public final class Main {
  private Main() {}

  /** Runs the example against the lockd addresses in args. */
  public static void main(String[] args) throws Exception {
    LockdClient.Builder builder = LockdClient.builder().defaultTtl(Duration.ofSeconds(10));
    for (String target : args.length > 0 ? args : new String[] {"127.0.0.1:50051"}) {
      builder.target(target);
    }
    try (LockdClient lockd = builder.build()) {
      try (Lease lease = lockd.acquire("orders/42")) {
        Optional<Lease> other = lockd.tryAcquire("orders/42", Duration.ZERO);
        System.out.println("charging order 42 with fencing token " + lease.fencingToken()
            + "; a second holder got it: " + other.isPresent());
        lease.checkHeld();
      }

      Lock lock = lockd.asLock("orders/43");
      lock.lock();
      try {
        System.out.println("order 43 locked through java.util.concurrent.locks.Lock");
      } finally {
        lock.unlock();
      }

      try (Lease permit = lockd.acquirePermit("upstream/api", 2)) {
        System.out.println("holding a permit of upstream/api, mode " + permit.mode());
      }

      try (Leadership leader = lockd.campaign("orders/scheduler", "node-1")) {
        System.out.println("scheduling in term " + leader.term() + ", leader value "
            + lockd.leader("orders/scheduler").orElseThrow().value());
      }

      try (Lease reader = lockd.acquire("orders/report", LeaseOptions.read())) {
        System.out.println("reading the report, mode " + reader.mode());
      }

      try {
        lockd.tryAcquire("", Duration.ZERO);
      } catch (LockdException e) {
        System.out.println("an empty key is refused: " + e.code());
      }
    }
  }
}
