"""A lease's loss is reported before anyone else is granted its key. Both sides
run on this machine, so the loss (read from the wall clock when the callback
runs) and the next owner's grant (by Redis's clock, the same wall clock) are
compared on one clock."""

import threading
import time
import unittest
import uuid
from datetime import datetime, timezone

from lockd import Client, LeaseLost

from . import harness

TTL = 2.0


def record_loss(lease):
    at = {}

    def lost(err):
        at["time"] = datetime.now(timezone.utc)
        at["err"] = err

    lease.on_lost(lost)
    return at


def in_background(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # reported by result()
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def result(timeout=120):
        t.join(timeout)
        if "error" in out:
            raise out["error"]
        return out["value"]

    return result


class LossTest(unittest.TestCase):
    def test_reported_before_the_next_grant_when_redis_freezes_past_the_lease(self):
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis)
        a = Client([lockd.addr], default_ttl=TTL)
        b = Client([lockd.addr], retry_timeout=90)
        try:
            k = f"py/loss/redis/{uuid.uuid4()}"
            lease = a.acquire(k)
            lost = record_loss(lease)

            # Renewals cannot reach Redis; another owner waits meanwhile.
            redis.freeze()
            other = in_background(lambda: b.try_acquire(k, wait=90))
            time.sleep(2 * TTL)
            redis.resume()

            nxt = other()
            why = lease.wait_lost(10)
            harness.wait_for(lambda: "time" in lost, 10, "the loss callback")
            self.assertLess(lost["time"], nxt.grant_time, f"lost at {lost['time']}, next owner granted at {nxt.grant_time}")
            self.assertIsInstance(why, LeaseLost)
            self.assertIs(lost["err"], why)
            self.assertEqual(why.key, k)
            self.assertFalse(lease.held)
            with self.assertRaises(LeaseLost):
                lease.check_held()
            self.assertGreater(nxt.fencing_token, lease.fencing_token)
            # Releasing a lost lease is an error: the work it guarded may have
            # overlapped the next owner's. Releasing it again does nothing.
            with self.assertRaises(LeaseLost) as e:
                lease.release()
            self.assertIs(e.exception, why)
            lease.release()
            nxt.release()
        finally:
            a.close()
            b.close()
            lockd.stop()
            redis.stop()

    def test_reported_before_the_next_grant_when_the_only_replica_is_cut_off(self):
        redis = harness.start_redis()
        cut_off = harness.start_lockd(redis)
        other = harness.start_lockd(redis)
        a = Client([cut_off.addr], default_ttl=TTL)
        b = Client([other.addr])
        try:
            k = f"py/loss/cut-off/{uuid.uuid4()}"
            # The replica a knows answers nothing, so lockd cannot tell the
            # client: the client's own deadline must. Leaving the with block
            # raises the loss even though the work finished.
            with self.assertRaises(LeaseLost):
                with a.acquire(k) as lease:
                    lost = record_loss(lease)
                    cut_off.freeze()
                    nxt = b.try_acquire(k, wait=90)
                    self.assertIsNotNone(lease.wait_lost(0), "the work under the lock was told to stop")
            harness.wait_for(lambda: "time" in lost, 10, "the loss callback")
            self.assertLess(lost["time"], nxt.grant_time, f"lost at {lost['time']}, next owner granted at {nxt.grant_time}")
            nxt.release()
            cut_off.resume()
        finally:
            a.close()
            b.close()
            cut_off.stop()
            other.stop()
            redis.stop()

    def test_a_lease_taken_back_behind_its_back_is_lost(self):
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis)
        c = Client([lockd.addr], default_ttl=TTL)
        try:
            k = f"py/loss/taken/{uuid.uuid4()}"
            lease = c.acquire(k)
            c._release(k, lease.lease_id)  # as an admin's ForceRelease would
            why = lease.wait_lost(10)
            self.assertIsInstance(why, LeaseLost)
            self.assertIn("NOT_FOUND", why.reason)
            with self.assertRaises(LeaseLost):
                lease.release()
        finally:
            c.close()
            lockd.stop()
            redis.stop()


if __name__ == "__main__":
    unittest.main()
