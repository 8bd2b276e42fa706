package wechat

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// ErrCredentials is matched (errors.Is) by every *Error that WeChat or WeCom
// answered with an errcode meaning the app's credentials or setup are
// rejected: bad appid or secret, frozen secret, caller IP not whitelisted or
// awaiting an admin's confirmation, malformed request. Retrying does not help
// until an operator acts, so callers retry no faster than once a minute.
var ErrCredentials = errors.New("wechat: credentials rejected")

// ErrQuota is matched by every *Error that reports an exhausted upstream
// quota: the daily mint limit (45009), the per-minute limit (45011), or an
// HTTP 429 from a proxy.
var ErrQuota = errors.New("wechat: quota exhausted")

// ErrUnavailable is matched by every *Error that is worth retrying soon:
// system busy (-1), any errcode this package does not know, HTTP errors,
// timeouts and broken connections of the upstream, unparsable or oversized
// bodies, and replies without a usable token.
var ErrUnavailable = errors.New("wechat: upstream unavailable")

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("wechat: invalid config")

// Class sorts upstream failures by what a caller should do about them.
type Class int

// The classes of *Error; each one matches one sentinel error.
const (
	// ClassUnavailable means transient: retry with backoff (ErrUnavailable).
	ClassUnavailable Class = iota
	// ClassCredentials means an operator must fix the app (ErrCredentials).
	ClassCredentials
	// ClassQuota means the upstream limit is spent for now (ErrQuota).
	ClassQuota
)

// String returns the class's lower-case name, fit for a metric label.
func (c Class) String() string {
	switch c {
	case ClassCredentials:
		return "credentials"
	case ClassQuota:
		return "quota"
	default:
		return "unavailable"
	}
}

func (c Class) sentinel() error {
	switch c {
	case ClassCredentials:
		return ErrCredentials
	case ClassQuota:
		return ErrQuota
	default:
		return ErrUnavailable
	}
}

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

// Error is a failed mint. Its message names the endpoint by host and path
// only, never the full URL, and never contains the app's secret.
type Error struct {
	// Class tells what to do about the failure; errors.Is matches the
	// class's sentinel (ErrCredentials, ErrQuota, ErrUnavailable).
	Class Class
	// Errcode is the upstream's errcode, or 0 when the failure was not an
	// errcode reply (transport, HTTP status, unparsable body).
	Errcode int
	// Errmsg is the upstream's errmsg, with the secret masked should it echo it.
	Errmsg string
	// HTTPStatus is the upstream's HTTP status when it was not 200, else 0.
	HTTPStatus int
	// Endpoint is the host and path called, e.g. "api.weixin.qq.com/cgi-bin/token".
	Endpoint string
	// Err is the cause of a transport failure or unusable reply, stripped of
	// any *url.Error and of the secret; nil for errcode and HTTP replies.
	Err error
	// Transport is true when the request or its reply was lost on the way
	// (dial, DNS, TLS, reset, timeout): Err then holds network detail such
	// as addresses and resolvers, for the log and not for callers (see
	// Public).
	Transport bool

	tokenRejected bool // a Ticket call refused its access_token
}

// Error returns a one-line description free of the secret and the query.
func (e *Error) Error() string {
	var detail string
	switch {
	case e.Errcode != 0:
		detail = "errcode " + strconv.Itoa(e.Errcode)
		if e.Errmsg != "" {
			detail += ": " + e.Errmsg
		}
	case e.HTTPStatus != 0:
		detail = "HTTP " + strconv.Itoa(e.HTTPStatus)
		if t := http.StatusText(e.HTTPStatus); t != "" {
			detail += " " + t
		}
	case e.Err != nil:
		detail = e.Err.Error()
	default:
		detail = "failed"
	}
	return fmt.Sprintf("wechat: %s: %s (%s)", e.Endpoint, detail, e.Class)
}

// Public is Error without network detail: for a transport failure it says
// only that the endpoint could not be reached; otherwise it is Error.
func (e *Error) Public() string {
	if !e.Transport {
		return e.Error()
	}
	return fmt.Sprintf("wechat: %s: upstream unreachable (%s)", e.Endpoint, e.Class)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's class, or
// ErrTokenRejected for a Ticket call that refused its access_token.
func (e *Error) Is(target error) bool {
	return target == e.Class.sentinel() || (e.tokenRejected && target == ErrTokenRejected)
}

// ErrorInfo returns a reason and metadata for a google.rpc.ErrorInfo detail
// (the caller supplies the domain). Reasons are WECHAT_CREDENTIALS_REJECTED,
// WECHAT_QUOTA_EXHAUSTED and WECHAT_UNAVAILABLE; metadata holds "errcode"
// and "errmsg" for errcode replies, and "httpStatus" for HTTP failures.
func (e *Error) ErrorInfo() (reason string, metadata map[string]string) {
	switch e.Class {
	case ClassCredentials:
		reason = "WECHAT_CREDENTIALS_REJECTED"
	case ClassQuota:
		reason = "WECHAT_QUOTA_EXHAUSTED"
	default:
		reason = "WECHAT_UNAVAILABLE"
	}
	metadata = map[string]string{"endpoint": e.Endpoint}
	if e.Errcode != 0 {
		metadata["errcode"] = strconv.Itoa(e.Errcode)
		metadata["errmsg"] = e.Errmsg
	}
	if e.HTTPStatus != 0 {
		metadata["httpStatus"] = strconv.Itoa(e.HTTPStatus)
	}
	return reason, metadata
}
