'use strict';
// Bearer tokens, permissions, TLS and the access_token calls.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { LockdClient, LockdError, status } = require('..');
const { startRedis, startLockd, startWeChatFake } = require('./harness');

const TOKEN = 'orders-token-0123456789abcdef';

describe('auth and tokens', () => {
  let redis, wechat, lockd, dir;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-auth-'));
    redis = await startRedis();
    wechat = await startWeChatFake('wx1234:app-secret');
    const config = path.join(dir, 'lockd.yaml');
    fs.writeFileSync(
      config,
      `apps:
  - {name: mp, provider: wechat, appid: wx1234, secret_env: MP_SECRET, api_base: "${wechat.base}"}
auth:
  clients:
    - {name: orders, token_env: ORDERS_TOKEN, locks: ["orders/"], apps: [mp]}
`,
    );
    lockd = await startLockd(redis, {
      flags: [`--config=${config}`],
      env: { MP_SECRET: 'app-secret', ORDERS_TOKEN: TOKEN },
    });
  });
  after(async () => {
    await lockd.stop();
    await wechat.stop();
    await redis.stop();
  });

  it('opens the client its keys with a bearer token', async () => {
    const anonymous = new LockdClient({ targets: [lockd.addr] });
    const orders = new LockdClient({ targets: [lockd.addr], token: TOKEN });
    try {
      await assert.rejects(anonymous.tryAcquire('orders/1'), (e) => e instanceof LockdError && e.code === status.UNAUTHENTICATED);
      await (await orders.tryAcquire('orders/1')).release();
      await assert.rejects(orders.tryAcquire('billing/1'), (e) => e.code === status.PERMISSION_DENIED);
    } finally {
      await anonymous.close();
      await orders.close();
    }
  });

  it('reads a token file again when it changes', async () => {
    const file = path.join(dir, 'token');
    fs.writeFileSync(file, 'not-a-known-token-at-all\n');
    const c = new LockdClient({ targets: [lockd.addr], tokenFile: file });
    try {
      await assert.rejects(c.tryAcquire('orders/2'), (e) => e.code === status.UNAUTHENTICATED);
      fs.writeFileSync(file, `${TOKEN}\n`);
      const later = new Date(Date.now() + 5000);
      fs.utimesSync(file, later, later);
      await (await c.tryAcquire('orders/2')).release();
    } finally {
      await c.close();
    }
  });

  it('shares access tokens and refreshes a rejected one once', async () => {
    const c = new LockdClient({ targets: [lockd.addr], token: TOKEN });
    try {
      const first = await c.getAccessToken('mp');
      assert.ok(first.accessToken.length > 0);
      assert.ok(first.expireTime > new Date());
      assert.equal((await c.getAccessToken('mp')).accessToken, first.accessToken);
      // A report replaces the token only once the upstream refuses it.
      await wechat.reject(first.accessToken);
      const fresh = await c.refreshAccessToken('mp', first.accessToken);
      assert.notEqual(fresh.accessToken, first.accessToken);
      assert.equal((await c.refreshAccessToken('mp', first.accessToken)).accessToken, fresh.accessToken);
      await assert.rejects(c.getAccessToken('nope'), (e) => e.code === status.PERMISSION_DENIED);
    } finally {
      await c.close();
    }
  });
});

describe('tls', () => {
  function selfSigned(dir, name) {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', `/CN=${name}`, '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
      '-keyout', path.join(dir, `${name}-key.pem`), '-out', path.join(dir, `${name}.pem`),
    ], { stdio: 'pipe' });
    return { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}-key.pem`) };
  }

  it('takes leases over TLS and mutual TLS', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-node-tls-'));
    const server = selfSigned(dir, 'server');
    const client = selfSigned(dir, 'client');
    const tls = [`--tls-cert=${server.cert}`, `--tls-key=${server.key}`];
    const redis = await startRedis();
    const lockd = await startLockd(redis, { flags: tls });
    const mutual = await startLockd(redis, { flags: [...tls, `--tls-client-ca=${client.cert}`] });
    const clients = {
      good: new LockdClient({ targets: [lockd.addr], tls: { ca: server.cert } }),
      plain: new LockdClient({ targets: [lockd.addr], retryTimeoutMs: 200 }),
      withCert: new LockdClient({ targets: [mutual.addr], tls: { ca: server.cert, cert: client.cert, key: client.key } }),
      withoutCert: new LockdClient({ targets: [mutual.addr], tls: { ca: server.cert }, retryTimeoutMs: 200 }),
    };
    try {
      await (await clients.good.tryAcquire('node/tls')).release();
      await assert.rejects(clients.plain.tryAcquire('node/tls'), (e) => e.code === status.UNAVAILABLE);
      await (await clients.withCert.tryAcquire('node/mtls')).release();
      await assert.rejects(clients.withoutCert.tryAcquire('node/mtls'), (e) => e.code === status.UNAVAILABLE);
    } finally {
      for (const c of Object.values(clients)) await c.close();
      await mutual.stop();
      await lockd.stop();
      await redis.stop();
    }
  });
});
