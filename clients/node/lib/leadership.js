'use strict';
const { EventEmitter } = require('node:events');
const grpc = require('@grpc/grpc-js');
const { LeaseLostError, LockdError } = require('./errors');
const { now } = require('./transport');

const ms = (d) => Number(d?.seconds ?? 0) * 1000 + (d?.nanos ?? 0) / 1e6;

/** leaderInfo is an election's leader as anyone may see it. */
function leaderInfo(l) {
  return {
    name: l.name,
    value: l.value,
    owner: l.owner,
    term: BigInt(l.term),
    expireTime: new Date(ms(l.expireTime)),
  };
}

/**
 * Leadership is a candidate's leadership of an election, won by
 * client.campaign and kept alive by its Campaign stream until resign(). It
 * emits 'lost' (with a LeaseLostError), resolves `lost` and aborts `signal`
 * before lockd can elect another candidate: when the Campaign stream ends
 * (lockd found the leadership gone, or the replica went away), or when no
 * renewal was confirmed before it could run out (a tenth of its ttl early).
 * A leadership reported lost is never resumed: campaign again, for a new
 * term. Pass `term` with every write the leader makes.
 */
class Leadership extends EventEmitter {
  /** @internal */
  constructor(client, transport, name) {
    super();
    this._client = client;
    this._transport = transport;
    /** The election's name. */
    this.name = name;
    this._abort = new AbortController();
    /** An AbortSignal aborted (with the LeaseLostError) when the leadership is lost. */
    this.signal = this._abort.signal;
    /** A promise resolved with the LeaseLostError when the leadership is lost. */
    this.lost = new Promise((resolve) => {
      this._resolveLost = resolve;
    });
    this._closed = false;
    this._lostWith = null;
    this._anchored = false;
    this._expire = 0;
  }

  /** True while the leadership is neither lost nor resigned. */
  get isLeader() {
    return !this._closed && !this._lostWith;
  }

  /** The LeaseLostError if the leadership was lost, else null. */
  get lostError() {
    return this._lostWith;
  }

  /** When the leadership ends unless renewed, by Redis's clock, as last confirmed. */
  get expireTime() {
    return new Date(this._expire);
  }

  /** Throws unless still leader: call it before each write the leadership guards. */
  checkLeader() {
    if (this._lostWith) throw this._lostWith;
    if (this._closed) throw new Error(`leadership of ${this.name} was resigned`);
  }

  /** proclaim sets the leader's value, for observers to see. */
  async proclaim(value) {
    this.checkLeader();
    try {
      const r = await this._transport.call(`Proclaim ${this.name}`, 'elections', 'Proclaim', () => ({
        name: this.name,
        leaseId: this.leaseId,
        value,
      }));
      this.value = r.leader.value;
    } catch (e) {
      if (e.code === grpc.status.NOT_FOUND) throw new LeaseLostError(this.name, `Proclaim: ${e.details}`);
      throw e;
    }
  }

  /**
   * resign ends the leadership at once, so the next candidate is elected, and
   * stops keeping it alive. Resigning a lost leadership rejects with its
   * LeaseLostError, as releasing a lost lease does; resigning a resigned
   * leadership does nothing.
   */
  async resign() {
    if (this._closed) return;
    this._closed = true;
    clearTimeout(this._lossTimer);
    this._client._forgetLeadership(this);
    try {
      if (!this._lostWith) await this._client._resign(this.name, this.leaseId);
    } catch (e) {
      if (e.code !== grpc.status.NOT_FOUND) throw e;
      this._lostWith = new LeaseLostError(this.name, `Resign: ${e.details}`);
    } finally {
      this._call.cancel();
    }
    if (this._lostWith) throw this._lostWith;
  }

  /** @internal Opens the Campaign stream on target; resolves with the first leader message. */
  _begin(target, req) {
    return new Promise((resolve, reject) => {
      const call = this._transport.elections[target].Campaign(req, this._transport.metadata());
      this._call = call;
      let elected = false;
      call.on('data', (r) => {
        if (!elected) {
          elected = true;
          resolve(r.leader);
        } else {
          this._renewed(r.leader);
        }
      });
      const ended = (code, details) => {
        if (!elected) {
          elected = true;
          reject(new LockdError(`Campaign ${this.name} on ${this._transport.targets[target]}`, code, details));
        } else {
          this._ended(code, details);
        }
      };
      call.on('error', (e) => ended(e.code, e.details));
      call.on('end', () => ended(grpc.status.UNAVAILABLE, 'Campaign stream ended'));
    });
  }

  /**
   * @internal Starts following the leadership once elected: one Renew relates
   * its expiry to the local clock (the election may have come long after the
   * stream opened).
   */
  async _elected(l) {
    /** The leader's owner name. */
    this.owner = l.owner;
    /** The leadership's lease (for LockService calls by lease_id). */
    this.leaseId = l.leaseId;
    /** The term (a BigInt): a fencing token greater than every term of the election before. */
    this.term = BigInt(l.term);
    /** The value the leader proclaims. */
    this.value = l.value;
    const sent = now();
    const r = await this._transport.call(`Renew ${this.name}`, 'locks', 'Renew', () => ({
      key: this.name,
      leaseId: this.leaseId,
    }));
    this._ttl = ms(r.lease.ttl);
    /** When this candidate was elected, by Redis's clock. */
    this.electedTime = new Date(ms(l.expireTime) - this._ttl);
    this._anchorLocal = sent;
    this._anchorRedis = ms(r.lease.expireTime) - this._ttl;
    this._expire = Math.max(this._expire, ms(r.lease.expireTime), ms(l.expireTime));
    this._anchored = true;
    if (this.isLeader) this._schedule();
  }

