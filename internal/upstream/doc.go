// Package upstream is the seam between lockd's token broker and the
// services that mint access_tokens: WeChat and WeCom (package wechat),
// Feishu/Lark (package feishu), DingTalk (package dingtalk) and any OAuth2
// client-credentials endpoint (package oauth2).
//
// A provider package turns a Config into a Client, which mints one app's
// tokens and, where the provider has them, fetches its tickets and asks
// whether the provider accepts a token. Its Traits tell the broker how the
// provider hands tokens out (a new one on every call, the same one until
// it expires, a new one in its last minutes, or the same one with its life
// renewed), which is all the broker needs to know to mint once per cycle,
// refresh ahead and never serve an expired token, whoever the provider is.
//
// Every failure is an *Error whose Class says what to do about it
// (ErrCredentials, ErrQuota, ErrUnavailable) and which carries the
// provider's own code. Caller sends the providers' HTTP requests: it never
// follows redirects (they would carry the secret elsewhere), bounds what it
// reads, and keeps the secret, access tokens and full URLs out of every
// error it returns.
package upstream
