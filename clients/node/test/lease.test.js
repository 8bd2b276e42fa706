'use strict';
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { LockdClient, LockdError, LeaseLostError, status } = require('..');
const { startRedis, startLockd, sleep } = require('./harness');

const key = (name) => `node/${name}/${crypto.randomUUID()}`;

describe('leases', () => {
  let redis, lockd, a, b;
  before(async () => {
    redis = await startRedis();
    lockd = await startLockd(redis);
    a = new LockdClient({ targets: [lockd.addr] });
    b = new LockdClient({ targets: [lockd.addr] });
  });
  after(async () => {
    await a.close();
    await b.close();
    await lockd.stop();
    await redis.stop();
  });

  it('gives every new lease a greater fencing token', async () => {
    const k = key('fencing');
    const first = await a.acquire(k);
    assert.equal(first.key, k);
    assert.equal(first.mode, 'write');
    assert.equal(first.holdCount, 1);
    assert.equal(typeof first.fencingToken, 'bigint');
    await first.release();
    const second = await b.acquire(k);
    assert.ok(second.fencingToken > first.fencingToken);
    await second.release();
  });

  it('refuses a busy key and frees it at once on release', async () => {
    const k = key('busy');
    const held = await a.tryAcquire(k);
    assert.ok(held.held);
    assert.equal(await b.tryAcquire(k), null);
    assert.equal(await b.tryAcquire(k, { waitMs: 300 }), null);
    await held.release();
    assert.equal(held.held, false);
    assert.equal(held.lostError, null, 'a released lease is not lost');
    const next = await b.tryAcquire(k);
    assert.notEqual(next.leaseId, held.leaseId);
    await next.release();
  });

  it('grants a waiter when the holder releases', async () => {
    const k = key('wait');
    const held = await a.acquire(k);
    const waiting = b.tryAcquire(k, { waitMs: 60_000 });
    await held.release();
    const next = await waiting;
    assert.ok(next.fencingToken > held.fencingToken);
    await next.release();
  });

  it('holds a lease granted after a wait longer than its ttl', async () => {
    const k = key('long-wait');
    const held = await a.acquire(k);
    const waiting = b.tryAcquire(k, { waitMs: 60_000, ttlMs: 1000 });
    await sleep(2500); // the waiter waits longer than its lease's ttl
    await held.release();
    const l = await waiting;
    await sleep(2500);
    assert.ok(l.held, `lost: ${l.lostError?.message}`);
    assert.equal(await a.tryAcquire(k), null);
    await l.release();
  });

  it('keeps the lease alive past its ttl', async () => {
    const k = key('keepalive');
    const l = await a.acquire(k, { ttlMs: 2000 });
    await sleep(5000);
    assert.ok(l.held);
    assert.equal(await b.tryAcquire(k), null);
    assert.equal(l.ttlMs, 2000);
    await l.release();
  });

  it('shares a key among readers and keeps writers out', async () => {
    const k = key('read');
    const r1 = await a.acquire(k, { mode: 'read' });
    const r2 = await b.tryAcquire(k, { mode: 'read' });
    assert.equal(r1.mode, 'read');
    assert.equal(r2.mode, 'read');
    assert.equal(await b.tryAcquire(k), null);
    await r1.release();
    await r2.release();
    await (await b.tryAcquire(k)).release();
  });

  it('lets the same owner re-enter its lease', async () => {
    const k = key('reenter');
    const first = await a.acquire(k, { owner: 'billing-1' });
    const second = await a.acquire(k, { owner: 'billing-1' });
    assert.equal(second.leaseId, first.leaseId);
    assert.equal(second.fencingToken, first.fencingToken);
    assert.equal(second.holdCount, 2);
    await first.release();
    assert.equal(await b.tryAcquire(k), null, 'one hold is left');
    await second.release();
    await (await b.tryAcquire(k)).release();
  });

  it('reports bad input with its status, without retrying', async () => {
    await assert.rejects(a.tryAcquire('bad\u0001key'), (e) => e instanceof LockdError && e.code === status.INVALID_ARGUMENT);
    await assert.rejects(a.tryAcquire(key('ttl'), { ttlMs: 0.000001 }), (e) => e.code === status.INVALID_ARGUMENT);
  });

  it('withLock runs the function under the lock and releases it', async () => {
    const k = key('withlock');
    let inside = 0;
    let overlaps = 0;
    const work = async (client) =>
      client.withLock(k, async (lease) => {
        assert.ok(lease.held);
        if (++inside !== 1) overlaps++;
        await sleep(5);
        inside--;
        return lease.fencingToken;
      });
    const tokens = await Promise.all(Array.from({ length: 10 }, (_, i) => work(i % 2 ? a : b)));
    assert.equal(overlaps, 0);
    assert.equal(new Set(tokens.map(String)).size, 10);
    await (await b.tryAcquire(k)).release();
    await assert.rejects(
      a.withLock(k, async () => {
        throw new Error('boom');
      }),
      /boom/,
    );
    await (await b.tryAcquire(k)).release();
  });

  it('withLock gives up after waitMs on a busy key', async () => {
    const k = key('withlock-busy');
    const held = await a.acquire(k);
    await assert.rejects(
      b.withLock(k, async () => 'ran', { waitMs: 200 }),
      (e) => e.code === status.DEADLINE_EXCEEDED,
    );
    await held.release();
    assert.equal(await b.withLock(k, async () => 'ran', { waitMs: 0 }), 'ran');
  });

  it('aborts a waiting acquire through its signal', async () => {
    const k = key('abort');
    const held = await a.acquire(k);
    const ac = new AbortController();
    const waiting = b.acquire(k, { signal: ac.signal });
    setTimeout(() => ac.abort(new Error('gave up')), 100);
    await assert.rejects(waiting, /gave up/);
    await held.release();
    await (await b.tryAcquire(k)).release();
  });

  it('releases its leases when the client closes', async () => {
    const k = key('client-close');
    const c = new LockdClient({ targets: [lockd.addr] });
    const l = await c.acquire(k);
    await c.close();
    assert.equal(l.held, false);
    await (await b.tryAcquire(k)).release();
    assert.ok(LeaseLostError);
  });
});
