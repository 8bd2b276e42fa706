'use strict';
// A token cache for the Feishu/Lark Node SDK (@larksuiteoapi/node-sdk) fed
// by lockd: the SDK asks its cache for the tenant_access_token before every
// API call, and this cache answers with the token lockd holds for the whole
// fleet, so the SDK never fetches one of its own (and every process of every
// service shares one token, refreshed ahead of expiry by lockd).
//
// It speaks to lockd's HTTP/JSON gateway (lockd --gateway-listen), so it
// needs nothing but fetch. Other keys the SDK caches (an app_ticket of a
// store app, for instance) stay in this process's memory.
const { CTenantAccessToken } = require('@larksuiteoapi/node-sdk');

class LockdTokenCache {
  /**
   * @param {object} opts
   * @param {string} opts.gateway lockd's gateway, e.g. "http://127.0.0.1:8080"
   * @param {string} opts.app the app's name in lockd's configuration
   * @param {string} [opts.bearer] this client's lockd token, when lockd runs with auth
   * @param {number} [opts.marginMs] how long before lockd's expire_time a
   *   token is asked for again (default 60 s); lockd itself renews it earlier
   */
  constructor({ gateway, app, bearer, marginMs = 60_000 }) {
    this.url = `${gateway.replace(/\/$/, '')}/v1/apps/${encodeURIComponent(app)}/access_token`;
    this.headers = bearer ? { authorization: `Bearer ${bearer}` } : {};
    this.marginMs = marginMs;
    this.memo = null; // {token, expireMs}
    this.others = new Map();
  }

  async get(key, options) {
    if (key !== CTenantAccessToken) {
      const e = this.others.get(this.name(key, options));
      return e && e.expire > Date.now() ? e.value : undefined;
    }
    if (this.memo && this.memo.expireMs - this.marginMs > Date.now()) return this.memo.token;
    const res = await fetch(this.url, { headers: this.headers });
    const body = await res.json();
    if (!res.ok) throw new Error(`lockd: GET ${this.url}: HTTP ${res.status}: ${body.message || JSON.stringify(body)}`);
    this.memo = { token: body.accessToken, expireMs: Date.parse(body.expireTime) };
    return this.memo.token;
  }

  async set(key, value, expire, options) {
    // The SDK would store a token it fetched itself; with this cache it
    // never fetches one, and lockd is the one place tokens are kept.
    if (key === CTenantAccessToken) return true;
    this.others.set(this.name(key, options), { value, expire });
    return true;
  }

  /**
   * refresh tells lockd that Feishu refused the token (code 99991663 and
   * the like), so that lockd replaces it once for the whole fleet.
   */
  async refresh() {
    const invalid = this.memo && this.memo.token;
    this.memo = null;
    if (!invalid) return this.get(CTenantAccessToken);
    const res = await fetch(`${this.url}:refresh`, {
      method: 'POST',
      headers: { ...this.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ invalidToken: invalid }),
    });
    const body = await res.json();
    if (!res.ok) throw new Error(`lockd: POST ${this.url}:refresh: HTTP ${res.status}: ${body.message || JSON.stringify(body)}`);
    this.memo = { token: body.accessToken, expireMs: Date.parse(body.expireTime) };
    return this.memo.token;
  }

  name(key, options) {
    return `${(options && options.namespace) || ''}/${String(key)}`;
  }
}

module.exports = { LockdTokenCache };
