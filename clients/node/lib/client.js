'use strict';
const crypto = require('node:crypto');
const os = require('node:os');
const { Transport, now } = require('./transport');
const { Lease } = require('./lease');
const { Leadership, ElectionObserver, leaderInfo } = require('./leadership');
const { LockdError } = require('./errors');
const { takeOnce, waitTurn } = require('./ratelimit');
const grpc = require('@grpc/grpc-js');

const MAX_WAIT_CHUNK_MS = 60_000;

const duration = (msec) => ({
  seconds: Math.floor(msec / 1000),
  nanos: Math.round((msec % 1000) * 1e6),
});
const date = (ts) => new Date(Number(ts.seconds) * 1000 + ts.nanos / 1e6);

/**
 * LockdClient talks to one or more lockd replicas. Calls go to one target at
 * a time; on UNAVAILABLE they are retried (with the same request_id, so
 * nothing is done twice) on the next, and KeepAlive streams resume there.
 *
 * Options: targets (addresses, in order of preference), token or tokenFile
 * (bearer token; the file is read again when it changes), tls ({ ca, cert,
 * key, serverName }: PEM file paths), callTimeoutMs (each attempt's deadline
 * beyond its wait, default 10s), retryTimeoutMs (how long UNAVAILABLE is
 * retried beyond the wait, default 15s), defaultTtlMs (default 30s).
 */
class LockdClient {
  constructor(opts = {}) {
    this._transport = new Transport(opts);
    this._defaultTtlMs = opts.defaultTtlMs ?? 30_000;
    this._ownerPrefix = `${os.hostname()}:${process.pid}`;
    this._open = new Set();
    this._leading = new Set();
    this._observers = new Set();
  }

  /**
   * tryAcquire takes a lease on key if it can be had within waitMs (0, the
   * default, tries once); null when the key stayed busy. Options: waitMs,
   * mode ('write' or 'read'), ttlMs, owner (the same owner re-enters its
   * lease; empty means a fresh owner), signal (an AbortSignal).
   */
  async tryAcquire(key, opts = {}) {
    const end = now() + (opts.waitMs ?? 0);
    for (;;) {
      const left = Math.max(0, end - now());
      const lease = await this._acquireOnce(key, Math.min(left, MAX_WAIT_CHUNK_MS), opts);
      if (lease || left <= MAX_WAIT_CHUNK_MS) return lease;
    }
  }

  /** acquire takes a lease on key, waiting as long as it takes (options as tryAcquire, without waitMs). */
  async acquire(key, opts = {}) {
    for (;;) {
      const lease = await this._acquireOnce(key, MAX_WAIT_CHUNK_MS, opts);
      if (lease) return lease;
    }
  }

  /**
   * withLock runs fn(lease) while holding key and releases it afterwards,
   * returning what fn returns. Pass lease.signal to work that can be aborted:
   * it aborts when the lease is lost. If the lease was lost while fn ran,
   * withLock throws the LeaseLostError even though fn finished, since the work
   * may have overlapped another holder's. Options as acquire, plus waitMs to
   * give up (a LockdError with code DEADLINE_EXCEEDED) when the key stays busy.
   */
  async withLock(key, fn, opts = {}) {
    const lease =
      opts.waitMs === undefined ? await this.acquire(key, opts) : await this.tryAcquire(key, opts);
    if (!lease) {
      throw new LockdError(`lock ${key} not acquired within ${opts.waitMs}ms`, grpc.status.DEADLINE_EXCEEDED);
    }
    return this._holding(lease, fn);
  }

  async _holding(lease, fn) {
    let result;
    try {
      result = await fn(lease);
    } finally {
      // A lost lease's release rejects with its loss, thrown below unless fn threw.
      await lease.release().catch((e) => {
        if (e !== lease.lostError) throw e;
      });
    }
    if (lease.lostError) throw lease.lostError;
    return result;
  }

  /**
   * tryAcquirePermit takes one of the `limit` permits of the semaphore key if
   * one comes free within waitMs (0, the default, tries once); null when all
   * stayed held. The permit is a Lease like a lock's (mode 'permit'): kept
   * alive until released, with its own fencing token and loss signal. At most
   * `limit` permits of key are held at once, by every holder together, who
   * must all give the same limit (else FAILED_PRECONDITION). The permit of a
   * holder that dies comes back when its lease runs out. Options as
   * tryAcquire, without mode.
   */
  async tryAcquirePermit(key, limit, opts = {}) {
    const end = now() + (opts.waitMs ?? 0);
    for (;;) {
      const left = Math.max(0, end - now());
      const lease = await this._acquireOnce(key, Math.min(left, MAX_WAIT_CHUNK_MS), opts, checkLimit(limit));
      if (lease || left <= MAX_WAIT_CHUNK_MS) return lease;
    }
  }

