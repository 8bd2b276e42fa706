"""Semaphores against real lockd and redis-server processes."""

import threading
import time
import unittest
import uuid

import grpc

from lockd import Client, LockdError

from . import harness


def key(what: str) -> str:
    return f"py/semaphore/{what}/{uuid.uuid4()}"


class SemaphoreTest(unittest.TestCase):
    def test_permits_are_capped_at_the_limit(self):
        redis = harness.start_redis()
        la = harness.start_lockd(redis)
        lb = harness.start_lockd(redis)
        a = Client([la.addr])
        b = Client([lb.addr])
        try:
            k = key("cap")
            mu = threading.Lock()
            inside = [0, 0]  # now, most

            def worker(i):
                for _ in range(3):
                    with (a if i % 2 else b).acquire_permit(k, 3) as p:
                        self.assertEqual(p.mode, "permit")
                        with mu:
                            inside[0] += 1
                            inside[1] = max(inside[1], inside[0])
                        time.sleep(0.005)
                        with mu:
                            inside[0] -= 1

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertTrue(1 <= inside[1] <= 3, f"held at once: {inside[1]}")

            full = key("full")
            p1 = a.acquire_permit(full, 2)
            p2 = a.acquire_permit(full, 2)
            self.assertGreater(p2.fencing_token, p1.fencing_token)
            self.assertIsNone(b.try_acquire_permit(full, 2))
            self.assertIsNone(b.try_acquire_permit(full, 2, wait=0.1))
            with self.assertRaises(LockdError) as e:
                b.try_acquire_permit(full, 3)
            self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            with self.assertRaises(ValueError):
                b.try_acquire_permit(full, 0)
            p1.release()
            p3 = b.try_acquire_permit(full, 2, wait=30)
            self.assertIsNotNone(p3)
            p2.release()
            p3.release()
        finally:
            a.close()
            b.close()
            la.stop()
            lb.stop()
            redis.stop()


if __name__ == "__main__":
    unittest.main()
