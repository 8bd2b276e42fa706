'use strict';
// Runs the Node example of README.md, as written but for lockd's address,
// against a lockd on real Redis, importing this package as @lockd/client.
const { it } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startRedis, startLockd, repoRoot } = require('./harness');

it('runs the README example', async () => {
  const readme = fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const block = readme.match(/<!-- node-example[^>]*-->\s*```js\n([\s\S]*?)```/);
  assert.ok(block, 'README.md has no node-example block');
  const redis = await startRedis();
  const lockd = await startLockd(redis);
  try {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-readme-'));
    fs.mkdirSync(path.join(dir, 'node_modules', '@lockd'), { recursive: true });
    fs.symlinkSync(path.resolve(__dirname, '..'), path.join(dir, 'node_modules', '@lockd', 'client'));
    fs.writeFileSync(path.join(dir, 'example.mjs'), block[1].replaceAll('127.0.0.1:50051', lockd.addr));
    const out = execFileSync(process.execPath, ['example.mjs'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.match(out, /charging order 42 with fencing token \d+/);
    assert.match(out, /writing with fencing token \d+/);
  } finally {
    await lockd.stop();
    await redis.stop();
  }
});