  /** acquirePermit takes a permit of the semaphore key, waiting as long as it takes. */
  async acquirePermit(key, limit, opts = {}) {
    for (;;) {
      const lease = await this._acquireOnce(key, MAX_WAIT_CHUNK_MS, opts, checkLimit(limit));
      if (lease) return lease;
    }
  }

  /**
   * withPermit runs fn(permit) while holding a permit of the semaphore key,
   * as withLock does with a lock: the permit is released afterwards, and a
   * permit lost while fn ran throws its LeaseLostError.
   */
  async withPermit(key, limit, fn, opts = {}) {
    const permit =
      opts.waitMs === undefined ? await this.acquirePermit(key, limit, opts) : await this.tryAcquirePermit(key, limit, opts);
    if (!permit) {
      throw new LockdError(`no permit of ${key} within ${opts.waitMs}ms`, grpc.status.DEADLINE_EXCEEDED);
    }
    return this._holding(permit, fn);
  }

  /**
   * campaign enters the election name with value and resolves with the
   * Leadership once elected. Options: ttlMs, owner (campaigning again with
   * the current leader's owner resumes its leadership; empty means a fresh
   * owner), signal (an AbortSignal: aborting gives up the campaign, and
   * leaves nothing behind). While it waits, a replica that goes away is left
   * for the next; once elected, the leadership lives and dies with its
   * Campaign stream.
   */
  async campaign(name, value, opts = {}) {
    const t = this._transport;
    const req = {
      name,
      value,
      owner: opts.owner || `${this._ownerPrefix}:${crypto.randomUUID()}`,
      ttl: duration(opts.ttlMs ?? this._defaultTtlMs),
    };
    let failingSince = 0;
    let backoff = 25;
    for (;;) {
      opts.signal?.throwIfAborted();
      if (t.closed) throw new LockdError(`Campaign ${name}`, grpc.status.CANCELLED, 'the client is closed');
      const target = t.current;
      const l = new Leadership(this, t, name);
      const onAbort = () => l._abandon(); // closing the stream resigns a leadership won meanwhile
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      let first;
      try {
        first = await l._begin(target, req);
      } catch (e) {
        opts.signal?.throwIfAborted();
        if (e.code !== grpc.status.UNAVAILABLE) throw e;
        // The replica went away while the candidate waited: wait on the next
        // one, under the same owner, so a leadership won on the first but not
        // reported is taken up, not waited out.
        t.failed(target);
        if (!failingSince) failingSince = now();
        else if (now() - failingSince > t.retryTimeoutMs) throw e;
        await new Promise((resolve) => setTimeout(resolve, backoff));
        backoff = Math.min(backoff * 2, 1000);
        continue;
      } finally {
        opts.signal?.removeEventListener('abort', onAbort);
      }
      if (opts.signal?.aborted) {
        l._abandon();
        opts.signal.throwIfAborted();
      }
      this._leading.add(l);
      try {
        await l._elected(first);
      } catch (e) {
        l._abandon();
        this._leading.delete(l);
        throw e;
      }
      if (l.lostError) throw l.lostError;
      return l;
    }
  }

  /**
   * withLeadership campaigns for name, runs fn(leadership) once elected and
   * resigns afterwards, returning what fn returns. Pass leadership.signal to
   * work that can be aborted: it aborts when the leadership is lost. If it
   * was lost while fn ran, withLeadership throws the LeaseLostError even
   * though fn finished. Options as campaign.
   */
  async withLeadership(name, value, fn, opts = {}) {
    const l = await this.campaign(name, value, opts);
    let result;
    try {
      result = await fn(l);
    } finally {
      await l.resign().catch((e) => {
        if (e !== l.lostError) process.emitWarning(`resigning ${name} failed: ${e.message}`);
      });
    }
    if (l.lostError) throw l.lostError;
    return result;
  }

  /** leader returns the current leader of the election name ({ name, value, owner, term, expireTime }), or null. */
  async leader(name) {
    try {
      const r = await this._transport.call(`Leader ${name}`, 'elections', 'Leader', () => ({ name }));
      return leaderInfo(r.leader);
    } catch (e) {
      if (e.code === grpc.status.NOT_FOUND) return null;
      throw e;
    }
  }

