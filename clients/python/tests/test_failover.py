"""Several lockd replicas on one Redis: a lease outlives the replica it was
granted on, and calls move on from dead and frozen replicas."""

import time
import unittest
import uuid

from lockd import Client

from . import harness

TTL = 2.0


class FailoverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = harness.start_redis()

    @classmethod
    def tearDownClass(cls):
        cls.redis.stop()

    def test_a_lease_survives_its_replica_draining_and_the_next_being_killed(self):
        first, second, third = (harness.start_lockd(self.redis) for _ in range(3))
        c = Client([first.addr, second.addr, third.addr], default_ttl=TTL)
        other = Client([third.addr])
        try:
            k = f"py/failover/{uuid.uuid4()}"
            lease = c.acquire(k)

            first.terminate()  # drains: its KeepAlive streams end UNAVAILABLE, the lease stays
            time.sleep(2 * TTL)
            self.assertTrue(lease.held, "kept alive on the second replica")
            self.assertIsNone(other.try_acquire(k))

            second.kill()  # no goodbye at all
            time.sleep(2 * TTL)
            self.assertTrue(lease.held, "kept alive on the third replica")
            self.assertIsNone(lease.lost_error)
            self.assertIsNone(other.try_acquire(k))

            lease.release()  # through the third replica
            other.try_acquire(k).release()
        finally:
            c.close()
            other.close()
            for l in (first, second, third):
                l.stop()

    def test_calls_move_on_from_dead_and_frozen_replicas(self):
        dead = f"127.0.0.1:{harness.free_port()}"
        frozen = harness.start_lockd(self.redis)
        alive = harness.start_lockd(self.redis)
        c = Client([dead, frozen.addr, alive.addr], call_timeout=1)
        try:
            frozen.freeze()
            k = f"py/move-on/{uuid.uuid4()}"
            lease = c.try_acquire(k)
            self.assertTrue(lease.held)
            lease.release()
            c.try_acquire(k).release()
            frozen.resume()
        finally:
            c.close()
            frozen.stop()
            alive.stop()


if __name__ == "__main__":
    unittest.main()
