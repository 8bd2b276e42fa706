package io.lockd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;

/** Elections against real lockd and redis-server processes. */
class ElectionTest {
  static final Duration TTL = Duration.ofSeconds(2);

  static String name(String what) {
    return "java/election/" + what + "/" + UUID.randomUUID();
  }

  static CompletableFuture<Leadership> campaignAsync(LockdClient c, String name, String value) {
    return CompletableFuture.supplyAsync(
        () -> {
          try {
            return c.campaign(name, value, LeaseOptions.write().ttl(TTL));
          } catch (InterruptedException e) {
            throw new IllegalStateException(e);
          }
        });
  }

  /** Takes states off q until one satisfies ok. */
  static Optional<LeaderInfo> next(
      BlockingQueue<Optional<LeaderInfo>> q, Predicate<Optional<LeaderInfo>> ok)
      throws InterruptedException {
    while (true) {
      Optional<LeaderInfo> s = q.poll(60, TimeUnit.SECONDS);
      assertNotNull(s, "the awaited state did not come");
      if (ok.test(s)) {
        return s;
      }
    }
  }

  @Test
  void campaignProclaimResignAndObserve() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(lockd.addr).build();
        LockdClient b = LockdClient.builder().target(lockd.addr).build()) {
      String n = name("basics");
      BlockingQueue<Optional<LeaderInfo>> states = new LinkedBlockingQueue<>();
      long[] highest = {0};
      try (ElectionObserver obs =
          b.observe(
              n,
              s -> {
                s.ifPresent(l -> assertTrue(Long.compareUnsigned(l.term(), highest[0]) >= 0));
                s.ifPresent(l -> highest[0] = l.term());
                states.add(s);
              })) {
        assertEquals(n, obs.name());
        next(states, Optional::isEmpty);
        assertEquals(Optional.empty(), a.leader(n));

        Leadership l1 = a.campaign(n, "10.0.0.1:80", LeaseOptions.write().ttl(TTL).owner("a"));
        assertTrue(l1.isLeader());
        assertEquals("a", l1.owner());
        assertTrue(l1.term() > 0);
        next(states, s -> s.isPresent() && s.get().term() == l1.term());
        CompletableFuture<Leadership> second = campaignAsync(b, n, "10.0.0.2:80");

        // The leadership outlives its ttl while the other candidate waits.
        Instant exp = l1.expireTime();
        while (!l1.expireTime().isAfter(exp.plus(TTL))) {
          assertFalse(second.isDone(), "a second leader was elected while the first led");
          assertTrue(l1.isLeader(), "leadership lost");
          Thread.sleep(20);
        }

        l1.proclaim("10.0.0.1:81");
        assertEquals("10.0.0.1:81", l1.value());
        next(states, s -> s.isPresent() && s.get().value().equals("10.0.0.1:81"));
        LeaderInfo cur = b.leader(n).orElseThrow();
        assertEquals(l1.term(), cur.term());
        assertEquals("a", cur.owner());

        l1.resign();
        l1.resign(); // a second time does nothing
        assertThrows(IllegalStateException.class, l1::checkLeader);
        assertTrue(l1.lost().isCancelled(), "a resigned leadership reports no loss");
        Leadership l2 = second.get(60, TimeUnit.SECONDS);
        assertTrue(Long.compareUnsigned(l2.term(), l1.term()) > 0);
        next(states, s -> s.isPresent() && s.get().term() == l2.term());
        l2.close();
        next(states, Optional::isEmpty);
      }
    }
  }

  /**
   * Redis frozen past the leadership's ttl: the leader's loss is signalled before the next
   * candidate (through another lockd) is elected, by the same wall clock, and the term rises.
   */
  @Test
  void leadershipLostBeforeTheNextIsElected() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd la = Processes.Lockd.start(redis);
        Processes.Lockd lb = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(la.addr).build();
        LockdClient b =
            LockdClient.builder().target(lb.addr).retryTimeout(Duration.ofSeconds(90)).build()) {
      String n = name("frozen");
      Leadership l1 = a.campaign(n, "a", LeaseOptions.write().ttl(TTL));
      AtomicReference<Instant> lostAt = new AtomicReference<>();
      l1.onLost(e -> lostAt.set(Instant.now()));
      CompletableFuture<Leadership> second = campaignAsync(b, n, "b");

      redis.freeze();
      Thread.sleep(TTL.multipliedBy(2).toMillis());
      redis.resume();

      Leadership l2 = second.get(120, TimeUnit.SECONDS);
      LeaseLostException why = l1.lost().get(10, TimeUnit.SECONDS);
      assertNotNull(lostAt.get(), "the loss callback ran");
      assertTrue(
          lostAt.get().isBefore(l2.electedTime()),
          "lost at " + lostAt.get() + ", next leader elected at " + l2.electedTime());
      assertEquals(n, why.key());
      assertFalse(l1.isLeader());
      assertThrows(LeaseLostException.class, () -> l1.proclaim("late"));
      // Resigning a lost leadership is an error, as closing a lost lease is; then it does nothing.
      assertSame(why, assertThrows(LeaseLostException.class, l1::resign));
      l1.resign();
      assertTrue(Long.compareUnsigned(l2.term(), l1.term()) > 0);
      l2.close();
    }
  }

  /** The lockd a leader campaigns through is killed: its loss is signalled, never resumed. */
  @Test
  void leadershipLostWithItsReplica() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd la = Processes.Lockd.start(redis);
        Processes.Lockd lb = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(la.addr).target(lb.addr).build();
        LockdClient b = LockdClient.builder().target(lb.addr).build()) {
      String n = name("killed");
      Leadership l1 = a.campaign(n, "a", LeaseOptions.write().ttl(TTL));
      la.kill();
      l1.lost().get(60, TimeUnit.SECONDS);
      Leadership l2 = b.campaign(n, "b", LeaseOptions.write().ttl(TTL));
      assertTrue(Long.compareUnsigned(l2.term(), l1.term()) > 0);
      assertFalse(l1.isLeader());
      l2.close();
    }
  }

  @Test
  void leaderLatchesLeadInTurn() throws Exception {
    try (Processes.Redis redis = Processes.Redis.start();
        Processes.Lockd lockd = Processes.Lockd.start(redis);
        LockdClient a = LockdClient.builder().target(lockd.addr).build();
        LockdClient b = LockdClient.builder().target(lockd.addr).build()) {
      String n = name("latch");
      BlockingQueue<String> events = new LinkedBlockingQueue<>();
      LeaderLatch first = a.leaderLatch(n, "first", LeaseOptions.write().ttl(TTL));
      LeaderLatch second = b.leaderLatch(n, "second", LeaseOptions.write().ttl(TTL));
      for (LeaderLatch l : new LeaderLatch[] {first, second}) {
        String who = l == first ? "first" : "second";
        l.addListener(
            new LeaderLatch.Listener() {
              @Override
              public void isLeader(Leadership leadership) {
                events.add(who + " leads");
              }

              @Override
              public void notLeader() {
                events.add(who + " stopped");
              }
            });
      }
      first.start();
      first.await();
      assertEquals("first leads", events.poll(60, TimeUnit.SECONDS));
      second.start();
      assertFalse(second.await(300, TimeUnit.MILLISECONDS));
      long firstTerm = first.leadership().orElseThrow().term();

      try (LockdClient admin = LockdClient.builder().target(lockd.addr).build()) {
        LeaderInfo cur = admin.leader(n).orElseThrow();
        assertEquals("first", cur.value());
      }
      // Its leadership ends (resigned here, as when lost): the first latch hears of it and
      // campaigns again, and the second takes over.
      first.leadership().orElseThrow().close();
      assertEquals("first stopped", events.poll(60, TimeUnit.SECONDS));
      assertTrue(second.await(60, TimeUnit.SECONDS));
      assertEquals("second leads", events.poll(60, TimeUnit.SECONDS));
      assertTrue(Long.compareUnsigned(second.leadership().orElseThrow().term(), firstTerm) > 0);
      second.close();
      assertEquals("second stopped", events.poll(60, TimeUnit.SECONDS));
      assertTrue(first.await(60, TimeUnit.SECONDS), "the first latch campaigned again");
      first.close();
      assertFalse(first.hasLeadership());
    }
  }
}
