"""Runs the Python example of the documentation (README.md and docs/), as
written but for lockd's address, against a lockd on real Redis."""

import re
import subprocess
import sys
import unittest
from pathlib import Path

from . import harness

SOURCE = Path(__file__).resolve().parents[1]


def documentation() -> str:
    """README.md and every page of docs/: where the documentation's examples live."""
    pages = [harness.REPO / "README.md"] + sorted((harness.REPO / "docs").glob("*.md"))
    return "\n".join(p.read_text() for p in pages)


class ReadmeTest(unittest.TestCase):
    def test_the_readme_example_runs(self):
        m = re.search(r"<!-- python-example[ :][^>]*-->\s*```python\n(.*?)```", documentation(), re.S)
        self.assertIsNotNone(m, "README.md and docs/ have no python-example block")
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis)
        try:
            run = subprocess.run(
                [sys.executable, "-c", m.group(1).replace("127.0.0.1:50051", lockd.addr)],
                cwd=SOURCE,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            lockd.stop()
            redis.stop()
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertRegex(run.stdout, r"charging order 42 with fencing token \d+\n")
        self.assertRegex(run.stdout, r"writing with fencing token \d+\n")
        self.assertRegex(run.stdout, r"calling the upstream with permit \d+\n")
        self.assertRegex(run.stdout, r"scheduling, term \d+\n")
        self.assertIn("leader now: None\n", run.stdout)


if __name__ == "__main__":
    unittest.main()
