'use strict';
// Starts lockd and the fake upstream as processes on free loopback ports
// (the binaries named by LOCKD_BIN and WECHAT_FAKE_BIN, or built from the
// repository when those are unset), and stops exactly what it started.
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const repoRoot = path.resolve(__dirname, '..', '..', '..');
const started = new Set();
process.on('exit', () => {
  for (const p of started) {
    try {
      p.kill('SIGKILL');
    } catch {}
  }
});

function binary(env, pkg) {
  if (process.env[env]) return path.resolve(process.env[env]);
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-example-')), path.basename(pkg));
  execFileSync('go', ['build', '-o', out, pkg], { cwd: repoRoot, stdio: 'inherit' });
  process.env[env] = out;
  return out;
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

function connects(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

/** start runs a binary and waits until port accepts connections. */
async function start(env, pkg, args, port, extraEnv = {}) {
  let logs = '';
  const proc = spawn(binary(env, pkg), args, { env: { ...process.env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.on('data', (d) => (logs += d));
  proc.stderr.on('data', (d) => (logs += d));
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  started.add(proc);
  const deadline = Date.now() + 30_000;
  while (!(await connects(port))) {
    if (proc.exitCode !== null) throw new Error(`${pkg} exited:\n${logs}`);
    if (Date.now() > deadline) throw new Error(`${pkg} not ready in 30s:\n${logs}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    logs: () => logs,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGKILL');
        await exited;
      }
      started.delete(proc);
    },
  };
}

module.exports = { start, freePort };
