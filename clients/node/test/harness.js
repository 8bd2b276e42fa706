'use strict';
// Runs what the tests need as real processes on free loopback ports:
// redis-server, lockd and the fake WeChat upstream. Each is stopped by stop()
// (and, should the test process exit early, on exit); nothing else is touched.
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const started = new Set();
process.on('exit', () => {
  for (const p of started) {
    try {
      p.kill('SIGKILL');
    } catch {}
  }
});

const repoRoot = path.resolve(__dirname, '..', '..', '..');
const bins = {};

function binary(env, name, pkg) {
  if (process.env[env]) return path.resolve(process.env[env]);
  if (!bins[name]) {
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-')), name);
    execFileSync('go', ['build', '-o', out, pkg], { cwd: repoRoot, stdio: 'inherit' });
    bins[name] = out;
  }
  return bins[name];
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Server {
  constructor(cmd, args, env) {
    this.logs = '';
    this.proc = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout.on('data', (d) => (this.logs += d));
    this.proc.stderr.on('data', (d) => (this.logs += d));
    this.exited = new Promise((resolve) => this.proc.on('exit', resolve));
    started.add(this.proc);
  }

  get alive() {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async waitUntil(what, check) {
    const deadline = Date.now() + 30_000;
    while (!(await check())) {
      if (!this.alive) throw new Error(`${what} exited:\n${this.logs}`);
      if (Date.now() > deadline) throw new Error(`${what} not ready in 30s:\n${this.logs}`);
      await sleep(50);
    }
  }

  /** freeze stops the process (SIGSTOP): it keeps its sockets but answers nothing. */
  freeze() {
    this.proc.kill('SIGSTOP');
  }

  resume() {
    this.proc.kill('SIGCONT');
  }

  /** kill kills the process at once. */
  async kill() {
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  /** terminate asks the process to shut down (SIGTERM) and waits for it. */
  async terminate() {
    this.proc.kill('SIGTERM');
    await this.exited;
  }

  async stop() {
    if (this.alive) {
      this.proc.kill('SIGCONT');
      this.proc.kill('SIGKILL');
      await this.exited;
    }
    started.delete(this.proc);
  }
}

function connects(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

function pong(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write('PING\r\n'));
    s.setTimeout(1000, () => {
      s.destroy();
      resolve(false);
    });
    s.on('data', (d) => {
      s.destroy();
      resolve(d.toString().startsWith('+PONG'));
    });
    s.on('error', () => resolve(false));
  });
}

async function startRedis() {
  const port = await freePort();
  const r = new Server('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']);
  r.addr = `127.0.0.1:${port}`;
  await r.waitUntil('redis-server', () => pong(port));
  return r;
}

/** startLockd runs lockd on redis with extra flags and env, and waits for /readyz. */
async function startLockd(redis, { flags = [], env = {} } = {}) {
  const addr = `127.0.0.1:${await freePort()}`;
  const http = `127.0.0.1:${await freePort()}`;
  const l = new Server(
    binary('LOCKD_BIN', 'lockd', './cmd/lockd'),
    [`--listen=${addr}`, `--http-listen=${http}`, `--redis=${redis.addr}`, ...flags],
    env,
  );
  l.addr = addr;
  await l.waitUntil('lockd', async () => {
    try {
      return (await fetch(`http://${http}/readyz`)).status === 200;
    } catch {
      return false;
    }
  });
  return l;
}

async function startWeChatFake(appAndSecret) {
  const port = await freePort();
  const w = new Server(binary('WECHAT_FAKE_BIN', 'wechat-fake', './cmd/wechat-fake'), [
    `--listen=127.0.0.1:${port}`,
    '--app',
    appAndSecret,
  ]);
  w.base = `http://127.0.0.1:${port}`;
  // reject makes the upstream refuse tok from now on, as if another system replaced it.
  w.reject = async (tok) => {
    const res = await fetch(`${w.base}/fake/reject?access_token=${encodeURIComponent(tok)}`, { method: 'POST' });
    if (res.status !== 204) throw new Error(`wechat-fake: POST /fake/reject: HTTP ${res.status}`);
  };
  await w.waitUntil('wechat-fake', () => connects(port));
  return w;
}

/** startCommand runs the lockd binary with args (a client command such as lockd lock). */
function startCommand(args) {
  return new Server(binary('LOCKD_BIN', 'lockd', './cmd/lockd'), args, {});
}

module.exports = { startRedis, startLockd, startWeChatFake, startCommand, freePort, sleep, repoRoot };