  _renewed(l) {
    this.value = l.value;
    this._expire = Math.max(this._expire, ms(l.expireTime));
    if (this._anchored && this.isLeader) this._schedule();
  }

  _deadline() {
    return this._anchorLocal + (this._expire - this._anchorRedis) - this._ttl / 10;
  }

  _schedule() {
    clearTimeout(this._lossTimer);
    const wait = this._deadline() - now();
    if (wait <= 0) {
      this._lose('no renewal was confirmed before the leadership could run out', true);
      return;
    }
    this._lossTimer = setTimeout(() => {
      if (this.isLeader) this._schedule();
    }, wait);
  }

  _ended(code, details) {
    if (!this.isLeader) return;
    if (code === grpc.status.NOT_FOUND) {
      this._lose(`lockd ended the Campaign stream with NOT_FOUND: ${details}`, false);
    } else {
      this._lose(`the Campaign stream ended: ${grpc.status[code] ?? code} ${details ?? ''}`, true);
    }
  }

  // _lose reports the loss; when lockd may still hold the leadership (the
  // replica went away, or no renewal came), it is resigned in the background
  // so the next candidate need not wait it out.
  _lose(reason, resign) {
    const err = new LeaseLostError(this.name, reason);
    this._lostWith = err;
    clearTimeout(this._lossTimer);
    this._call.cancel();
    this._client._forgetLeadership(this);
    this._abort.abort(err);
    this._resolveLost(err);
    this.emit('lost', err);
    if (resign) this._client._resign(this.name, this.leaseId).catch(() => {});
  }

  /** @internal Stops following without resigning by call (the stream's close resigns). */
  _abandon() {
    this._closed = true;
    clearTimeout(this._lossTimer);
    this._call?.cancel();
  }
}

/**
 * ElectionObserver follows an election (see client.observe). It emits
 * 'change' with the leader (or null for none): the current state at once,
 * then each change, terms never going back; when a replica goes away it
 * follows on the next one. When lockd refuses (a bad name, no permission)
 * it stops, and emits 'error' if anyone listens for it (else it warns).
 * close() stops it.
 */
class ElectionObserver extends EventEmitter {
  /** @internal */
  constructor(transport, name) {
    super();
    this._transport = transport;
    /** The election's name. */
    this.name = name;
    this._stream = 0;
    this._closed = false;
    this._delivered = false;
    this._last = null;
    this._highest = 0n;
    this._backoff = 0;
  }

  /** close stops observing. */
  close() {
    this._closed = true;
    this._stream++;
    this._call?.cancel();
    this.emit('closed');
  }

  /** @internal */
  _open() {
    const t = this._transport;
    if (t.closed) this._closed = true;
    if (this._closed) return;
    const id = ++this._stream;
    const target = t.current;
    const call = t.elections[target].Observe({ name: this.name }, t.metadata());
    this._call = call;
    call.on('data', (r) => this._state(id, r));
    call.on('error', (e) => this._ended(id, target, e.code, e.details));
    call.on('end', () => this._ended(id, target, grpc.status.UNAVAILABLE, 'Observe stream ended'));
  }

  _state(id, r) {
    if (id !== this._stream || this._closed) return;
    this._backoff = 0;
    const l = r.hasLeader ? leaderInfo(r.leader) : null;
    if (l && l.term < this._highest) return; // an older state, from a replica that lags
    const last = this._last;
    const same = l === null ? last === null : last !== null && l.term === last.term && l.value === last.value && l.owner === last.owner;
    if (this._delivered && same) return; // the same state again, as a new stream starts
    this._delivered = true;
    this._last = l;
    if (l) this._highest = l.term;
    this.emit('change', l);
  }

  _ended(id, target, code, details) {
    if (id !== this._stream || this._closed) return;
    const s = grpc.status;
    if ([s.INVALID_ARGUMENT, s.PERMISSION_DENIED, s.UNAUTHENTICATED, s.UNIMPLEMENTED].includes(code)) {
      this._closed = true;
      const err = new LockdError(`Observe ${this.name}`, code, details);
      if (this.listenerCount('error') > 0) this.emit('error', err);
      else process.emitWarning(`observing ${this.name} stopped: ${err.message}`);
      return;
    }
    this._transport.failed(target);
    this._stream++;
    this._backoff = Math.min(Math.max(this._backoff * 2, 25), 1000);
    const next = this._stream;
    setTimeout(() => {
      if (next === this._stream) this._open();
    }, this._backoff / 2 + Math.random() * (this._backoff / 2));
  }
}

module.exports = { Leadership, ElectionObserver, leaderInfo };
