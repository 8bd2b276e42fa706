'use strict';
const { EventEmitter } = require('node:events');
const grpc = require('@grpc/grpc-js');
const { LeaseLostError } = require('./errors');
const { now } = require('./transport');

const ms = (d) => Number(d?.seconds ?? 0) * 1000 + (d?.nanos ?? 0) / 1e6;

/**
 * Lease is one hold on a key, kept alive by a KeepAlive stream until it is
 * released. It emits 'lost' (with a LeaseLostError), resolves `lost` and
 * aborts `signal` before anyone else can be granted the key: when lockd ends
 * the stream with NOT_FOUND, or when no renewal was confirmed before the lease
 * could run out (a tenth of its ttl early, by a bound on Redis's clock learnt
 * when the lease was granted). When a replica goes away the stream resumes on
 * the next target.
 */
class Lease extends EventEmitter {
  /** @internal */
  constructor(client, transport, granted, sentAt) {
    super();
    this._client = client;
    this._transport = transport;
    /** The key this lease holds. */
    this.key = granted.key;
    /** The lease's opaque id. */
    this.leaseId = granted.leaseId;
    /** Who holds the lease (as asked for, or made up by lockd). */
    this.owner = granted.owner;
    /** 'read', 'write', or 'permit' (one of a semaphore's permits). */
    this.mode = { LOCK_MODE_READ: 'read', LOCK_MODE_PERMIT: 'permit' }[granted.mode] ?? 'write';
    /** The fencing token (a BigInt): greater than every token issued before for this key. */
    this.fencingToken = BigInt(granted.fencingToken);
    /** When the lease was granted, by Redis's clock. */
    this.grantTime = new Date(ms(granted.expireTime) - ms(granted.ttl));
    // A local instant (performance.now) at or before which Redis's clock read
    // anchorRedis: first the send of the granting call and the grant; then,
    // for each KeepAlive stream, its opening and its first renewal (lockd
    // renews as soon as a stream opens, so that bound is within a round trip).
    this._anchorLocal = sentAt;
    this._anchorRedis = ms(granted.expireTime) - ms(granted.ttl);
    this._abort = new AbortController();
    /** An AbortSignal aborted (with the LeaseLostError) when the lease is lost. */
    this.signal = this._abort.signal;
    /** A promise resolved with the LeaseLostError when the lease is lost. */
    this.lost = new Promise((resolve) => {
      this._resolveLost = resolve;
    });
    this._last = granted;
    this._closed = false;
    this._lostWith = null;
    this._lostInLockd = false;
    this._stream = 0;
    this._backoff = 0;
  }

  /** True while the lease is neither lost nor released. */
  get held() {
    return !this._closed && !this._lostWith;
  }

  /** The LeaseLostError if the lease was lost, else null. */
  get lostError() {
    return this._lostWith;
  }

  /** How many times the owner holds the lease, as of the last renewal. */
  get holdCount() {
    return this._last.holdCount;
  }

  /** The span of the last grant or renewal, in milliseconds. */
  get ttlMs() {
    return ms(this._last.ttl);
  }

  /** When the lease runs out unless renewed, by Redis's clock, as of the last renewal. */
  get expireTime() {
    return new Date(ms(this._last.expireTime));
  }

  /** Throws the LeaseLostError if the lease was lost: call it before each guarded write. */
  checkHeld() {
    if (this._lostWith) throw this._lostWith;
    if (this._closed) throw new Error(`lease on ${this.key} was released`);
  }

  /**
   * release gives one hold back (retried safely on another replica) and stops
   * keeping the lease alive. Releasing a lost lease rejects with its
   * LeaseLostError, since the work it guarded may have overlapped another
   * holder's (a lease given up for lack of confirmed renewals is still
   * released in the background, in case lockd holds it); releasing a
   * released lease does nothing.
   */
  async release() {
    if (this._closed) return;
    this._closed = true;
    const wasHeld = !this._lostWith;
    const call = this._call;
    this._call = null;
    this._clearTimers();
    this._client._forget(this);
    try {
      if (wasHeld) await this._releaseNow();
      else if (!this._lostInLockd) this._releaseNow();
    } finally {
      call?.cancel();
    }
    if (this._lostWith) throw this._lostWith;
  }

  // _releaseNow releases the lease; lockd not knowing it (NOT_FOUND) means it
  // was lost, and is thrown as such. Other failures leave the lease to run
  // out by itself.
  async _releaseNow() {
    try {
      await this._client._release(this.key, this.leaseId);
    } catch (e) {
      if (e.code === grpc.status.NOT_FOUND) {
        this._lostWith ??= new LeaseLostError(this.key, `Release: ${e.details}`);
        return;
      }
      process.emitWarning(`releasing the lease on ${this.key} failed; it runs out by itself: ${e.message}`);
    }
  }

