'use strict';
// A lease's loss is signalled before anyone else is granted its key. Both
// sides run on this machine, so the loss (read from the wall clock when the
// 'lost' event fires) and the next owner's grant (by Redis's clock, the same
// wall clock) are compared on one clock.
const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { LockdClient, LeaseLostError } = require('..');
const { startRedis, startLockd, sleep } = require('./harness');

const TTL_MS = 2000;

function recordLoss(lease) {
  const at = {};
  lease.on('lost', (err) => {
    at.time = new Date();
    at.err = err;
  });
  return at;
}

describe('loss', () => {
  it('is signalled before the next grant when Redis freezes past the lease', async () => {
    const redis = await startRedis();
    const lockd = await startLockd(redis);
    const a = new LockdClient({ targets: [lockd.addr], defaultTtlMs: TTL_MS });
    const b = new LockdClient({ targets: [lockd.addr], retryTimeoutMs: 90_000 });
    try {
      const k = `node/loss/redis/${crypto.randomUUID()}`;
      const lease = await a.acquire(k);
      const lost = recordLoss(lease);

      // Renewals cannot reach Redis; another owner waits meanwhile.
      redis.freeze();
      const other = b.tryAcquire(k, { waitMs: 90_000 });
      await sleep(2 * TTL_MS);
      redis.resume();

      const next = await other;
      const why = await lease.lost;
      assert.ok(lost.time, "the 'lost' event fired");
      assert.ok(lost.time < next.grantTime, `lost at ${lost.time.toISOString()}, next owner granted at ${next.grantTime.toISOString()}`);
      assert.ok(why instanceof LeaseLostError);
      assert.equal(why.key, k);
      assert.ok(lease.signal.aborted);
      assert.equal(lease.held, false);
      assert.throws(() => lease.checkHeld(), LeaseLostError);
      assert.ok(next.fencingToken > lease.fencingToken);
      // Releasing a lost lease is an error: the work it guarded may have
      // overlapped the next owner's. Releasing it again does nothing.
      await assert.rejects(lease.release(), (e) => e === why);
      await lease.release();
      await next.release();
    } finally {
      await a.close();
      await b.close();
      await lockd.stop();
      await redis.stop();
    }
  });

  it('is signalled before the next grant when the only replica is cut off', async () => {
    const redis = await startRedis();
    const cutOff = await startLockd(redis);
    const other = await startLockd(redis);
    const a = new LockdClient({ targets: [cutOff.addr], defaultTtlMs: TTL_MS });
    const b = new LockdClient({ targets: [other.addr] });
    try {
      const k = `node/loss/cut-off/${crypto.randomUUID()}`;
      let lost;
      let next;
      // The replica a knows answers nothing, so lockd cannot tell the client:
      // the client's own deadline must. withLock reports the loss even though
      // the function finished.
      await assert.rejects(
        a.withLock(k, async (lease) => {
          lost = recordLoss(lease);
          cutOff.freeze();
          next = await b.tryAcquire(k, { waitMs: 90_000 });
          assert.ok(lease.signal.aborted, 'the work under the lock was told to stop');
        }),
        LeaseLostError,
      );
      assert.ok(lost.time, "the 'lost' event fired");
      assert.ok(lost.time < next.grantTime, `lost at ${lost.time.toISOString()}, next owner granted at ${next.grantTime.toISOString()}`);
      await next.release();
      cutOff.resume();
    } finally {
      await a.close();
      await b.close();
      await cutOff.stop();
      await other.stop();
      await redis.stop();
    }
  });
});
