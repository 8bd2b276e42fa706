'use strict';
// Packs @lockd/client with `npm pack`, installs the tarball into a fresh
// TypeScript project (test/consumer), type-checks and compiles it with tsc,
// and runs it against a lockd on real Redis: what a user of the package gets.
const { it } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startRedis, startLockd } = require('./harness');

const pkgDir = path.join(__dirname, '..');
const npm = (args, cwd) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const installedVersion = (name) => require(path.join(pkgDir, 'node_modules', name, 'package.json')).version;

it('packs a tarball that a TypeScript project installs, type-checks and runs', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-pack-'));
  const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', dir], pkgDir));
  const files = packed.files.map((f) => f.path).sort();
  for (const f of ['LICENSE', 'README.md', 'index.d.ts', 'lib/index.js', 'package.json', 'proto/lockd/v1/lock.proto']) {
    assert.ok(files.includes(f), `the tarball lacks ${f}: ${files.join(' ')}`);
  }
  assert.deepEqual(files.filter((f) => !/^(LICENSE|README\.md|index\.d\.ts|package\.json|lib\/[a-z]+\.js|proto\/lockd\/v1\/[a-z]+\.proto)$/.test(f)), []);
  assert.ok(!fs.existsSync(path.join(pkgDir, 'proto')), 'postpack left the copied protos behind');

  const consumer = path.join(dir, 'consumer');
  fs.cpSync(path.join(__dirname, 'consumer'), consumer, { recursive: true });
  fs.writeFileSync(
    path.join(consumer, 'package.json'),
    JSON.stringify({
      name: 'consumer',
      private: true,
      type: 'module',
      dependencies: { '@lockd/client': `file:../${packed.filename}` },
      devDependencies: { typescript: installedVersion('typescript'), '@types/node': installedVersion('@types/node') },
    }),
  );
  npm(['install', '--no-audit', '--no-fund', '--prefer-offline'], consumer);
  try {
    execFileSync(path.join(consumer, 'node_modules', '.bin', 'tsc'), ['-p', '.'], { cwd: consumer, encoding: 'utf8' });
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }

  const redis = await startRedis();
  const lockd = await startLockd(redis);
  try {
    const out = execFileSync(process.execPath, ['out/main.js'], {
      cwd: consumer,
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, LOCKD_ADDR: lockd.addr },
    });
    assert.match(out, /holding consumer\/orders\/42 \(write\) with fencing token \d+\n/);
    assert.match(out, /a second owner got it: false\n/);
    assert.match(out, /withLock returned 2\n/);
    assert.match(out, /readers: read,read\n/);
    assert.match(out, /permit: permit\n/);
    assert.match(out, /leader node-1:8080 in term matching\n/);
    assert.match(out, /leader after resigning: null\n/);
    assert.match(out, /empty key: INVALID_ARGUMENT\n/);
  } finally {
    await lockd.stop();
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
