'use strict';
// @lockd/client: lockd's Node client. See clients/node/README.md.
const { LockdClient } = require('./client');
const { Lease } = require('./lease');
const { Leadership, ElectionObserver } = require('./leadership');
const { LockdError, LeaseLostError } = require('./errors');
const { RateLimitedError } = require('./ratelimit');
const { status } = require('@grpc/grpc-js');

module.exports = { LockdClient, Lease, Leadership, ElectionObserver, LockdError, LeaseLostError, RateLimitedError, status };
