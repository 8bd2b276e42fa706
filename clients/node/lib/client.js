'use strict';
const crypto = require('node:crypto');
const { Transport, now } = require('./transport');
const { Lease } = require('./lease');
const { LockdError } = require('./errors');
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
    this._open = new Set();
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
    let result;
    try {
      result = await fn(lease);
    } finally {
      await lease.release();
    }
    if (lease.lostError) throw lease.lostError;
    return result;
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

  /** close releases every lease still open and closes the connections. */
  async close() {
    await Promise.all([...this._open].map((l) => l.release()));
    for (const l of this._open) l._abandon();
    this._transport.close();
  }

  async _acquireOnce(key, waitMs, opts) {
    const read = opts.mode === 'read';
    const requestId = crypto.randomUUID();
    const ttl = duration(opts.ttlMs ?? this._defaultTtlMs);
    const sentAt = now();
    const r = await this._transport.call(
      `${read ? 'RLock' : 'Acquire'} ${key}`,
      'locks',
      read ? 'RLock' : 'Acquire',
      (left) => ({ key, owner: opts.owner ?? '', ttl, waitTimeout: duration(left), requestId }),
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
}

module.exports = { LockdClient };
