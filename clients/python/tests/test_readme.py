"""Runs the Python example of the documentation (README.md and docs/), as
written but for lockd's address, against a lockd on real Redis. doc_block
finds an example by the name in the comment above it; other tests run the
examples of their own topic with it."""

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


def doc_block(name: str) -> str:
    """The python block that follows <!-- name ... --> in README.md or docs/;
    a name must mark exactly one block."""
    found = re.findall(r"<!-- " + re.escape(name) + r"[ :][^>]*-->\s*```python\n(.*?)```", documentation(), re.S)
    if len(found) != 1:
        raise AssertionError(f"{len(found)} python blocks named {name} in README.md and docs/, want 1")
    return found[0]


def run_example(source: str, addr: str) -> subprocess.CompletedProcess:
    """Runs an example as written but for lockd's address, in the package's checkout."""
    return subprocess.run(
        [sys.executable, "-c", source.replace("127.0.0.1:50051", addr)],
        cwd=SOURCE,
        capture_output=True,
        text=True,
        timeout=60,
    )


class ReadmeTest(unittest.TestCase):
    def test_the_readme_example_runs(self):
        example = doc_block("python-example")
        redis = harness.start_redis()
        lockd = harness.start_lockd(redis)
        try:
            run = run_example(example, lockd.addr)
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
