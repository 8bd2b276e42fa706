"""Fleet-wide rate limits (Client.take and Client.wait) against real lockd and
redis-server processes, and the Python rate-limit example of docs/."""

import threading
import time
import unittest
import uuid
from concurrent import futures
from typing import List
from unittest import mock

import grpc

from lockd import Client, Decision, LockdError, Rate, RateLimited, _ratelimit
from lockd.v1 import ratelimit_pb2_grpc

from . import harness
from .test_readme import doc_block, run_example


def key(what: str) -> str:
    return f"py/ratelimit/{what}/{uuid.uuid4()}"


class Relay(ratelimit_pb2_grpc.RateLimitServiceServicer):
    """Relay passes Take calls on to a lockd and records each call's
    request_id. The first ``lose`` replies are lost on the way back: lockd
    decided (and spent), but the caller gets UNAVAILABLE."""

    def __init__(self, lockd_addr: str, lose: int = 0):
        self.channel = grpc.insecure_channel(lockd_addr)
        self.stub = ratelimit_pb2_grpc.RateLimitServiceStub(self.channel)
        self.lose = lose
        self.request_ids: List[str] = []
        self.mu = threading.Lock()

    def Take(self, request, context):
        with self.mu:
            self.request_ids.append(request.request_id)
            lose = self.lose > 0
            self.lose -= lose
        try:
            reply = self.stub.Take(request, timeout=context.time_remaining())
        except grpc.RpcError as e:
            context.abort(e.code(), e.details())
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the reply was lost on the way back")
        return reply

    def serve(self):
        """Starts serving on a free loopback port; returns the server and its address."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        ratelimit_pb2_grpc.add_RateLimitServiceServicer_to_server(self, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        return server, f"127.0.0.1:{port}"


class RateLimitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = harness.start_redis()
        cls.la = harness.start_lockd(cls.redis)
        cls.lb = harness.start_lockd(cls.redis)

    @classmethod
    def tearDownClass(cls):
        cls.la.stop()
        cls.lb.stop()
        cls.redis.stop()

    def relays(self, *lose: int):
        """Relays to lockd, losing that many replies each; stopped at the test's end."""
        out = []
        for n in lose:
            relay = Relay(self.la.addr, n)
            server, addr = relay.serve()
            self.addCleanup(relay.channel.close)
            self.addCleanup(server.stop, None)
            out.append((relay, addr))
        return out

    def test_take_and_wait_share_one_budget_across_replicas(self):
        with Client([self.la.addr]) as a, Client([self.lb.addr]) as b:
            k = key("share")
            rate = Rate(20, 60, burst=2)  # a turn every 3s after a burst of 2
            first = a.take(k, rate)
            self.assertEqual((first.allowed, first.remaining, first.retry_after), (True, 1, 0.0), first)
            self.assertGreater(first.reset_after, 0)
            second = b.take(k, rate)
            self.assertEqual((second.allowed, second.remaining), (True, 0), second)
            asked = time.monotonic()
            third = a.take(k, rate)
            self.assertFalse(third.allowed, third)
            self.assertEqual(third.remaining, 0)
            self.assertTrue(0 < third.retry_after <= 3, third)

            # wait blocks until its turn, which lockd reserved for it: it comes
            # no sooner than the refused take was told (by Redis's clock).
            waited = b.wait(k, rate)
            self.assertIsInstance(waited, Decision)
            self.assertTrue(waited.allowed, waited)
            self.assertGreaterEqual(time.monotonic() - asked, third.retry_after - 0.01)
            self.assertFalse(a.take(k, rate).allowed, "the waiter spent the turn")

            # A turn beyond the timeout is refused at once, saying when it would come.
            with self.assertRaises(RateLimited) as late:
                a.wait(k, rate, cost=2, timeout=1)
            self.assertIsInstance(late.exception, LockdError)
            self.assertEqual(late.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(late.exception.key, k)
            self.assertGreater(late.exception.retry_after, 1)
            self.assertIn(k, str(late.exception))
            self.assertTrue(a.wait(k, rate, timeout=30).allowed)

    def test_a_turn_past_the_timeout_is_refused_at_once_and_spends_nothing(self):
        with Client([self.la.addr]) as c:
            k = key("late")
            rate = Rate(2, 3600, burst=1)  # a turn every 30 minutes
            self.assertTrue(c.take(k, rate).allowed)
            with self.assertRaises(RateLimited) as late:
                c.wait(k, rate, timeout=600)
            # Answered at once: a waiter that sat out its 10 minutes would be
            # told about 20 minutes, not about 30.
            self.assertTrue(1500 < late.exception.retry_after <= 1800, late.exception.retry_after)
            # Refused, it reserved nothing: the next turn is still the first one.
            after = c.take(k, rate)
            self.assertFalse(after.allowed)
            self.assertLessEqual(after.retry_after, late.exception.retry_after)
            # timeout=0 decides at once too.
            with self.assertRaises(RateLimited):
                c.wait(k, rate, timeout=0)

    def test_another_rate_for_a_key_in_use_is_refused(self):
        with Client([self.la.addr]) as a, Client([self.lb.addr]) as b:
            k = key("conflict")
            self.assertTrue(a.take(k, Rate(10, 60)).allowed)
            for other in (Rate(20, 60), Rate(10, 30), Rate(10, 60, burst=20)):
                for call in (lambda: b.take(k, other), lambda: b.wait(k, other, timeout=5)):
                    with self.assertRaises(LockdError) as refused:
                        call()
                    self.assertNotIsInstance(refused.exception, RateLimited)
                    self.assertEqual(refused.exception.code, grpc.StatusCode.FAILED_PRECONDITION, other)
            self.assertTrue(b.take(k, Rate(10, 60, burst=10)).allowed, "burst=limit is the same rate")

    def test_bad_costs_and_rates_raise_value_error_before_any_call(self):
        for bad in (
            lambda: Rate(0, 60),
            lambda: Rate(2**32, 60),
            lambda: Rate(1.5, 60),
            lambda: Rate(True, 60),
            lambda: Rate(10, 0),
            lambda: Rate(10, -1),
            lambda: Rate(10, "60"),
            lambda: Rate(10, float("inf")),
            lambda: Rate(10, float("nan")),
            lambda: Rate(10, 60, burst=-1),
        ):
            self.assertRaises(ValueError, bad)
        # No lockd behind this target: a call would end in LockdError, not ValueError.
        with Client([f"127.0.0.1:{harness.free_port()}"], retry_timeout=0.5) as c:
            rate = Rate(10, 60)
            for bad in (
                lambda: c.take("k", rate, cost=0),
                lambda: c.take("k", rate, cost=-1),
                lambda: c.take("k", rate, cost=2**32),
                lambda: c.take("k", rate, cost=1.0),
                lambda: c.wait("k", rate, cost=0),
                lambda: c.wait("k", rate, timeout=-1),
                lambda: c.wait("k", rate, timeout=float("inf")),
                lambda: c.take("k", (10, 60)),
            ):
                self.assertRaises(ValueError, bad)
            with self.assertRaises(LockdError) as down:
                c.take("k", rate)
            self.assertEqual(down.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_a_take_whose_reply_was_lost_is_not_spent_twice(self):
        (lossy, lossy_addr), (relay, relay_addr) = self.relays(1, 0)
        with Client([lossy_addr, relay_addr]) as c:
            k = key("lost-reply")
            rate = Rate(1, 3600)
            # lockd allowed the take, the reply was lost, and the retry on the
            # next target, with the same request_id, gets that decision back:
            # a fresh request_id would be refused (one an hour).
            d = c.take(k, rate)
            self.assertTrue(d.allowed, d)
            self.assertEqual(d.remaining, 0)
            self.assertFalse(c.take(k, rate).allowed)
        self.assertEqual(len(lossy.request_ids), 1)
        self.assertEqual(len(relay.request_ids), 2)
        self.assertTrue(lossy.request_ids[0])
        self.assertEqual(relay.request_ids[0], lossy.request_ids[0], "the retry carried the call's request_id")
        self.assertNotEqual(relay.request_ids[1], relay.request_ids[0], "each call has a request_id of its own")

    def test_a_waiter_whose_reply_was_lost_keeps_its_turn(self):
        (lossy, lossy_addr), (relay, relay_addr) = self.relays(1, 0)
        k = key("lost-turn")
        rate = Rate(1, 3)  # a turn every 3s
        with Client([self.la.addr]) as direct, Client([lossy_addr, relay_addr]) as c:
            self.assertTrue(direct.take(k, rate).allowed)
            # lockd gives the waiter the next turn and answers when it comes;
            # the answer is lost. The retry, with the same request_id, gets
            # that turn back: a fresh request_id would get the turn after,
            # past the timeout, and raise RateLimited.
            d = c.wait(k, rate, timeout=4)
            self.assertTrue(d.allowed, d)
            self.assertFalse(direct.take(k, rate).allowed)
        self.assertEqual(len(lossy.request_ids), 1)
        self.assertEqual(relay.request_ids, lossy.request_ids)

    def test_a_wait_without_timeout_asks_again_for_a_turn_beyond_one_call(self):
        # With calls of at most 1s, a turn about 3s away is refused at first,
        # then asked for again once it is near, and waited for.
        with mock.patch.object(_ratelimit, "MAX_WAIT_CHUNK", 1.0), Client([self.la.addr]) as c:
            k = key("far-turn")
            rate = Rate(20, 60, burst=1)  # a turn every 3s
            self.assertTrue(c.take(k, rate).allowed)
            far = c.take(k, rate)
            self.assertTrue(1 < far.retry_after <= 3, far)
            self.assertTrue(c.wait(k, rate).allowed)
            self.assertFalse(c.take(k, rate).allowed, "the waiter spent its turn")

    def test_closing_the_client_ends_a_wait(self):
        with mock.patch.object(_ratelimit, "MAX_WAIT_CHUNK", 1.0):
            c = Client([self.la.addr])
            k = key("closed")
            rate = Rate(1, 3600)  # the next turn in an hour
            self.assertTrue(c.take(k, rate).allowed)
            paused = threading.Event()
            pause = c._transport.pause

            def pausing(secs: float) -> None:
                paused.set()
                pause(secs)

            c._transport.pause = pausing
            ended = []
            waiter = threading.Thread(target=lambda: ended.append(self.wait_for_error(c, k, rate)), daemon=True)
            waiter.start()
            self.assertTrue(paused.wait(60), "the wait never paused between its calls")
            c.close()
            waiter.join(60)  # far longer than it takes; a wait that ignored close would sit out the hour
            self.assertFalse(waiter.is_alive(), "the wait outlived its client")
            self.assertEqual(len(ended), 1)
            self.assertIsInstance(ended[0], LockdError)
            self.assertEqual(ended[0].code, grpc.StatusCode.CANCELLED)

    @staticmethod
    def wait_for_error(c: Client, k: str, rate: Rate):
        try:
            c.wait(k, rate)
        except LockdError as e:
            return e
        return None

    def test_the_docs_example_runs(self):
        run = run_example(doc_block("python-ratelimit-example"), self.la.addr)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.stdout.count("sent message"), 12, run.stdout)
        self.assertIn("sent message 11\n", run.stdout)
        self.assertIn("allowed: True, remaining: 1\n", run.stdout)
        self.assertIn("allowed: True, remaining: 0\n", run.stdout)
        self.assertRegex(run.stdout, r"allowed: False, remaining: 0, again in \d+s\n")
        self.assertRegex(run.stdout, r"not within 5s: allowed in \d+s\n")
        self.assertIn("another rate: FAILED_PRECONDITION\n", run.stdout)


if __name__ == "__main__":
    unittest.main()