  /** @internal Starts keeping the lease alive. */
  _start() {
    // A grant that waited may have come long after the send that anchors it,
    // so until the first renewal re-anchors the clock (a round trip away) the
    // lease is trusted for a tenth of its ttl from now at least: only a reply
    // delayed by nine tenths of the ttl could make that late.
    const t = now();
    this._renewed(this._last, t, t + ms(this._last.ttl) / 10);
    if (!this._lostWith) this._open();
  }

  /** @internal Stops keeping the lease alive without releasing it. */
  _abandon() {
    this._closed = true;
    this._clearTimers();
    this._call?.cancel();
    this._call = null;
  }

  // _renewed records a lease lockd confirmed at or before `received` and moves
  // the loss deadline: its expiry mapped to the local clock through the anchor
  // (never later than received + ttl), less a tenth of its ttl, and no earlier
  // than floor.
  _renewed(l, received, floor = -Infinity) {
    this._last = l;
    const ttl = ms(l.ttl);
    const expiry = Math.min(this._anchorLocal + (ms(l.expireTime) - this._anchorRedis), received + ttl);
    this._deadline = Math.max(expiry - ttl / 10, floor);
    clearTimeout(this._lossTimer);
    const wait = this._deadline - now();
    if (wait <= 0) {
      this._lose('the lease ran out before its renewal was confirmed');
      return;
    }
    this._lossTimer = setTimeout(() => this._deadlinePassed(), wait);
  }

  _deadlinePassed() {
    if (this._closed || this._lostWith) return;
    const wait = this._deadline - now();
    if (wait > 0) {
      this._lossTimer = setTimeout(() => this._deadlinePassed(), wait);
      return;
    }
    this._lose('no renewal was confirmed before the lease could run out');
  }

  _open() {
    if (this._closed || this._lostWith) return;
    const id = ++this._stream;
    const t = this._transport;
    const target = t.current;
    this._streamOpened = now();
    this._streamAnchored = false;
    const call = t.locks[target].KeepAlive({ key: this.key, leaseId: this.leaseId }, t.metadata());
    this._call = call;
    call.on('data', (r) => this._received(id, target, r.lease));
    call.on('error', (e) => this._ended(id, target, e.code, e.details));
    call.on('end', () => this._ended(id, target, grpc.status.UNAVAILABLE, 'KeepAlive stream ended'));
    this._armStall(id, target);
  }

  // A stream silent for half a ttl (renewals come every third) is left for the
  // next target: a frozen or cut-off replica answers nothing at all. With one
  // target there is nowhere to go, and the silent stream may still bring
  // lockd's NOT_FOUND.
  _armStall(id, target) {
    clearTimeout(this._stallTimer);
    if (this._transport.targets.length < 2) return;
    this._stallTimer = setTimeout(() => this._stalled(id, target), Math.max(this.ttlMs / 2, 5));
  }

  _received(id, target, l) {
    if (id !== this._stream || this._closed || this._lostWith) return;
    this._backoff = 0;
    if (!this._streamAnchored) {
      this._anchorLocal = this._streamOpened;
      this._anchorRedis = ms(l.expireTime) - ms(l.ttl);
      this._streamAnchored = true;
    }
    this._renewed(l, now());
    if (!this._lostWith) this._armStall(id, target);
  }

  _stalled(id, target) {
    if (id !== this._stream || this._closed || this._lostWith) return;
    this._transport.failed(target);
    this._stream++;
    this._call.cancel();
    this._open();
  }

  _ended(id, target, code, details) {
    if (id !== this._stream || this._closed || this._lostWith) return;
    if (code === grpc.status.NOT_FOUND) {
      this._lostInLockd = true;
      this._lose(`lockd ended KeepAlive with NOT_FOUND: ${details}`);
      return;
    }
    this._transport.failed(target);
    this._stream++;
    clearTimeout(this._stallTimer);
    this._backoff = Math.min(Math.max(this._backoff * 2, 25), this.ttlMs / 6);
    const next = this._stream;
    setTimeout(() => {
      if (next === this._stream) this._open();
    }, this._backoff / 2 + Math.random() * (this._backoff / 2));
  }

  _lose(reason) {
    const err = new LeaseLostError(this.key, reason);
    this._lostWith = err;
    this._clearTimers();
    this._call?.cancel();
    this._call = null;
    this._stream++;
    this._client._forget(this);
    this._abort.abort(err);
    this._resolveLost(err);
    this.emit('lost', err);
  }

  _clearTimers() {
    clearTimeout(this._lossTimer);
    clearTimeout(this._stallTimer);
  }
}

module.exports = { Lease };
