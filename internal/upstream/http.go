package upstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// MaxResponseBytes bounds how much of an answer Caller reads; a longer body
// is an ErrUnavailable failure.
const MaxResponseBytes = 64 << 10

// DefaultTimeout is the overall timeout of the *http.Client NewCaller makes
// when given nil.
const DefaultTimeout = 10 * time.Second

// Caller sends one app's requests to its upstream. It never follows
// redirects (a redirect would carry the secret to another URL), reads at
// most MaxResponseBytes, and returns failures as *Error values free of the
// secret, of the values passed as extra, and of full URLs.
type Caller struct {
	provider string
	hc       *http.Client
	base     string // scheme, host and path prefix of every URL called
	host     string // host and path prefix of base, for messages
	secret   string
}

// NewCaller returns a Caller for provider's endpoints under base (scheme,
// host and optional path prefix) that masks secret, calling through a copy
// of hc that never follows redirects; a nil hc means a client with
// DefaultTimeout.
func NewCaller(provider string, hc *http.Client, base *url.URL, secret string) *Caller {
	var own http.Client
	if hc != nil {
		own = *hc
	} else {
		own.Timeout = DefaultTimeout
	}
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	b := strings.TrimRight(base.String(), "/")
	return &Caller{provider: provider, hc: &own, base: b, host: strings.TrimRight(base.Host+base.Path, "/"), secret: secret}
}

// HTTPClient returns the client the Caller sends through (no redirects).
func (c *Caller) HTTPClient() *http.Client { return c.hc }

// Base returns the scheme, host and path prefix requests go to.
func (c *Caller) Base() string { return c.base }

// Endpoint returns host and path of path under the base: what messages name.
func (c *Caller) Endpoint(path string) string { return c.host + path }

// Reply is an upstream's answer.
type Reply struct {
	// Status is the HTTP status.
	Status int
	// Body is the body, at most MaxResponseBytes.
	Body []byte
}

// TraceSent returns ctx with a trace that records whether a request sent
// with it was written out, and the function that tells.
func TraceSent(ctx context.Context) (context.Context, func() bool) {
	var sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) },
	})
	return ctx, sent.Load
}

// Do sends req and returns the answer whatever its status, or an *Error
// naming endpoint for a request that got no usable answer.
func (c *Caller) Do(req *http.Request, endpoint string, extra ...string) (Reply, error) {
	ctx := req.Context()
	tctx, sent := TraceSent(ctx)
	req = req.WithContext(tctx)
	resp, err := c.hc.Do(req)
	if err != nil {
		return Reply{}, c.fail(ctx, endpoint, err, sent(), extra...)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return Reply{}, c.fail(ctx, endpoint, fmt.Errorf("reading response: %w", err), true, extra...)
	}
	if len(body) > MaxResponseBytes {
		return Reply{}, &Error{Provider: c.provider, Class: ClassUnavailable, Endpoint: endpoint, HTTPStatus: httpStatus(resp.StatusCode),
			Err: fmt.Errorf("response longer than %d bytes", MaxResponseBytes)}
	}
	return Reply{Status: resp.StatusCode, Body: body}, nil
}

func httpStatus(s int) int {
	if s == http.StatusOK {
		return 0
	}
	return s
}

// StatusError is the *Error of an answer with an HTTP error status and no
// code the provider package understood.
func (c *Caller) StatusError(endpoint string, status int) *Error {
	return &Error{Provider: c.provider, Class: ClassOfStatus(status), HTTPStatus: status, Endpoint: endpoint}
}

// BodyError is the *Error of an answer the provider package could not use
// (unparsable, without a token): transient.
func (c *Caller) BodyError(endpoint string, status int, err error, extra ...string) *Error {
	return &Error{Provider: c.provider, Class: ClassUnavailable, HTTPStatus: httpStatus(status), Endpoint: endpoint, Err: c.Scrub(err, extra...)}
}

// Fail turns a failure to build or send a request to endpoint into an
// error without the URL, the secret or the extra values: the caller's
// context error when ctx ended, else an *Error.
func (c *Caller) Fail(ctx context.Context, endpoint string, err error, extra ...string) error {
	return c.fail(ctx, endpoint, err, false, extra...)
}

// FailSent is Fail for a request that may have been written out before it
// failed (sent): the *Error says so in Sent.
func (c *Caller) FailSent(ctx context.Context, endpoint string, err error, sent bool, extra ...string) error {
	return c.fail(ctx, endpoint, err, sent, extra...)
}

func (c *Caller) fail(ctx context.Context, endpoint string, err error, sent bool, extra ...string) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up; that is not the upstream's fault.
		return fmt.Errorf("%s: %s: %w", c.provider, endpoint, ctxErr)
	}
	cause := c.Scrub(err, extra...)
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		// The http.Client's own Timeout fired, not the caller's deadline:
		// keep the text but not the identity, so that callers passing
		// context errors through do not mistake it for their own.
		cause = errors.New(cause.Error())
	}
	return &Error{Provider: c.provider, Class: ClassUnavailable, Endpoint: endpoint, Err: cause, Transport: true, Sent: sent}
}

// Scrub peels *url.Error layers, whose messages hold the full URL and so a
// query's secret or access_token, off err. Should what remains still
// mention the secret, an extra value or a URL (a *url.Error further down,
// an odd cause), it is flattened into a message that names the endpoint
// instead and masks them.
func (c *Caller) Scrub(err error, extra ...string) error {
	for {
		ue, ok := err.(*url.Error)
		if !ok {
			break
		}
		err = ue.Err
	}
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := c.Redact(c.dropURLs(msg), extra...)
	var ue *url.Error
	if clean != msg || errors.As(err, &ue) {
		return errors.New(clean)
	}
	return err
}

// dropURLs replaces every URL of the upstream in msg, with whatever query
// follows it, by its host and path.
func (c *Caller) dropURLs(msg string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, c.base)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i])
		msg = msg[i+len(c.base):]
		end := strings.IndexAny(msg, " \"'\n")
		if end < 0 {
			end = len(msg)
		}
		path := msg[:end]
		if q := strings.IndexAny(path, "?#"); q >= 0 {
			path = path[:q]
		}
		b.WriteString(c.host + path)
		msg = msg[end:]
	}
}

// Redact masks every spelling of the secret, and of the extra values, a
// message could carry: as is, URL-encoded, JSON-escaped, and (for the
// secret) inside an HTTP Basic credential.
func (c *Caller) Redact(s string, extra ...string) string {
	for _, v := range append([]string{c.secret}, extra...) {
		if v == "" {
			continue
		}
		quoted, _ := json.Marshal(v)
		forms := []string{v, url.QueryEscape(v), url.PathEscape(v), string(quoted[1 : len(quoted)-1])}
		for _, form := range forms {
			s = strings.ReplaceAll(s, form, "REDACTED")
		}
	}
	if c.secret != "" && strings.Contains(s, "Basic ") {
		// A Basic credential is base64 of id:secret; mask any such blob.
		for _, f := range strings.Fields(s) {
			raw, err := base64.StdEncoding.DecodeString(strings.Trim(f, `"',`))
			if err == nil && (strings.Contains(string(raw), c.secret) || strings.Contains(string(raw), url.QueryEscape(c.secret))) {
				s = strings.ReplaceAll(s, f, "REDACTED")
			}
		}
	}
	return s
}

// String describes the Caller without its secret.
func (c *Caller) String() string { return "upstream.Caller{" + c.provider + " " + c.base + "}" }

// GoString is String, so that %#v hides the secret as well.
func (c *Caller) GoString() string { return c.String() }