  /**
   * observe follows the election name: the returned ElectionObserver emits
   * 'change' with the leader (or null when there is none), at once and then
   * at each change, terms never going back. close() it to stop.
   */
  observe(name) {
    const o = new ElectionObserver(this._transport, name);
    this._observers.add(o);
    o.on('closed', () => this._observers.delete(o));
    // Listeners attach after this returns; the first state comes later.
    process.nextTick(() => o._open());
    return o;
  }

  /** getAccessToken returns the app's current { accessToken, expireTime }. */
  async getAccessToken(app) {
    const r = await this._transport.call(`GetAccessToken ${app}`, 'tokens', 'GetAccessToken', () => ({ app }));
    return { accessToken: r.accessToken, expireTime: date(r.expireTime) };
  }

  /**
   * refreshAccessToken reports a token the upstream rejected (40001, 42001)
   * and returns the one to use now: the cached one if it is already another,
   * else one new token minted for all reporters.
   */
  async refreshAccessToken(app, invalidToken) {
    const r = await this._transport.call(`RefreshAccessToken ${app}`, 'tokens', 'RefreshAccessToken', () => ({
      app,
      invalidToken,
    }));
    return { accessToken: r.accessToken, expireTime: date(r.expireTime) };
  }

  /**
   * take spends cost (opts.cost, default 1) from key's fleet-wide rate
   * limiter if rate ({ limit, periodMs, burst }: at most limit per periodMs,
   * in bursts of up to burst, default limit) allows it now, and resolves with
   * the decision { allowed, remaining, retryAfterMs, resetAfterMs }: not
   * allowed is a decision, not an error. Every caller of key must give the
   * same rate while its limiter is in use (else FAILED_PRECONDITION).
   */
  async take(key, rate, opts = {}) {
    return takeOnce(this._transport, key, rate, opts.cost ?? 1, 0, opts.signal);
  }

  /**
   * wait spends cost (opts.cost, default 1) from key's limiter, waiting for
   * its turn: lockd keeps its place among the waiters (served in order,
   * without polling) and answers when the turn comes. With opts.waitMs it
   * waits at most that long, and rejects with a RateLimitedError at once
   * when the turn would come later; without it, as long as it takes.
   * opts.signal (an AbortSignal) gives the turn up.
   */
  async wait(key, rate, opts = {}) {
    return waitTurn(this._transport, key, rate, opts);
  }

  /** close stops every observer, resigns every leadership, releases every lease still open and closes the connections. */
  async close() {
    for (const o of this._observers) o.close();
    await Promise.all([...this._leading].map((l) => l.resign().catch(() => {})));
    await Promise.all([...this._open].map((l) => l.release()));
    for (const l of this._open) l._abandon();
    this._transport.close();
  }

  // _acquireOnce asks once for a lock, or for a permit of a semaphore of
  // limit when limit is set.
  async _acquireOnce(key, waitMs, opts, limit = 0) {
    const read = opts.mode === 'read';
    const requestId = crypto.randomUUID();
    // A fresh owner of the client's own when none is asked for: lockd
    // replays a retried requestId only to the owner that sent it.
    const owner = opts.owner || `${this._ownerPrefix}:${crypto.randomUUID()}`;
    const ttl = duration(opts.ttlMs ?? this._defaultTtlMs);
    const sentAt = now();
    const r = limit
      ? await this._transport.call(
          `SemaphoreService.Acquire ${key}`,
          'semaphores',
          'Acquire',
          (left) => ({ key, limit, owner, ttl, waitTimeout: duration(left), requestId }),
          waitMs,
          opts.signal,
        )
      : await this._transport.call(
      `${read ? 'RLock' : 'Acquire'} ${key}`,
      'locks',
      read ? 'RLock' : 'Acquire',
      (left) => ({ key, owner, ttl, waitTimeout: duration(left), requestId }),
      waitMs,
      opts.signal,
    );
    if (!r.acquired) return null;
    const lease = new Lease(this, this._transport, r.lease, sentAt);
    this._open.add(lease);
    lease._start();
    return lease;
  }

  _release(key, leaseId) {
    const requestId = crypto.randomUUID();
    return this._transport.call(`Release ${key}`, 'locks', 'Release', () => ({ key, leaseId, requestId }));
  }

  _forget(lease) {
    this._open.delete(lease);
  }

  _forgetLeadership(l) {
    this._leading.delete(l);
  }

  _resign(name, leaseId) {
    return this._transport.call(`Resign ${name}`, 'elections', 'Resign', () => ({ name, leaseId }));
  }
}

function checkLimit(limit) {
  if (!Number.isInteger(limit) || limit < 1 || limit > 0xffffffff) {
    throw new RangeError(`a semaphore's limit must be an integer in [1, 2^32-1], got ${limit}`);
  }
  return limit;
}

module.exports = { LockdClient };
