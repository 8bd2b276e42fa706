'use strict';
// The connections to every lockd target, and calls that move on to the next
// target on UNAVAILABLE (or when an attempt runs past its own deadline, as on
// a frozen replica). Only calls that are safe to repeat go through here: lock
// calls carry a request_id, so a retry never acts twice.
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { load } = require('./protos');
const { LockdError } = require('./errors');

const now = () => performance.now();

class Transport {
  constructor(opts) {
    const v1 = load();
    if (!opts.targets || opts.targets.length === 0) {
      throw new Error("no target: pass { targets: ['127.0.0.1:50051'] }");
    }
    const creds = opts.tls
      ? grpc.credentials.createSsl(
          read(opts.tls.ca),
          read(opts.tls.key),
          read(opts.tls.cert),
        )
      : grpc.credentials.createInsecure();
    const options = opts.tls?.serverName ? { 'grpc.ssl_target_name_override': opts.tls.serverName } : {};
    this.targets = [...opts.targets];
    this.locks = this.targets.map((t) => new v1.LockService(t, creds, options));
    this.tokens = this.targets.map((t) => new v1.TokenService(t, creds, options));
    this.elections = this.targets.map((t) => new v1.ElectionService(t, creds, options));
    this.semaphores = this.targets.map((t) => new v1.SemaphoreService(t, creds, options));
    this.rateLimits = this.targets.map((t) => new v1.RateLimitService(t, creds, options));
    this.callTimeoutMs = opts.callTimeoutMs ?? 10_000;
    this.retryTimeoutMs = opts.retryTimeoutMs ?? 15_000;
    this.token = opts.token;
    this.tokenFile = opts.tokenFile;
    this.current = 0;
  }

  /** metadata carries the bearer token, re-read from tokenFile when it changed. */
  metadata() {
    const md = new grpc.Metadata();
    let token = this.token;
    if (this.tokenFile) {
      const mtime = fs.statSync(this.tokenFile).mtimeMs;
      if (mtime !== this.tokenRead) {
        this.tokenFromFile = fs.readFileSync(this.tokenFile, 'utf8').trim();
        this.tokenRead = mtime;
      }
      token = this.tokenFromFile;
    }
    if (token) md.set('authorization', `Bearer ${token}`);
    return md;
  }

  /** failed moves calls off target i, unless another failure moved them already. */
  failed(i) {
    if (this.current === i) this.current = (i + 1) % this.targets.length;
  }

  /**
   * call makes service.method(request(remainingWaitMs)), retrying as above
   * until waitMs plus the retry timeout has passed. signal aborts it.
   */
  async call(what, service, method, request, waitMs = 0, signal) {
    const start = now();
    const waitEnd = start + waitMs;
    const giveUp = waitEnd + this.retryTimeoutMs;
    let backoff = 25;
    for (;;) {
      signal?.throwIfAborted();
      if (this.closed) throw new LockdError(what, grpc.status.CANCELLED, 'the client is closed');
      const target = this.current;
      const t = now();
      const remaining = Math.max(0, waitEnd - t);
      const deadline = Math.max(Math.min(giveUp - t, remaining + this.callTimeoutMs), 1);
      let err;
      try {
        return await unary(this[service][target], method, request(remaining), this.metadata(), deadline, signal);
      } catch (e) {
        err = e;
      }
      signal?.throwIfAborted();
      const code = err.code;
      const attemptTimedOut = code === grpc.status.DEADLINE_EXCEEDED && now() < giveUp;
      if (code !== grpc.status.UNAVAILABLE && !attemptTimedOut) {
        throw new LockdError(`${what} on ${this.targets[target]}`, code, err.details, err);
      }
      this.failed(target);
      const sleep = backoff / 2 + Math.random() * (backoff / 2);
      if (now() + sleep >= giveUp) {
        throw new LockdError(`${what} on ${this.targets[target]} (retries exhausted)`, code, err.details, err);
      }
      await delay(sleep, signal);
      backoff = Math.min(backoff * 2, 1000);
    }
  }

  close() {
    this.closed = true;
    for (const c of [...this.locks, ...this.tokens, ...this.elections, ...this.semaphores, ...this.rateLimits]) c.close();
  }
}

function unary(client, method, req, md, deadlineMs, signal) {
  return new Promise((resolve, reject) => {
    const call = client[method](req, md, { deadline: new Date(Date.now() + deadlineMs) }, (err, res) => {
      signal?.removeEventListener('abort', onAbort);
      if (err) reject(err);
      else resolve(res);
    });
    const onAbort = () => call.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function delay(ms, signal) {
  return new Promise((resolve, reject) => {
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

function read(file) {
  return file ? fs.readFileSync(file) : null;
}

module.exports = { Transport, now };
