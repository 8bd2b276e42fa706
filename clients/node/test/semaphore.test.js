'use strict';
// Semaphores against real lockd and redis-server processes.
const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { LockdClient, LockdError, status } = require('..');
const { startRedis, startLockd, startCommand, sleep } = require('./harness');

const key = (what) => `node/semaphore/${what}/${crypto.randomUUID()}`;

describe('semaphore', () => {
  it('caps permits at the limit', async () => {
    const redis = await startRedis();
    const la = await startLockd(redis);
    const lb = await startLockd(redis);
    const a = new LockdClient({ targets: [la.addr] });
    const b = new LockdClient({ targets: [lb.addr] });
    try {
      const k = key('cap');
      let inside = 0;
      let most = 0;
      await Promise.all(
        Array.from({ length: 10 }, async (_, i) => {
          for (let round = 0; round < 3; round++) {
            await (i % 2 ? a : b).withPermit(k, 3, async (p) => {
              assert.equal(p.mode, 'permit');
              most = Math.max(most, ++inside);
              await sleep(5);
              inside--;
            });
          }
        }),
      );
      assert.ok(most >= 1 && most <= 3, `held at once: ${most}`);

      const full = key('full');
      const p1 = await a.acquirePermit(full, 2);
      const p2 = await a.acquirePermit(full, 2);
      assert.ok(p2.fencingToken > p1.fencingToken);
      assert.equal(await b.tryAcquirePermit(full, 2), null);
      assert.equal(await b.tryAcquirePermit(full, 2, { waitMs: 100 }), null);
      await assert.rejects(b.tryAcquirePermit(full, 3), (e) => e instanceof LockdError && e.code === status.FAILED_PRECONDITION);
      await assert.rejects(b.tryAcquirePermit(full, 0), RangeError);
      await p1.release();
      const p3 = await b.tryAcquirePermit(full, 2, { waitMs: 30_000 });
      assert.ok(p3);
      await p2.release();
      await p3.release();
    } finally {
      await a.close();
      await b.close();
      await la.stop();
      await lb.stop();
      await redis.stop();
    }
  });

  // Killed uncleanly, lockd lock does not release its permit (CMD's
  // processes may still run until its guardian has stopped them): the
  // permit comes back when its ttl runs out.
  it("gives a crashed holder's permit back", async () => {
    const redis = await startRedis();
    const lockd = await startLockd(redis);
    const c = new LockdClient({ targets: [lockd.addr] });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-permit-'));
    const up = path.join(dir, 'up');
    const k = key('crash');
    const holder = startCommand(['lock', `--addr=${lockd.addr}`, '-n', '1', '--ttl=5s', k, '--', 'sh', '-c', `touch ${up}; exec sleep 600`]);
    try {
      await holder.waitUntil('lockd lock -n 1', () => fs.existsSync(up));
      assert.equal(await c.tryAcquirePermit(k, 1), null);
      await holder.kill();
      const p = await c.tryAcquirePermit(k, 1, { waitMs: 20_000, ttlMs: 2000 });
      assert.ok(p, 'the permit came back');
      // Taken back behind the holder's back: the loss is signalled.
      await c._release(k, p.leaseId);
      await p.lost;
      assert.equal(p.held, false);
    } finally {
      await holder.stop();
      await c.close();
      await lockd.stop();
      await redis.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
