'use strict';
// Runs the Node examples of the documentation (README.md and docs/), as
// written but for lockd's address, against a lockd on real Redis, importing
// this package as @lockd/client.
const { it } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startRedis, startLockd, repoRoot } = require('./harness');

/** documentation returns README.md and every page of docs/, where the examples live. */
function documentation() {
  const pages = fs.readdirSync(path.join(repoRoot, 'docs')).filter((f) => f.endsWith('.md')).sort();
  return [path.join(repoRoot, 'README.md'), ...pages.map((f) => path.join(repoRoot, 'docs', f))]
    .map((f) => fs.readFileSync(f, 'utf8'))
    .join('\n');
}

/** runBlock runs the documentation's js block named name against a lockd of its own; returns its output. */
async function runBlock(name) {
  const block = documentation().match(new RegExp(`<!-- ${name}[ :][^>]*-->\\s*\`\`\`js\\n([\\s\\S]*?)\`\`\``));
  assert.ok(block, `README.md and docs/ have no ${name} block`);
  const redis = await startRedis();
  const lockd = await startLockd(redis);
  try {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-readme-'));
    fs.mkdirSync(path.join(dir, 'node_modules', '@lockd'), { recursive: true });
    fs.symlinkSync(path.resolve(__dirname, '..'), path.join(dir, 'node_modules', '@lockd', 'client'));
    fs.writeFileSync(path.join(dir, 'example.mjs'), block[1].replaceAll('127.0.0.1:50051', lockd.addr));
    return execFileSync(process.execPath, ['example.mjs'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
  } finally {
    await lockd.stop();
    await redis.stop();
  }
}

it('runs the README example', async () => {
  const out = await runBlock('node-example');
  assert.match(out, /charging order 42 with fencing token \d+/);
  assert.match(out, /writing with fencing token \d+/);
});

it('runs the README election example', async () => {
  const out = await runBlock('node-election-example');
  assert.match(out, /scheduling with term \d+/);
  assert.match(out, /no leader/);
  assert.match(out, /calling the upstream with permit \d+/);
});
