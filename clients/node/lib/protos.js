'use strict';
// Loads lockd's wire API from proto/lockd/v1: the package's own copy (made by
// `npm pack` through scripts/pack.js) or, in a checkout of lockd, the
// repository's proto/ directory, so the client never drifts from the protos.
const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const FILES = ['lockd/v1/lock.proto', 'lockd/v1/token.proto', 'lockd/v1/election.proto', 'lockd/v1/semaphore.proto', 'lockd/v1/ratelimit.proto'];
const OWN = path.join(__dirname, '..', 'proto');
const REPO = path.join(__dirname, '..', '..', '..', 'proto');

function protoDir() {
  for (const dir of [OWN, REPO]) {
    if (fs.existsSync(path.join(dir, FILES[0]))) return dir;
  }
  throw new Error(`lockd protos not found in ${OWN} or ${REPO}`);
}

let loaded;

/** load returns the lockd.v1 package: the client constructors of its services. */
function load() {
  if (!loaded) {
    const def = protoLoader.loadSync(FILES, {
      includeDirs: [protoDir()],
      longs: String, // uint64 fencing tokens and int64 seconds arrive as strings
      enums: String,
      defaults: true,
    });
    loaded = grpc.loadPackageDefinition(def).lockd.v1;
  }
  return loaded;
}

module.exports = { load };
