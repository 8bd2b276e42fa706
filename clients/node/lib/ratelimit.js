'use strict';
// Fleet-wide rate limits (lockd.v1.RateLimitService): see LockdClient.take
// and LockdClient.wait.
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const { LockdError } = require('./errors');

const MAX_WAIT_CHUNK_MS = 60_000;

const duration = (msec) => ({
  seconds: Math.floor(msec / 1000),
  nanos: Math.round((msec % 1000) * 1e6),
});
const millis = (d) => (d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0);

/**
 * RateLimitedError says a wait's turn would come only after its bound
 * (waitMs): lockd says so at once, rather than at the bound. retryAfterMs is
 * how long until the cost would be allowed if nobody else took meanwhile.
 */
class RateLimitedError extends LockdError {
  constructor(key, retryAfterMs) {
    super(`rate limit ${key}: not allowed within the wait`, grpc.status.RESOURCE_EXHAUSTED, `allowed in ${retryAfterMs}ms`);
    this.name = 'RateLimitedError';
    this.key = key;
    this.retryAfterMs = retryAfterMs;
  }
}

function checkRate(rate) {
  const ok = (n) => Number.isInteger(n) && n >= 1 && n <= 0xffffffff;
  if (!rate || !ok(rate.limit) || !(rate.periodMs > 0) || (rate.burst !== undefined && !ok(rate.burst))) {
    throw new RangeError(`a rate is { limit, periodMs, burst? }: integers of at least 1 and a positive period, got ${JSON.stringify(rate)}`);
  }
}

function checkCost(cost) {
  if (!Number.isInteger(cost) || cost < 1 || cost > 0xffffffff) {
    throw new RangeError(`a take's cost must be an integer of at least 1, got ${cost}`);
  }
  return cost;
}

/**
 * takeOnce asks once (one request_id, retried on other targets) to spend
 * cost from key's limiter, waiting up to waitMs for its turn, and resolves
 * with the decision.
 */
async function takeOnce(transport, key, rate, cost, waitMs, signal) {
  checkRate(rate);
  checkCost(cost);
  const requestId = crypto.randomUUID();
  const r = await transport.call(
    `Take ${key}`,
    'rateLimits',
    'Take',
    (left) => ({
      key,
      limit: rate.limit,
      period: duration(rate.periodMs),
      burst: rate.burst ?? 0,
      cost,
      waitTimeout: duration(waitMs > 0 ? left : 0),
      requestId,
    }),
    waitMs,
    signal,
  );
  return {
    allowed: r.allowed,
    remaining: r.remaining,
    retryAfterMs: millis(r.retryAfter),
    resetAfterMs: millis(r.resetAfter),
  };
}

/** waitTurn spends cost, waiting for its turn (see LockdClient.wait). */
async function waitTurn(transport, key, rate, opts) {
  const cost = opts.cost ?? 1;
  if (opts.waitMs !== undefined) {
    const d = await takeOnce(transport, key, rate, cost, opts.waitMs, opts.signal);
    if (!d.allowed) throw new RateLimitedError(key, d.retryAfterMs);
    return d;
  }
  for (;;) {
    const d = await takeOnce(transport, key, rate, cost, MAX_WAIT_CHUNK_MS, opts.signal);
    if (d.allowed) return d;
    // The turn is further than a wait lockd grants at once: ask again once it is near.
    await sleep(Math.max(0, d.retryAfterMs - MAX_WAIT_CHUNK_MS / 2), opts.signal);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

module.exports = { takeOnce, waitTurn, RateLimitedError };
