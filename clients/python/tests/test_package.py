"""Builds the lockd-client wheel with Debian's setuptools (no PyPI), installs it
into a fresh virtualenv and runs an application that imports it against a
lockd on real Redis: what a user of the package gets."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

from . import harness

SOURCE = Path(__file__).resolve().parents[1]


class PackageTest(unittest.TestCase):
    def test_the_wheel_installs_and_runs(self):
        tmp = Path(tempfile.mkdtemp(prefix="lockd-python-pkg-"))
        try:
            # Build from a copy, so the checkout gets no build/ or egg-info.
            src = tmp / "src"
            shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
            # What `pip wheel --no-build-isolation` does: call the PEP 517 backend
            # pyproject.toml names, with the setuptools installed.
            subprocess.run(
                [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_wheel({str(tmp / 'dist')!r})"],
                cwd=src,
                check=True,
                capture_output=True,
            )
            (wheel,) = (tmp / "dist").glob("lockd_client-*.whl")
            with zipfile.ZipFile(wheel) as z:
                names = set(z.namelist())
                for want in ("lockd/__init__.py", "lockd/py.typed", "lockd/v1/lock_pb2.py", "lockd/v1/lock_pb2_grpc.py", "lockd/v1/lock_pb2.pyi"):
                    self.assertIn(want, names)
                self.assertFalse([n for n in names if n.startswith("tests/")], "the tests are not shipped")
                meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
                self.assertIn("License: Apache-2.0", meta)
                self.assertTrue(any(n.endswith(".dist-info/LICENSE") for n in names))
                self.assertIn("Requires-Dist: grpcio", meta)

            # grpcio and protobuf come from the system (Debian's); pip checks
            # they satisfy the wheel's requirements without reaching any index.
            venv = tmp / "venv"
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
            py = str(venv / "bin" / "python")
            subprocess.run(
                [sys.executable, "-m", "pip", "--python", py, "install", "--no-index", "--quiet", str(wheel)],
                check=True,
                capture_output=True,
            )

            redis = harness.start_redis()
            lockd = harness.start_lockd(redis)
            try:
                run = subprocess.run(
                    [py, str(SOURCE / "tests" / "consumer" / "app.py")],
                    cwd=tmp,  # not the checkout, which would shadow the installed package
                    env={**os.environ, "LOCKD_ADDR": lockd.addr, "PYTHONPATH": ""},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            finally:
                lockd.stop()
                redis.stop()
            out = run.stdout
            self.assertEqual(run.returncode, 0, out + run.stderr)
            self.assertRegex(out, rf"installed lockd-client 0\.1\.0 \(Apache-2\.0\) at {venv}/lib/python3[.0-9]*/site-packages/lockd\n")
            self.assertRegex(out, r"holding consumer/orders/42 \(write\) with fencing token \d+; a second owner got it: False\n")
            self.assertIn("permit: permit\n", out)
            self.assertIn("leader py-1:8080 in term matching\n", out)
            self.assertIn("leader after resigning: None\n", out)
            self.assertIn("empty key: INVALID_ARGUMENT\n", out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
