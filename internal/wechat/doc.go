// Package wechat mints access_tokens from the upstream token APIs: WeChat's
// classic GET /cgi-bin/token and stable POST /cgi-bin/stable_token, and
// WeCom's GET /cgi-bin/gettoken. It also fetches JS-SDK tickets (Ticket) and
// asks whether the upstream accepts a token (Probe, through getcallbackip).
// It knows nothing of Redis, caching or gRPC; the token broker decides when
// to mint and the service maps errors.
//
// # Lifetimes
//
// expires_in is whole seconds. The classic API mints a new token on every
// call; the stable API in normal mode and WeCom hand out the current token
// again, with the life it has left, rounded (FreshWindow says which). A
// reply with expires_in 0 is a token in its last second, not an error.
//
// # Errors
//
// Every failed Mint returns an *Error whose Class says what to do, and which
// errors.Is matches against one sentinel:
//
//	ErrCredentials  40001 40002 40013 40091 40125 40164 40243 41002 41004
//	                43002 43003 44002 47001 48001 48004 50004 50007 60020
//	                61004 61024 89501 89503 89506 89507
//	ErrQuota        45009 45011 45033, HTTP 429
//	ErrUnavailable  -1 and every other errcode; HTTP status other than 200
//	                and 429; connection failures and upstream timeouts;
//	                bodies over 64 KiB or not JSON; replies without a token
//	                or with a negative expires_in
//
// From Ticket, 40001, 40014, 42001 and 41001 say that the access_token
// passed was refused: such errors are ErrUnavailable and also match
// ErrTokenRejected.
//
// Unknown errcodes count as unavailable on purpose: a new failure mode is
// more often passing than a configuration error, and the errcode still
// reaches the caller through (*Error).ErrorInfo and the metrics. 40001 and
// 42001 from other APIs mean "this token is invalid"; from a token endpoint
// 40001 means a wrong secret, hence credentials.
//
// When the caller's ctx ends before the reply, Mint returns an error that
// matches ctx.Err() instead, so that deadlines pass through unchanged.
//
// # Secrets
//
// The secret travels in the query (classic, WeCom) or the body (stable).
// Go's *url.Error prints the whole URL, so Mint strips those layers and masks
// the secret in whatever remains, including an errmsg that echoes it. Config,
// Client and Token print without their secrets; Client never follows
// redirects, which would carry the secret elsewhere.
//
// Package wechatfake serves the same endpoints, with WeChat's token windows
// and limits, for tests and local trials.
package wechat
