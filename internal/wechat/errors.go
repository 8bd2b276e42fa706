package wechat

import "github.com/lockd/lockd/internal/upstream"

// The failures of this package are package upstream's *Error values; these
// names keep WeChat code readable.
type (
	// Error is a failed call; see upstream.Error.
	Error = upstream.Error
	// Class sorts failures by what to do about them; see upstream.Class.
	Class = upstream.Class
)

// The classes of *Error.
const (
	// ClassUnavailable means transient: retry with backoff.
	ClassUnavailable = upstream.ClassUnavailable
	// ClassCredentials means an operator must fix the app.
	ClassCredentials = upstream.ClassCredentials
	// ClassQuota means the upstream limit is spent for now.
	ClassQuota = upstream.ClassQuota
)

// The sentinels the errors match.
var (
	// ErrCredentials: WeChat or WeCom rejected the credentials or setup.
	ErrCredentials = upstream.ErrCredentials
	// ErrQuota: a quota is spent (45009, 45011, 45033, HTTP 429).
	ErrQuota = upstream.ErrQuota
	// ErrUnavailable: worth retrying soon.
	ErrUnavailable = upstream.ErrUnavailable
	// ErrInvalidConfig is wrapped by every error Config.Validate returns.
	ErrInvalidConfig = upstream.ErrInvalidConfig
)

// errcodeClasses lists the errcodes the token endpoints of WeChat
// (cgi-bin/token, cgi-bin/stable_token) and WeCom (cgi-bin/gettoken) are
// known to answer with, other than -1 (system busy), which like every
// unlisted errcode is ClassUnavailable.
var errcodeClasses = map[int]Class{
	40001: ClassCredentials, // invalid credential: wrong AppSecret (WeCom: wrong corpsecret)
	40002: ClassCredentials, // invalid grant_type
	40013: ClassCredentials, // invalid appid (WeCom: invalid corpid)
	40091: ClassCredentials, // WeCom: invalid secret
	40125: ClassCredentials, // invalid appsecret
	40164: ClassCredentials, // caller IP not in the whitelist
	40243: ClassCredentials, // AppSecret frozen
	41002: ClassCredentials, // appid (corpid) missing
	41004: ClassCredentials, // secret missing
	43002: ClassCredentials, // POST required: api_base rewrites the request
	43003: ClassCredentials, // HTTPS required: api_base uses http
	44002: ClassCredentials, // empty POST body
	47001: ClassCredentials, // malformed request body
	48001: ClassCredentials, // API not authorized for this account
	48004: ClassCredentials, // API banned for this account
	50004: ClassCredentials, // token API forbidden for this account
	50007: ClassCredentials, // account frozen
	60020: ClassCredentials, // WeCom: caller IP not allowed
	61004: ClassCredentials, // caller IP not registered
	61024: ClassCredentials, // third-party platform apps must use the component token
	89501: ClassCredentials, // caller IP awaits the admin's confirmation
	89503: ClassCredentials, // this call needs the admin's confirmation
	89506: ClassCredentials, // caller IP refused twice by the admin within 24 h
	89507: ClassCredentials, // caller IP refused by the admin within 1 h
	45009: ClassQuota,       // daily quota reached (also: stable force_refresh limit)
	45011: ClassQuota,       // per-minute quota reached
	45033: ClassQuota,       // WeCom: too many concurrent calls
}

// ClassOf returns the class of a non-zero errcode from a token endpoint.
// Unknown errcodes are ClassUnavailable: a new upstream failure mode is more
// often transient than a configuration problem, and the errcode still reaches
// the caller and the metrics.
func ClassOf(errcode int) Class {
	return errcodeClasses[errcode] // the zero Class is ClassUnavailable
}
