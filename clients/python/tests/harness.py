"""Runs what the tests need as real processes on free loopback ports:
redis-server, lockd and the fake WeChat upstream. Each is stopped by stop()
(and, should the tests end early, at exit); nothing else is touched.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[3]

_started: List[subprocess.Popen] = []
_bins: Dict[str, str] = {}
_mu = threading.Lock()


@atexit.register
def _kill_all() -> None:
    for p in list(_started):
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()


def binary(env: str, name: str, pkg: str) -> str:
    """The path of a lockd binary: the one env names, else one built with go."""
    if os.environ.get(env):
        return os.path.abspath(os.environ[env])
    with _mu:
        if name not in _bins:
            out = os.path.join(tempfile.mkdtemp(prefix="lockd-python-"), name)
            subprocess.run(["go", "build", "-o", out, pkg], cwd=REPO, check=True)
            _bins[name] = out
        return _bins[name]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """Server is a process the tests started; its output is kept for errors."""

    def __init__(self, args: List[str], env: Optional[Dict[str, str]] = None):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            args, env={**os.environ, **(env or {})}, stdout=self.log, stderr=subprocess.STDOUT
        )
        _started.append(self.proc)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def logs(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_until(self, what: str, check) -> None:
        deadline = time.monotonic() + 30
        while not check():
            if not self.alive:
                raise RuntimeError(f"{what} exited:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready in 30s:\n{self.logs()}")
            time.sleep(0.05)

    def freeze(self) -> None:
        """Stops the process (SIGSTOP): it keeps its sockets but answers nothing."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """Kills the process at once."""
        self.proc.kill()
        self.proc.wait()

    def terminate(self) -> None:
        """Asks the process to shut down (SIGTERM) and waits for it."""
        self.proc.terminate()
        self.proc.wait()

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        if self.proc in _started:
            _started.remove(self.proc)
        self.log.close()


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis() -> Server:
    port = free_port()
    server = os.environ.get("REDIS_SERVER_BIN", "redis-server")
    r = Server([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
    r.addr = f"127.0.0.1:{port}"
    r.wait_until("redis-server", lambda: _pong(port))
    return r


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def start_lockd(redis: Server, flags: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None) -> Server:
    """Runs lockd on redis with extra flags and env, and waits for /readyz."""
    addr = f"127.0.0.1:{free_port()}"
    http = f"127.0.0.1:{free_port()}"
    l = Server(
        [binary("LOCKD_BIN", "lockd", "./cmd/lockd"), f"--listen={addr}", f"--http-listen={http}", f"--redis={redis.addr}", *(flags or [])],
        env,
    )
    l.addr = addr
    l.http = http
    l.wait_until("lockd", lambda: _ready(f"http://{http}/readyz"))
    return l


def start_wechat_fake(app_and_secret: str) -> Server:
    port = free_port()
    w = Server([binary("WECHAT_FAKE_BIN", "wechat-fake", "./cmd/wechat-fake"), f"--listen=127.0.0.1:{port}", "--app", app_and_secret])
    w.base = f"http://127.0.0.1:{port}"
    w.wait_until("wechat-fake", lambda: _connects(port))
    return w


def reject(wechat: Server, token: str) -> None:
    """Makes the fake upstream refuse token from now on, as if another system replaced it."""
    from urllib.parse import quote

    req = urllib.request.Request(f"{wechat.base}/fake/reject?access_token={quote(token)}", method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        if r.status != 204:
            raise RuntimeError(f"wechat-fake: POST /fake/reject: HTTP {r.status}")


def wait_for(check, timeout: float = 60.0, what: str = "condition"):
    """Polls check until it returns something true, or fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met in {timeout}s")
        time.sleep(0.02)
