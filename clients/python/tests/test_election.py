"""Elections against real lockd and redis-server processes."""

import queue
import threading
import time
import unittest
import uuid
from datetime import datetime, timezone

from lockd import Client, LeaseLost

from . import harness

TTL = 2.0


def name(what: str) -> str:
    return f"py/election/{what}/{uuid.uuid4()}"


def next_state(states, ok, timeout=60.0):
    """The next state the observer delivers that satisfies ok (earlier ones are skipped)."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        try:
            s = states.next(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"state not seen; saw {seen}") from None
        seen.append(s)
        if ok(s):
            return s


class ElectionTest(unittest.TestCase):
    def test_campaigns_proclaims_resigns_and_is_observed(self):
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis)
        a = Client([lockd.addr], default_ttl=TTL)
        b = Client([lockd.addr], default_ttl=TTL)
        n = name("basics")
        try:
            with b.observe(n) as states:
                self.assertIsNone(next_state(states, lambda s: True))
                self.assertIsNone(a.leader(n))

                l1 = a.campaign(n, "10.0.0.1:80", owner="a")
                seen = next_state(states, lambda s: s is not None)
                self.assertEqual((seen.value, seen.owner, seen.term), ("10.0.0.1:80", "a", l1.term))
                self.assertEqual(a.leader(n).term, l1.term)

                # A second candidate waits while the first leads, renewing past its ttl.
                got = []
                t = threading.Thread(target=lambda: got.append(b.campaign(n, "10.0.0.2:80", owner="b")))
                t.start()
                time.sleep(2 * TTL)
                self.assertTrue(l1.is_leader, "leadership lost")
                l1.check_leader()
                self.assertEqual(got, [])

                l1.proclaim("10.0.0.1:81")
                self.assertEqual(l1.value, "10.0.0.1:81")
                self.assertEqual(next_state(states, lambda s: s is not None and s.value == "10.0.0.1:81").term, l1.term)

                lost_fired = []
                l1.on_lost(lost_fired.append)
                l1.resign()
                l1.resign()  # a second time does nothing
                with self.assertRaisesRegex(RuntimeError, "resigned"):
                    l1.check_leader()
                t.join(30)
                l2 = got[0]
                self.assertGreater(l2.term, l1.term)
                self.assertEqual(next_state(states, lambda s: s is not None and s.owner == "b").term, l2.term)
                with l2:
                    pass  # leaving the block resigns
                self.assertIsNone(next_state(states, lambda s: s is None))
                self.assertEqual(lost_fired, [], "a resigned leadership reports no loss")
        finally:
            a.close()
            b.close()
            lockd.stop()
            redis.stop()

    def test_the_loss_is_reported_before_the_next_candidate_is_elected_when_redis_freezes(self):
        redis = harness.start_redis()
        la = harness.start_lockd(redis)
        lb = harness.start_lockd(redis)
        a = Client([la.addr], default_ttl=TTL)
        b = Client([lb.addr], default_ttl=TTL, retry_timeout=90)
        try:
            n = name("frozen")
            l1 = a.campaign(n, "a")
            lost_at = []
            l1.on_lost(lambda e: lost_at.append(datetime.now(timezone.utc)))
            got = []
            t = threading.Thread(target=lambda: got.append(b.campaign(n, "b")))
            t.start()

            redis.freeze()
            time.sleep(2 * TTL)
            redis.resume()

            t.join(120)
            l2 = got[0]
            why = l1.wait_lost(10)
            harness.wait_for(lambda: lost_at, 10, "the loss callback")
            self.assertLess(lost_at[0], l2.elected_time, f"lost at {lost_at[0]}, next leader elected at {l2.elected_time}")
            self.assertIsInstance(why, LeaseLost)
            self.assertEqual(why.key, n)
            self.assertFalse(l1.is_leader)
            with self.assertRaises(LeaseLost):
                l1.proclaim("late")
            # Resigning a lost leadership is an error, as releasing a lost lease is.
            with self.assertRaises(LeaseLost) as e:
                l1.resign()
            self.assertIs(e.exception, why)
            l1.resign()
            self.assertGreater(l2.term, l1.term)
            l2.resign()
        finally:
            a.close()
            b.close()
            la.stop()
            lb.stop()
            redis.stop()

    def test_the_leadership_is_lost_with_its_replica_and_never_resumed(self):
        redis = harness.start_redis()
        la = harness.start_lockd(redis)
        lb = harness.start_lockd(redis)
        a = Client([la.addr, lb.addr], default_ttl=TTL)
        b = Client([lb.addr], default_ttl=TTL)
        try:
            n = name("killed")
            l1 = a.campaign(n, "a")
            la.kill()
            self.assertIsInstance(l1.wait_lost(60), LeaseLost)
            with b.campaign(n, "b") as l2:
                self.assertGreater(l2.term, l1.term)
                self.assertEqual(b.leader(n).value, "b")
            self.assertIsNone(b.leader(n))
        finally:
            a.close()
            b.close()
            la.stop()
            lb.stop()
            redis.stop()


if __name__ == "__main__":
    unittest.main()
