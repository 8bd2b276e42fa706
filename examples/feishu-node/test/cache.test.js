'use strict';
// Runs the Feishu SDK against the fake Feishu upstream with its token cache
// fed by lockd (a real lockd process with its gateway on): the SDK's API
// calls carry lockd's token, and the upstream sees exactly one token
// request, lockd's.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lark = require('@larksuiteoapi/node-sdk');
const { LockdTokenCache } = require('../lockd-cache');
const { start, freePort } = require('./processes');

test('the SDK calls Feishu with lockd\'s token and never fetches one itself', async (t) => {
  const fakePort = await freePort();
  const fake = await start('WECHAT_FAKE_BIN', './cmd/wechat-fake',
    [`--listen=127.0.0.1:${fakePort}`, '--feishu', 'cli_demo:feishu-secret'], fakePort);
  t.after(() => fake.stop());
  const base = `http://127.0.0.1:${fakePort}`;

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lockd-feishu-'));
  const config = path.join(dir, 'lockd.yaml');
  fs.writeFileSync(config, [
    'apps:',
    `  - {name: feishu-bot, provider: feishu, appid: cli_demo, secret_env: FEISHU_SECRET, api_base: "${base}"}`,
    '',
  ].join('\n'));
  const gatewayPort = await freePort();
  const lockd = await start('LOCKD_BIN', './cmd/lockd', [
    `--listen=127.0.0.1:${await freePort()}`,
    `--http-listen=127.0.0.1:${await freePort()}`,
    `--gateway-listen=127.0.0.1:${gatewayPort}`,
    `--config=${config}`,
  ], gatewayPort, { FEISHU_SECRET: 'feishu-secret' });
  t.after(() => lockd.stop());
  const gateway = `http://127.0.0.1:${gatewayPort}`;

  const cache = new LockdTokenCache({ gateway, app: 'feishu-bot' });
  // The SDK is given a wrong secret on purpose: were it to fetch a token of
  // its own, Feishu would refuse it.
  const client = new lark.Client({ appId: 'cli_demo', appSecret: 'the-sdk-never-needs-it', domain: base, cache, loggerLevel: lark.LoggerLevel.error });
  for (let i = 0; i < 3; i++) {
    const res = await client.contact.scope.list({});
    assert.strictEqual(res.code, 0, `scope.list: ${JSON.stringify(res)}`);
  }

  const fromLockd = await (await fetch(`${gateway}/v1/apps/feishu-bot/access_token`)).json();
  const stats = await (await fetch(`${base}/fake/stats?id=cli_demo&path=${encodeURIComponent('/open-apis/contact/v3/scopes')}`)).json();
  assert.deepStrictEqual(stats.seen, [fromLockd.accessToken, fromLockd.accessToken, fromLockd.accessToken],
    'every API call carried lockd\'s token');
  assert.strictEqual(stats.token_requests, 1, 'one token request, lockd\'s');
  assert.strictEqual(stats.issued, 1);

  // Feishu refusing the token: the cache asks lockd to replace it, once.
  const replaced = await cache.refresh();
  assert.strictEqual(typeof replaced, 'string');
});
