'use strict';
// Several lockd replicas on one Redis: a lease outlives the replica it was
// granted on, and calls move on from dead and frozen replicas.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { LockdClient } = require('..');
const { startRedis, startLockd, freePort, sleep } = require('./harness');

const TTL_MS = 2000;

describe('failover', () => {
  let redis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  it('keeps a lease through its replica draining and the next being killed', async () => {
    const first = await startLockd(redis);
    const second = await startLockd(redis);
    const third = await startLockd(redis);
    const c = new LockdClient({ targets: [first.addr, second.addr, third.addr], defaultTtlMs: TTL_MS });
    const other = new LockdClient({ targets: [third.addr] });
    try {
      const k = `node/failover/${crypto.randomUUID()}`;
      const lease = await c.acquire(k);

      await first.terminate(); // drains: its KeepAlive streams end UNAVAILABLE, the lease stays
      await sleep(2 * TTL_MS);
      assert.ok(lease.held, 'kept alive on the second replica');
      assert.equal(await other.tryAcquire(k), null);

      await second.kill(); // no goodbye at all
      await sleep(2 * TTL_MS);
      assert.ok(lease.held, 'kept alive on the third replica');
      assert.equal(lease.signal.aborted, false);
      assert.equal(await other.tryAcquire(k), null);

      await lease.release(); // through the third replica
      await (await other.tryAcquire(k)).release();
    } finally {
      await c.close();
      await other.close();
      for (const l of [first, second, third]) await l.stop();
    }
  });

  it('moves calls on from dead and frozen replicas', async () => {
    const dead = `127.0.0.1:${await freePort()}`;
    const frozen = await startLockd(redis);
    const alive = await startLockd(redis);
    const c = new LockdClient({ targets: [dead, frozen.addr, alive.addr], callTimeoutMs: 1000 });
    try {
      frozen.freeze();
      const k = `node/move-on/${crypto.randomUUID()}`;
      const lease = await c.tryAcquire(k);
      assert.ok(lease.held);
      await lease.release();
      await (await c.tryAcquire(k)).release();
      frozen.resume();
    } finally {
      await c.close();
      await frozen.stop();
      await alive.stop();
    }
  });
});
