"""Bearer tokens, permissions, TLS and the token client."""

import os
import subprocess
import tempfile
import time
import unittest

import grpc

from lockd import TLS, AccessToken, Client, LockdError

from . import harness

TOKEN = "orders-token-0123456789abcdef"


class AuthAndTokensTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lockd-python-auth-")
        cls.redis = harness.start_redis()
        cls.wechat = harness.start_wechat_fake("wx1234:app-secret")
        config = os.path.join(cls.dir, "lockd.yaml")
        with open(config, "w") as f:
            f.write(
                f"""apps:
  - {{name: mp, provider: wechat, appid: wx1234, secret_env: MP_SECRET, api_base: "{cls.wechat.base}"}}
auth:
  clients:
    - {{name: orders, token_env: ORDERS_TOKEN, locks: ["orders/"], apps: [mp]}}
"""
            )
        cls.lockd = harness.start_lockd(
            cls.redis, [f"--config={config}"], {"MP_SECRET": "app-secret", "ORDERS_TOKEN": TOKEN}
        )

    @classmethod
    def tearDownClass(cls):
        cls.lockd.stop()
        cls.wechat.stop()
        cls.redis.stop()

    def test_a_bearer_token_opens_the_clients_keys(self):
        with Client([self.lockd.addr]) as anonymous, Client([self.lockd.addr], token=TOKEN) as orders:
            with self.assertRaises(LockdError) as e:
                anonymous.try_acquire("orders/1")
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            orders.try_acquire("orders/1").release()
            with self.assertRaises(LockdError) as e:
                orders.try_acquire("billing/1")
            self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)

    def test_a_token_file_is_read_again_when_it_changes(self):
        path = os.path.join(self.dir, "token")
        with open(path, "w") as f:
            f.write("not-a-known-token-at-all\n")
        with Client([self.lockd.addr], token_file=path) as c:
            with self.assertRaises(LockdError) as e:
                c.try_acquire("orders/2")
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            with open(path, "w") as f:
                f.write(TOKEN + "\n")
            later = time.time() + 5
            os.utime(path, (later, later))
            c.try_acquire("orders/2").release()

    def test_access_tokens_are_shared_and_a_rejected_one_is_refreshed_once(self):
        with Client([self.lockd.addr], token=TOKEN) as c:
            first = c.tokens.get_access_token("mp")
            self.assertIsInstance(first, AccessToken)
            self.assertTrue(first.access_token)
            self.assertEqual(c.tokens.get_access_token("mp").access_token, first.access_token)
            with c.tokens.watch_access_token("mp") as watch:
                self.assertEqual(watch.next(timeout=30).access_token, first.access_token)
                # A report replaces the token only once the upstream refuses it.
                harness.reject(self.wechat, first.access_token)
                fresh = c.tokens.refresh_access_token("mp", first.access_token)
                self.assertNotEqual(fresh.access_token, first.access_token)
                self.assertEqual(c.tokens.refresh_access_token("mp", first.access_token).access_token, fresh.access_token)
                # The watcher hears of the new token without asking.
                self.assertEqual(watch.next(timeout=30).access_token, fresh.access_token)
            with self.assertRaises(StopIteration):
                watch.next(timeout=1)
            with self.assertRaises(LockdError) as e:
                c.tokens.get_access_token("nope")
            self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            with c.tokens.watch_access_token("nope") as refused:
                with self.assertRaises(LockdError) as e:
                    refused.next(timeout=30)
                self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)


def self_signed(d: str, name: str):
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "1", "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", os.path.join(d, f"{name}-key.pem"), "-out", os.path.join(d, f"{name}.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}-key.pem")


class TlsTest(unittest.TestCase):
    def test_leases_over_tls_and_mutual_tls(self):
        d = tempfile.mkdtemp(prefix="lockd-python-tls-")
        server_cert, server_key = self_signed(d, "server")
        client_cert, client_key = self_signed(d, "client")
        tls = [f"--tls-cert={server_cert}", f"--tls-key={server_key}"]
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis, tls)
        mutual = harness.start_lockd(redis, tls + [f"--tls-client-ca={client_cert}"])
        clients = {
            "good": Client([lockd.addr], tls=TLS(ca=server_cert)),
            "plain": Client([lockd.addr], retry_timeout=0.2),
            "named": Client([lockd.addr], tls=TLS(ca=server_cert, server_name="localhost")),
            "misnamed": Client([lockd.addr], tls=TLS(ca=server_cert, server_name="other.example"), retry_timeout=0.2),
            "with_cert": Client([mutual.addr], tls=TLS(ca=server_cert, cert=client_cert, key=client_key)),
            "without_cert": Client([mutual.addr], tls=TLS(ca=server_cert), retry_timeout=0.2),
        }
        try:
            clients["good"].try_acquire("py/tls").release()
            clients["named"].try_acquire("py/tls").release()
            with self.assertRaises(LockdError) as e:
                clients["misnamed"].try_acquire("py/tls")  # the certificate does not name other.example
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
            with self.assertRaises(LockdError) as e:
                clients["plain"].try_acquire("py/tls")
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
            clients["with_cert"].try_acquire("py/mtls").release()
            with self.assertRaises(LockdError) as e:
                clients["without_cert"].try_acquire("py/mtls")
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        finally:
            for c in clients.values():
                c.close()
            lockd.stop()
            mutual.stop()
            redis.stop()


if __name__ == "__main__":
    unittest.main()
