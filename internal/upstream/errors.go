package upstream

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// ErrCredentials is matched (errors.Is) by every *Error the upstream
// answered with a code meaning the app's credentials or setup are
// rejected: bad appid or secret, frozen secret, caller IP not allowed,
// malformed request, unknown scope. Retrying does not help until an
// operator acts, so callers retry no faster than once a minute.
var ErrCredentials = errors.New("upstream: credentials rejected")

// ErrQuota is matched by every *Error that reports an exhausted upstream
// quota or rate limit, including an HTTP 429.
var ErrQuota = errors.New("upstream: quota exhausted")

// ErrUnavailable is matched by every *Error that is worth retrying soon:
// system busy, any code a provider package does not know, HTTP errors,
// timeouts and broken connections, unparsable or oversized bodies, and
// replies without a usable token.
var ErrUnavailable = errors.New("upstream: unavailable")

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("upstream: invalid config")

// ErrTokenRejected is matched by every *Error from Client.Ticket whose code
// says the access_token passed was not accepted: get a new token and ask
// again.
var ErrTokenRejected = errors.New("upstream: access_token rejected")

// ErrTicketType is returned by Client.Ticket for a ticket type the provider
// does not serve.
var ErrTicketType = errors.New("upstream: ticket type not served by this provider")

// ErrNoProbe is returned by Client.Probe for a provider without a way to
// ask whether it accepts a token (Traits.Probe is false).
var ErrNoProbe = errors.New("upstream: the provider cannot be asked whether it accepts a token")

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

// ClassOfStatus is the class of an HTTP error status without a code the
// provider package knows: 429 is a quota, other 4xx a request the upstream
// will refuse again until someone fixes it (wrong URL, credentials), and
// the rest (5xx, odd statuses) transient.
func ClassOfStatus(status int) Class {
	switch {
	case status == http.StatusTooManyRequests:
		return ClassQuota
	case status == http.StatusRequestTimeout:
		return ClassUnavailable
	case status >= 400 && status < 500:
		return ClassCredentials
	}
	return ClassUnavailable
}

// Error is a failed upstream call. Its message names the endpoint by host
// and path only, never the full URL, and never contains the app's secret.
type Error struct {
	// Provider is the provider of the app (WeChat, WeCom, Feishu,
	// DingTalk, OAuth2); empty reads as WeChat.
	Provider string
	// Class tells what to do about the failure; errors.Is matches the
	// class's sentinel (ErrCredentials, ErrQuota, ErrUnavailable).
	Class Class
	// Errcode is the provider's numeric error code (WeChat's and
	// DingTalk's errcode, Feishu's code), or 0.
	Errcode int
	// Code is the provider's textual error code (OAuth2's error, DingTalk's
	// code), or "".
	Code string
	// Errmsg is the provider's message, with the secret masked should it
	// echo it.
	Errmsg string
	// HTTPStatus is the upstream's HTTP status when it was not 200, else 0.
	HTTPStatus int
	// Endpoint is the host and path called, e.g. "api.weixin.qq.com/cgi-bin/token".
	Endpoint string
	// Err is the cause of a transport failure or unusable reply, stripped of
	// any *url.Error and of the secret; nil for code and HTTP replies.
	Err error
	// Transport is true when the request or its reply was lost on the way
	// (dial, DNS, TLS, reset, timeout): Err then holds network detail such
	// as addresses and resolvers, for the log and not for callers (see
	// Public).
	Transport bool
	// Sent is true when a transport failure came after the request was
	// written: the upstream may have acted on it (minted a token) although
	// no answer arrived.
	Sent bool
	// TokenRejected is true for a Ticket call whose answer says the
	// access_token passed was not accepted; such errors match
	// ErrTokenRejected.
	TokenRejected bool
}

// CodeText is the provider's code as text: Code, else Errcode, else "".
func (e *Error) CodeText() string {
	switch {
	case e.Code != "":
		return e.Code
	case e.Errcode != 0:
		return strconv.Itoa(e.Errcode)
	}
	return ""
}

func (e *Error) provider() string {
	if e.Provider == "" {
		return WeChat
	}
	return e.Provider
}

// Error returns a one-line description free of the secret and the query.
func (e *Error) Error() string {
	var detail string
	switch {
	case e.Code != "":
		detail = "error " + e.Code
		if e.Errmsg != "" {
			detail += ": " + e.Errmsg
		}
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
	return fmt.Sprintf("%s: %s: %s (%s)", e.provider(), e.Endpoint, detail, e.Class)
}

// Public is Error without network detail: for a transport failure it says
// only that the endpoint could not be reached; otherwise it is Error.
func (e *Error) Public() string {
	if !e.Transport {
		return e.Error()
	}
	return fmt.Sprintf("%s: %s: upstream unreachable (%s)", e.provider(), e.Endpoint, e.Class)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's class, or
// ErrTokenRejected for a Ticket call that refused its access_token.
func (e *Error) Is(target error) bool {
	return target == e.Class.sentinel() || (e.TokenRejected && target == ErrTokenRejected)
}

// ErrorInfo returns a reason and metadata for a google.rpc.ErrorInfo detail
// (the caller supplies the domain). Reasons are <PROVIDER>_CREDENTIALS_REJECTED,
// <PROVIDER>_QUOTA_EXHAUSTED and <PROVIDER>_UNAVAILABLE, where PROVIDER is
// WECHAT (for WeChat and WeCom), FEISHU, DINGTALK or OAUTH2; metadata holds
// "endpoint", "errcode" (the provider's code, numeric or textual) and
// "errmsg" for code replies, "httpStatus" for HTTP failures, and
// "provider" when the provider is not WeChat.
func (e *Error) ErrorInfo() (reason string, metadata map[string]string) {
	prefix := strings.ToUpper(e.provider())
	if e.provider() == WeCom {
		prefix = "WECHAT"
	}
	switch e.Class {
	case ClassCredentials:
		reason = prefix + "_CREDENTIALS_REJECTED"
	case ClassQuota:
		reason = prefix + "_QUOTA_EXHAUSTED"
	default:
		reason = prefix + "_UNAVAILABLE"
	}
	metadata = map[string]string{"endpoint": e.Endpoint}
	if code := e.CodeText(); code != "" {
		metadata["errcode"] = code
		metadata["errmsg"] = e.Errmsg
	}
	if e.HTTPStatus != 0 {
		metadata["httpStatus"] = strconv.Itoa(e.HTTPStatus)
	}
	if e.Provider != "" && e.Provider != WeChat && e.Provider != WeCom {
		metadata["provider"] = e.Provider
	}
	return reason, metadata
}
