'use strict';
// Elections against real lockd and redis-server processes.
const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { LockdClient, LeaseLostError } = require('..');
const { startRedis, startLockd, sleep } = require('./harness');

const TTL_MS = 2000;
const name = (what) => `node/election/${what}/${crypto.randomUUID()}`;

/** states collects an observer's states; next waits for one that satisfies ok. */
function states(observer) {
  const seen = [];
  const waiters = [];
  observer.on('change', (s) => {
    seen.push(s);
    for (const w of [...waiters]) w();
  });
  return {
    seen,
    next(ok) {
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`state not seen; saw ${JSON.stringify(seen, (k, v) => (typeof v === 'bigint' ? String(v) : v))}`)), 60_000);
        const check = () => {
          const i = seen.findIndex(ok);
          if (i < 0) return;
          seen.splice(0, i + 1);
          clearTimeout(t);
          waiters.splice(waiters.indexOf(check), 1);
          resolve(seen[i]);
        };
        waiters.push(check);
        check();
      });
    },
  };
}

describe('election', () => {
  it('campaigns, proclaims, resigns and is observed', async () => {
    const redis = await startRedis();
    const lockd = await startLockd(redis);
    const a = new LockdClient({ targets: [lockd.addr], defaultTtlMs: TTL_MS });
    const b = new LockdClient({ targets: [lockd.addr], defaultTtlMs: TTL_MS });
    const n = name('basics');
    const obs = b.observe(n);
    try {
      const st = states(obs);
      let highest = 0n;
      obs.on('change', (l) => {
        if (l) {
          assert.ok(l.term >= highest, 'terms never go back');
          highest = l.term;
        }
      });
      await st.next((s) => s === null);
      assert.equal(await a.leader(n), null);

      const l1 = await a.campaign(n, '10.0.0.1:80', { owner: 'a' });
      assert.ok(l1.isLeader);
      assert.equal(l1.owner, 'a');
      assert.ok(l1.term > 0n);
      await st.next((s) => s && s.term === l1.term);
      let secondDone = false;
      const second = b.campaign(n, '10.0.0.2:80').then((l) => {
        secondDone = true;
        return l;
      });

      // The leadership outlives its ttl while the other candidate waits.
      const exp = l1.expireTime.getTime();
      while (l1.expireTime.getTime() <= exp + TTL_MS) {
        assert.equal(secondDone, false, 'a second leader was elected while the first led');
        assert.ok(l1.isLeader, 'leadership lost');
        await sleep(20);
      }

      await l1.proclaim('10.0.0.1:81');
      assert.equal(l1.value, '10.0.0.1:81');
      await st.next((s) => s && s.value === '10.0.0.1:81');
      const cur = await b.leader(n);
      assert.equal(cur.term, l1.term);
      assert.equal(cur.owner, 'a');

      let lostFired = false;
      l1.on('lost', () => (lostFired = true));
      await l1.resign();
      await l1.resign(); // a second time does nothing
      assert.throws(() => l1.checkLeader(), /resigned/);
      const l2 = await second;
      assert.ok(l2.term > l1.term);
      await st.next((s) => s && s.term === l2.term);
      await l2.resign();
      await st.next((s) => s === null);
      assert.equal(lostFired, false, 'a resigned leadership reports no loss');
    } finally {
      obs.close();
      await a.close();
      await b.close();
      await lockd.stop();
      await redis.stop();
    }
  });

  it('signals the loss before the next candidate is elected when Redis freezes', async () => {
    const redis = await startRedis();
    const la = await startLockd(redis);
    const lb = await startLockd(redis);
    const a = new LockdClient({ targets: [la.addr], defaultTtlMs: TTL_MS });
    const b = new LockdClient({ targets: [lb.addr], defaultTtlMs: TTL_MS, retryTimeoutMs: 90_000 });
    try {
      const n = name('frozen');
      const l1 = await a.campaign(n, 'a');
      let lostAt;
      l1.on('lost', () => (lostAt = new Date()));
      const second = b.campaign(n, 'b');

      redis.freeze();
      await sleep(2 * TTL_MS);
      redis.resume();

      const l2 = await second;
      const why = await l1.lost;
      assert.ok(lostAt, "the 'lost' event fired");
      assert.ok(lostAt < l2.electedTime, `lost at ${lostAt.toISOString()}, next leader elected at ${l2.electedTime.toISOString()}`);
      assert.ok(why instanceof LeaseLostError);
      assert.equal(why.key, n);
      assert.ok(l1.signal.aborted);
      assert.equal(l1.isLeader, false);
      await assert.rejects(l1.proclaim('late'), LeaseLostError);
      // Resigning a lost leadership is an error, as releasing a lost lease is.
      await assert.rejects(l1.resign(), (e) => e === why);
      await l1.resign();
      assert.ok(l2.term > l1.term);
      await l2.resign();
    } finally {
      await a.close();
      await b.close();
      await la.stop();
      await lb.stop();
      await redis.stop();
    }
  });

  it('loses the leadership with its replica, and withLeadership runs one term', async () => {
    const redis = await startRedis();
    const la = await startLockd(redis);
    const lb = await startLockd(redis);
    const a = new LockdClient({ targets: [la.addr, lb.addr], defaultTtlMs: TTL_MS });
    const b = new LockdClient({ targets: [lb.addr], defaultTtlMs: TTL_MS });
    try {
      const n = name('killed');
      const l1 = await a.campaign(n, 'a');
      await la.kill();
      await l1.lost;
      const term = await b.withLeadership(n, 'b', async (l) => {
        assert.equal((await b.leader(n)).value, 'b');
        return l.term;
      });
      assert.ok(term > l1.term);
      assert.equal(await b.leader(n), null, 'withLeadership resigned');

      // A campaign given up while it waits leaves nothing behind.
      const holder = await b.campaign(n, 'holder');
      const ac = new AbortController();
      const waiting = a.campaign(n, 'gives up', { signal: ac.signal });
      await sleep(100);
      ac.abort();
      await assert.rejects(waiting);
      await holder.resign();
      assert.equal(await b.leader(n), null);
    } finally {
      await a.close();
      await b.close();
      await la.stop();
      await lb.stop();
      await redis.stop();
    }
  });
});
