'use strict';
// Fleet-wide rate limits against real lockd and redis-server processes.
const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { LockdClient, LockdError, RateLimitedError, status } = require('..');
const { startRedis, startLockd, freePort } = require('./harness');

const key = (what) => `node/ratelimit/${what}/${crypto.randomUUID()}`;

describe('rate limits', () => {
  it('share one budget across replicas, and wait their turn', async () => {
    const redis = await startRedis();
    const la = await startLockd(redis);
    const lb = await startLockd(redis);
    const a = new LockdClient({ targets: [la.addr] });
    const b = new LockdClient({ targets: [lb.addr] });
    try {
      const k = key('share');
      const rate = { limit: 20, periodMs: 60_000, burst: 2 }; // a turn every 3s
      const first = await a.take(k, rate);
      assert.equal(first.allowed, true);
      assert.equal(first.remaining, 1);
      const second = await b.take(k, rate);
      assert.equal(second.allowed, true);
      assert.equal(second.remaining, 0);
      const third = await a.take(k, rate);
      assert.equal(third.allowed, false);
      assert.ok(third.retryAfterMs > 0 && third.retryAfterMs <= 3000, JSON.stringify(third));

      const waited = await b.wait(k, rate); // the next turn
      assert.equal(waited.allowed, true);

      // A turn beyond the bound is refused at once, saying when it would come.
      await assert.rejects(
        a.wait(k, rate, { cost: 2, waitMs: 1000 }),
        (e) => e instanceof RateLimitedError && e.code === status.RESOURCE_EXHAUSTED && e.retryAfterMs > 1000,
      );
      assert.equal((await a.wait(k, rate, { waitMs: 30_000 })).allowed, true);

      await assert.rejects(
        a.take(k, { limit: 40, periodMs: 60_000 }),
        (e) => e instanceof LockdError && e.code === status.FAILED_PRECONDITION,
      );
      await assert.rejects(a.take(k, rate, { cost: 0 }), RangeError);
      await assert.rejects(a.take(k, { limit: 0, periodMs: 1000 }), RangeError);
    } finally {
      await a.close();
      await b.close();
      await la.stop();
      await lb.stop();
      await redis.stop();
    }
  });

  it('moves to a replica that answers', async () => {
    const redis = await startRedis();
    const lockd = await startLockd(redis);
    const c = new LockdClient({ targets: [`127.0.0.1:${await freePort()}`, lockd.addr] });
    try {
      const d = await c.take(key('failover'), { limit: 3, periodMs: 3_600_000 });
      assert.equal(d.allowed, true);
      assert.equal(d.remaining, 2);
    } finally {
      await c.close();
      await lockd.stop();
      await redis.stop();
    }
  });
});
