"""The retry policy, against in-process gRPC servers that fail on purpose: a
call that meets UNAVAILABLE moves to the next target with the same request_id
(so lockd can tell a retry from a new call), and other errors are not retried."""

import threading
import time
import unittest
from concurrent import futures

import grpc

from lockd import Client, LockdError
from lockd.v1 import lock_pb2, lock_pb2_grpc

from . import harness


class FakeLocks(lock_pb2_grpc.LockServiceServicer):
    """FakeLocks records every Acquire and Release; it answers with `fail` (a
    status code) or grants a lease that KeepAlive renews."""

    def __init__(self, fail=None):
        self.fail = fail
        self.calls = []
        self.mu = threading.Lock()

    def _lease(self, key):
        l = lock_pb2.Lease(key=key, lease_id="lease-1", owner="o", mode=lock_pb2.LOCK_MODE_WRITE, fencing_token=7, hold_count=1)
        l.ttl.FromSeconds(30)
        l.expire_time.FromNanoseconds(time.time_ns() + 30 * 10**9)
        return l

    def _record(self, method, request, context):
        with self.mu:
            self.calls.append((method, request.request_id))
        if self.fail is not None:
            context.abort(self.fail, "failing on purpose")

    def Acquire(self, request, context):
        self._record("Acquire", request, context)
        return lock_pb2.AcquireResponse(acquired=True, lease=self._lease(request.key))

    def Release(self, request, context):
        self._record("Release", request, context)
        return lock_pb2.ReleaseResponse()

    def KeepAlive(self, request, context):
        while context.is_active():
            yield lock_pb2.KeepAliveResponse(lease=self._lease(request.key))
            time.sleep(1)


def serve(servicer):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    lock_pb2_grpc.add_LockServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class RetryTest(unittest.TestCase):
    def test_unavailable_moves_to_the_next_target_with_the_same_request_id(self):
        down_locks, up_locks = FakeLocks(fail=grpc.StatusCode.UNAVAILABLE), FakeLocks()
        down, down_addr = serve(down_locks)
        up, up_addr = serve(up_locks)
        try:
            with Client([down_addr, up_addr]) as c:
                lease = c.try_acquire("k")
                self.assertEqual(lease.fencing_token, 7)
                lease.release()  # goes to the target that answered
            tried = [rid for m, rid in down_locks.calls if m == "Acquire"]
            acquires = [rid for m, rid in up_locks.calls if m == "Acquire"]
            self.assertEqual(len(acquires), 1)
            self.assertTrue(acquires[0])
            self.assertEqual(tried, acquires, "the retry carried the first attempt's request_id")
            releases = [rid for m, rid in up_locks.calls if m == "Release"]
            self.assertEqual(len(releases), 1)
            self.assertNotIn(releases[0], ("", acquires[0]))
        finally:
            down.stop(None)
            up.stop(None)

    def test_other_errors_are_not_retried(self):
        refusing, other = FakeLocks(fail=grpc.StatusCode.PERMISSION_DENIED), FakeLocks()
        server, addr = serve(refusing)
        server2, addr2 = serve(other)
        try:
            with Client([addr, addr2]) as c:
                with self.assertRaises(LockdError) as e:
                    c.try_acquire("k")
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(len(refusing.calls), 1)
            self.assertEqual(other.calls, [])
        finally:
            server.stop(None)
            server2.stop(None)

    def test_retries_stop_after_the_retry_timeout(self):
        dead = f"127.0.0.1:{harness.free_port()}"
        with Client([dead], retry_timeout=0.5) as c:
            with self.assertRaises(LockdError) as e:
                c.try_acquire("k")
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertIn("retries exhausted", str(e.exception))


if __name__ == "__main__":
    unittest.main()
