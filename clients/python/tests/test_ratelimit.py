"""Rate limits from Python: the client does not wrap RateLimitService.Take, so
docs/clients.md points Python callers at the generated stub; this checks that
stub against a real lockd."""

import unittest
import uuid

import grpc
from google.protobuf.duration_pb2 import Duration

from lockd.v1 import ratelimit_pb2, ratelimit_pb2_grpc

from . import harness


class RateLimitStubTest(unittest.TestCase):
    def test_the_generated_stub_takes_from_a_limiter(self):
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis)
        channel = grpc.insecure_channel(lockd.addr)
        try:
            stub = ratelimit_pb2_grpc.RateLimitServiceStub(channel)
            key = f"py/ratelimit/{uuid.uuid4()}"
            # Two a minute: the first two are allowed, the third is told when to come back.
            answers = [
                stub.Take(ratelimit_pb2.TakeRequest(key=key, limit=2, period=Duration(seconds=60)), timeout=10)
                for _ in range(3)
            ]
            self.assertEqual([a.allowed for a in answers], [True, True, False])
            self.assertEqual(answers[2].remaining, 0)
            self.assertGreater(answers[2].retry_after.ToTimedelta().total_seconds(), 0)
            with self.assertRaises(grpc.RpcError) as refused:
                stub.Take(ratelimit_pb2.TakeRequest(key=key, limit=3, period=Duration(seconds=60)), timeout=10)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        finally:
            channel.close()
            lockd.stop()
            redis.stop()


if __name__ == "__main__":
    unittest.main()
