'use strict';
const grpc = require('@grpc/grpc-js');

/** LockdError is a call to lockd that failed, after any retries; code is the gRPC status code. */
class LockdError extends Error {
  constructor(message, code, details, cause) {
    super(`${message}: ${grpc.status[code] ?? code}${details ? ' ' + details : ''}`, cause ? { cause } : undefined);
    this.name = 'LockdError';
    this.code = code;
    this.details = details;
  }
}

/**
 * LeaseLostError says a lease is no longer held: lockd ended its KeepAlive
 * stream with NOT_FOUND, or no renewal was confirmed before the lease could
 * run out. It is reported before anyone else can be granted the key.
 */
class LeaseLostError extends LockdError {
  constructor(key, reason) {
    super(`lease on ${key} lost`, grpc.status.NOT_FOUND, reason);
    this.name = 'LeaseLostError';
    this.key = key;
    this.reason = reason;
  }
}

module.exports = { LockdError, LeaseLostError };
