"""Leases against real lockd and redis-server processes."""

import time
import unittest
import uuid

import grpc

from lockd import Client, LeaseLost, LockdError

from . import harness


def key(name: str) -> str:
    return f"py/{name}/{uuid.uuid4()}"


class LeaseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = harness.start_redis()
        cls.lockd = harness.start_lockd(cls.redis)
        cls.a = Client([cls.lockd.addr])
        cls.b = Client([cls.lockd.addr])

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()
        cls.lockd.stop()
        cls.redis.stop()

    def test_every_new_lease_has_a_greater_fencing_token(self):
        k = key("fencing")
        first = self.a.acquire(k)
        self.assertEqual((first.key, first.mode, first.hold_count), (k, "write", 1))
        self.assertIsInstance(first.fencing_token, int)
        first.release()
        second = self.b.acquire(k)
        self.assertGreater(second.fencing_token, first.fencing_token)
        second.release()

    def test_a_busy_key_is_refused_and_freed_at_once_on_release(self):
        k = key("busy")
        with self.a.acquire(k) as held:
            self.assertTrue(held.held)
            self.assertIsNone(self.b.try_acquire(k))
            self.assertIsNone(self.b.try_acquire(k, wait=0.2))
        self.assertFalse(held.held)
        with self.assertRaisesRegex(RuntimeError, "released"):
            held.check_held()
        held.release()  # a second time does nothing
        nxt = self.b.try_acquire(k)
        self.assertIsNotNone(nxt)
        nxt.release()

    def test_a_waiter_gets_the_key_when_it_is_released(self):
        k = key("wait")
        held = self.a.acquire(k)
        import threading

        got = []
        t = threading.Thread(target=lambda: got.append(self.b.try_acquire(k, wait=30)))
        t.start()
        time.sleep(0.2)
        held.release()
        t.join(30)
        self.assertIsNotNone(got[0])
        self.assertGreater(got[0].fencing_token, held.fencing_token)
        got[0].release()

    def test_readers_share_and_writers_wait(self):
        k = key("rw")
        r1 = self.a.acquire(k, mode="read")
        r2 = self.b.acquire(k, mode="read")
        self.assertEqual((r1.mode, r2.mode), ("read", "read"))
        self.assertIsNone(self.b.try_acquire(k))
        r1.release()
        r2.release()
        w = self.b.try_acquire(k)
        self.assertEqual(w.mode, "write")
        w.release()

    def test_the_same_owner_reenters_its_lease(self):
        k = key("reentrant")
        first = self.a.acquire(k, owner="worker-1")
        again = self.a.acquire(k, owner="worker-1")
        self.assertEqual(again.lease_id, first.lease_id)
        self.assertEqual(again.hold_count, 2)
        again.release()
        self.assertIsNone(self.b.try_acquire(k), "one hold is still there")
        first.release()
        self.b.try_acquire(k).release()

    def test_it_keeps_itself_alive_past_its_ttl(self):
        k = key("alive")
        with self.a.acquire(k, ttl=1) as lease:
            time.sleep(2.5)
            self.assertTrue(lease.held)
            lease.check_held()
            self.assertIsNone(self.b.try_acquire(k))
            self.assertEqual(lease.ttl, 1.0)

    def test_bad_input_gets_a_clear_status(self):
        with self.assertRaises(LockdError) as e:
            self.a.try_acquire("")
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertNotIsInstance(e.exception, LeaseLost)
        with self.assertRaises(ValueError):
            self.a.try_acquire(key("ttl"), ttl=0)
        with self.assertRaises(ValueError):
            self.a.try_acquire(key("mode"), mode="exclusive")


if __name__ == "__main__":
    unittest.main()
