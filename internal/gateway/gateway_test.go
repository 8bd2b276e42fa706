package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/service"
)

// keys that must work in a URL path: slashes, spaces, braces, Unicode,
// colons before the verb, characters that must be escaped (% ? # +), and
// empty or dot segments.
var pathKeys = []string{
	"orders/42",
	"a b/{c}/{{d}}",
	"中文/ключ/🔒",
	"ns:with:colons",
	"100%/x?y#z+w&v=1",
	"/leading//double",
	"x/./y/../z",
}

// lockVia sends the lock RPCs for key, with the key in the path (its
// slashes as they are, or all escaped as %2F) or in the body.
type lockVia struct {
	name string
	url  func(key, verb string) string
	body func(key, fields string) string
}

var lockVias = []lockVia{
	{
		name: "key in the path",
		url:  func(key, verb string) string { return "/v1/locks/" + pathOf(key) + ":" + verb },
		body: func(_, fields string) string { return "{" + fields + "}" },
	},
	{
		name: "key in the path, slashes escaped",
		url:  func(key, verb string) string { return "/v1/locks/" + url.PathEscape(key) + ":" + verb },
		body: func(_, fields string) string { return "{" + fields + "}" },
	},
	{
		name: "key in the body",
		url:  func(_, verb string) string { return "/v1/locks:" + verb },
		body: func(key, fields string) string {
			if fields == "" {
				return `{"key":` + jsonString(key) + `}`
			}
			return `{"key":` + jsonString(key) + "," + fields + "}"
		},
	},
}

// TestLockEndpoints runs every unary lock endpoint, by each way of naming
// the key, on keys that stress URL paths: Acquire, WLock (re-entry), Renew,
// Release down to zero and NOT_FOUND after, and RLock shared by two owners.
func TestLockEndpoints(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	for v, via := range lockVias {
		for _, base := range pathKeys {
			key := fmt.Sprintf("%s-%d", base, v) // each way its own key
			t.Run(via.name+"/"+base, func(t *testing.T) {
				t.Parallel()
				post := func(verb, fields string) reply {
					t.Helper()
					return s.call(t, http.MethodPost, via.url(key, verb), "", via.body(key, fields))
				}
				a := post("acquire", `"owner":"http-1","ttl":"30s"`).ok(t, "acquire")
				if a.get("acquired") != true || a.str("lease", "key") != key || a.str("lease", "mode") != "LOCK_MODE_WRITE" {
					t.Fatalf("acquire: %s", a.raw)
				}
				if strings.Contains(a.raw, `, "`) || strings.Contains(a.raw, "\n") {
					t.Errorf("the answer is not compact JSON: %q", a.raw)
				}
				lease := a.str("lease", "leaseId")
				w := post("wlock", `"owner":"http-1"`).ok(t, "wlock")
				if w.str("lease", "leaseId") != lease || w.get("lease", "holdCount") != 2.0 {
					t.Fatalf("wlock by the same owner did not re-enter: %s", w.raw)
				}
				busy := post("acquire", `"owner":"http-2","waitTimeout":"0s"`).ok(t, "acquire by another owner")
				if busy.get("acquired") != false || busy.str("retryAfter") == "" || busy.get("lease") != nil {
					t.Fatalf("a held key was granted again: %s", busy.raw)
				}
				r := post("renew", `"leaseId":"`+lease+`","ttl":"60s"`).ok(t, "renew")
				if r.str("lease", "ttl") != "60s" || r.str("lease", "key") != key {
					t.Fatalf("renew: %s", r.raw)
				}
				for want := 1.0; want >= 0; want-- {
					rel := post("release", `"leaseId":"`+lease+`"`).ok(t, "release")
					if rel.get("holdCount") != want {
						t.Fatalf("release: holdCount %v, want %v: %s", rel.get("holdCount"), want, rel.raw)
					}
				}
				gone := post("release", `"leaseId":"`+lease+`"`)
				if code, _ := gone.grpcStatus(); gone.status != http.StatusNotFound || code != int(codes.NotFound) {
					t.Fatalf("release of a released lease: %d %s", gone.status, gone.raw)
				}
				for _, owner := range []string{"reader-1", "reader-2"} {
					rl := post("rlock", `"owner":"`+owner+`"`).ok(t, "rlock")
					if rl.get("acquired") != true || rl.str("lease", "mode") != "LOCK_MODE_READ" || rl.str("lease", "key") != key {
						t.Fatalf("rlock by %s: %s", owner, rl.raw)
					}
				}
			})
		}
	}

	t.Run("a key ending in a slash, in the body", func(t *testing.T) {
		t.Parallel()
		a := s.call(t, http.MethodPost, "/v1/locks:acquire", "", `{"key":"trailing/"}`).ok(t, "acquire")
		if a.str("lease", "key") != "trailing/" {
			t.Fatalf("acquire: %s", a.raw)
		}
	})
	t.Run("the path's key wins over the body's", func(t *testing.T) {
		t.Parallel()
		a := s.call(t, http.MethodPost, "/v1/locks/from-path:acquire", "", `{"key":"from-body"}`).ok(t, "acquire")
		if a.str("lease", "key") != "from-path" {
			t.Fatalf("acquire: %s", a.raw)
		}
	})
	t.Run("no body at all", func(t *testing.T) {
		t.Parallel()
		a := s.call(t, http.MethodPost, "/v1/locks/no-body:acquire", "", "").ok(t, "acquire")
		if a.get("acquired") != true || a.str("lease", "ttl") != "30s" {
			t.Fatalf("acquire: %s", a.raw)
		}
	})
	t.Run("a gRPC caller sees the lease taken over HTTP", func(t *testing.T) {
		t.Parallel()
		a := s.call(t, http.MethodPost, "/v1/locks/shared/with/grpc:acquire", "", `{"ttl":"30s"}`).ok(t, "acquire")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := lockdv1.NewLockServiceClient(s.conn).Release(ctx, &lockdv1.ReleaseRequest{Key: "shared/with/grpc", LeaseId: a.str("lease", "leaseId")})
		if err != nil || res.GetHoldCount() != 0 {
			t.Fatalf("gRPC Release of the HTTP lease: %v %v", res, err)
		}
	})
}

// TestTokenEndpoints reads the app's token over HTTP and reports it
// rejected: the gateway answers what TokenService does.
func TestTokenEndpoints(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	got := s.call(t, http.MethodGet, "/v1/apps/mp/access_token", "", "").ok(t, "get access token")
	tok := got.str("accessToken")
	if !s.fake.Valid(tok) || got.str("expireTime") == "" {
		t.Fatalf("get access token: %s", got.raw)
	}
	again := s.call(t, http.MethodGet, "/v1/apps/mp/access_token", "", "").ok(t, "get access token again")
	if again.str("accessToken") != tok {
		t.Fatalf("the cached token was not served: %s then %s", got.raw, again.raw)
	}

	s.fake.RevokeTokens("wx-gw")
	ref := s.call(t, http.MethodPost, "/v1/apps/mp/access_token:refresh", "", `{"invalidToken":`+jsonString(tok)+`}`).ok(t, "refresh")
	fresh := ref.str("accessToken")
	if fresh == tok || !s.fake.Valid(fresh) {
		t.Fatalf("refresh of a revoked token: %s", ref.raw)
	}
	after := s.call(t, http.MethodGet, "/v1/apps/mp/access_token", "", "").ok(t, "get after refresh")
	if after.str("accessToken") != fresh {
		t.Fatalf("get after refresh: %s, want %s", after.raw, fresh)
	}

	ticket := s.call(t, http.MethodGet, "/v1/apps/mp/tickets/TICKET_TYPE_JSAPI", "", "").ok(t, "get ticket")
	if !s.fake.TicketValid(ticket.str("ticket")) || ticket.str("expireTime") == "" {
		t.Fatalf("get ticket: %s", ticket.raw)
	}
	if bad := s.call(t, http.MethodGet, "/v1/apps/mp/tickets/TICKET_TYPE_AGENT_CONFIG", "", ""); bad.status != http.StatusBadRequest {
		t.Fatalf("a WeCom ticket of a WeChat app: HTTP %d %s", bad.status, bad.raw)
	}

	// A watch answers newline-delimited JSON: the current token, then
	// each new one.
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	res, err := s.send(wctx, http.MethodGet, "/v1/apps/mp/access_token:watch", "", "")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("watch: %v %v", res, err)
	}
	defer res.Body.Close()
	watched := lines(t, res.Body)
	if m := next(t, watched); fmt.Sprint(m["result"].(map[string]any)["accessToken"]) != fresh {
		t.Fatalf("watch's first line %v, want the current token", m)
	}
	s.fake.RevokeTokens("wx-gw")
	s.call(t, http.MethodPost, "/v1/apps/mp/access_token:refresh", "", `{"invalidToken":`+jsonString(fresh)+`}`).ok(t, "refresh")
	if m := next(t, watched); fmt.Sprint(m["result"].(map[string]any)["accessToken"]) == fresh {
		t.Fatalf("watch's second line %v, want the new token", m)
	}

	unknown := s.call(t, http.MethodGet, "/v1/apps/nope/access_token", "", "")
	if code, msg := unknown.grpcStatus(); unknown.status != http.StatusNotFound || code != int(codes.NotFound) || !strings.Contains(msg, "nope") {
		t.Fatalf("an unknown app: HTTP %d %s", unknown.status, unknown.raw)
	}
	if !strings.Contains(unknown.raw, `"reason":"UNKNOWN_APP"`) {
		t.Errorf("an unknown app's answer lacks its ErrorInfo detail: %s", unknown.raw)
	}
}

// TestErrorStatuses checks the HTTP status and JSON body of each gRPC code
// lockd answers, with auth on.
func TestErrorStatuses(t *testing.T) {
	t.Parallel()
	bounds := service.DefaultBounds()
	bounds.MaxKeepAlives = 1
	s := startStack(t, stackOptions{auth: true, bounds: bounds})

	// The one KeepAlive stream this replica allows, held open.
	held := s.call(t, http.MethodPost, "/v1/locks/orders/kept:acquire", ordersToken, `{"ttl":"60s"}`).ok(t, "acquire")
	kctx, stopKeepAlive := context.WithCancel(context.Background())
	defer stopKeepAlive()
	stream, err := s.send(kctx, http.MethodPost, "/v1/locks/orders/kept:keepalive", ordersToken, `{"leaseId":"`+held.str("lease", "leaseId")+`"}`)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("keepalive: %v %v", stream, err)
	}
	defer stream.Body.Close()
	next(t, lines(t, stream.Body))

	// A read hold, so that its owner's write request is an upgrade.
	s.call(t, http.MethodPost, "/v1/locks/orders/read:rlock", ordersToken, `{"owner":"reader"}`).ok(t, "rlock")

	cases := []struct {
		name                string
		method, path, token string
		body                string
		status              int
		code                codes.Code
		message             string // part of the message
	}{
		{"a ttl out of range", "POST", "/v1/locks/orders/1:acquire", ordersToken, `{"ttl":"0.001s"}`, 400, codes.InvalidArgument, "ttl"},
		{"a key too long", "POST", "/v1/locks:acquire", opsToken, `{"key":"` + strings.Repeat("k", 513) + `"}`, 400, codes.InvalidArgument, "key"},
		{"an empty key", "POST", "/v1/locks:acquire", opsToken, `{}`, 400, codes.InvalidArgument, "key"},
		{"a key of invalid UTF-8", "POST", "/v1/locks/orders/%FF:acquire", ordersToken, "", 400, codes.InvalidArgument, "key must be valid UTF-8"},
		{"a key with a control character", "POST", "/v1/locks/orders/%07:acquire", ordersToken, "", 400, codes.InvalidArgument, "control"},
		{"malformed JSON", "POST", "/v1/locks/orders/1:acquire", ordersToken, `{"ttl":`, 400, codes.InvalidArgument, ""},
		{"an unknown field", "POST", "/v1/locks/orders/1:acquire", ordersToken, `{"request_idd":"x"}`, 400, codes.InvalidArgument, "request_idd"},
		{"a lease that is not held", "POST", "/v1/locks/orders/1:release", ordersToken, `{"leaseId":"no-such-lease"}`, 404, codes.NotFound, "not held"},
		{"renewal of a lease that is not held", "POST", "/v1/locks/orders/1:renew", ordersToken, `{"leaseId":"no-such-lease"}`, 404, codes.NotFound, "not held"},
		{"an app the client may not read", "GET", "/v1/apps/nope/access_token", ordersToken, "", 403, codes.PermissionDenied, "nope"},
		{"an unknown URL", "GET", "/v1/nothing/here", ordersToken, "", 404, codes.NotFound, ""},
		{"a read holder asking to write", "POST", "/v1/locks/orders/read:wlock", ordersToken, `{"owner":"reader"}`, 400, codes.FailedPrecondition, "upgrade"},
		{"no bearer token", "POST", "/v1/locks/orders/1:acquire", "", "", 401, codes.Unauthenticated, "authorization"},
		{"an unknown bearer token", "POST", "/v1/locks/orders/1:acquire", "not-a-token-lockd-knows", "", 401, codes.Unauthenticated, "unknown bearer token"},
		{"no bearer token for a token", "GET", "/v1/apps/mp/access_token", "", "", 401, codes.Unauthenticated, ""},
		{"no bearer token for KeepAlive", "POST", "/v1/locks/orders/kept:keepalive", "", `{"leaseId":"x"}`, 401, codes.Unauthenticated, ""},
		{"a key outside the client's prefixes", "POST", "/v1/locks/billing/1:acquire", ordersToken, "", 403, codes.PermissionDenied, "billing/1"},
		{"KeepAlive outside the client's prefixes", "POST", "/v1/locks/billing/1:keepalive", ordersToken, `{"leaseId":"x"}`, 403, codes.PermissionDenied, ""},
		{"an app outside the client's apps", "GET", "/v1/apps/mp/access_token", opsToken, "", 403, codes.PermissionDenied, "mp"},
		{"a second KeepAlive past the limit", "POST", "/v1/locks/orders/kept:keepalive", ordersToken, `{"leaseId":"` + held.str("lease", "leaseId") + `"}`, 429, codes.ResourceExhausted, "KeepAlive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.call(t, tc.method, tc.path, tc.token, tc.body)
			code, msg := r.grpcStatus()
			if r.status != tc.status || code != int(tc.code) || msg == "" || !strings.Contains(msg, tc.message) {
				t.Fatalf("HTTP %d %s, want %d with code %d (%v) and a message holding %q", r.status, r.raw, tc.status, tc.code, tc.code, tc.message)
			}
			if tc.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") != `Bearer realm="lockd"` {
				t.Errorf("401 without a Bearer challenge: %v", r.header)
			}
		})
	}

	t.Run("the right bearer token gets in", func(t *testing.T) {
		s.call(t, http.MethodGet, "/v1/apps/mp/access_token", ordersToken, "").ok(t, "get access token")
		s.call(t, http.MethodPost, "/v1/locks/billing/1:acquire", opsToken, "").ok(t, "acquire by ops")
	})

	// Last: Redis gone makes lock calls UNAVAILABLE.
	t.Run("Redis unreachable", func(t *testing.T) {
		s.redis.Stop()
		r := s.call(t, http.MethodPost, "/v1/locks/orders/after-redis:acquire", ordersToken, "")
		if code, msg := r.grpcStatus(); r.status != http.StatusServiceUnavailable || code != int(codes.Unavailable) || msg == "" {
			t.Fatalf("HTTP %d %s, want 503 UNAVAILABLE", r.status, r.raw)
		}
	})
}

// TestKeepAliveStream keeps a lease alive over HTTP: newline-delimited
// JSON, a line per renewal; the stream ends with a NOT_FOUND line when the
// lease is lost; with releaseOnClose, closing the request releases it.
func TestKeepAliveStream(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	locks := lockdv1.NewLockServiceClient(s.conn)

	t.Run("renewals stream until the lease is lost", func(t *testing.T) {
		const key = "ka/streamed 🔒"
		a := s.call(t, http.MethodPost, "/v1/locks/"+pathOf(key)+":acquire", "", `{"ttl":"30s"}`).ok(t, "acquire")
		lease := a.str("lease", "leaseId")
		res, err := s.send(ctx, http.MethodPost, "/v1/locks:keepalive", "", `{"key":`+jsonString(key)+`,"leaseId":"`+lease+`","ttl":"3s"}`)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("keepalive: %v %v", res, err)
		}
		defer res.Body.Close()
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		ch := lines(t, res.Body)
		for range 3 {
			m := next(t, ch)
			l, _ := m["result"].(map[string]any)["lease"].(map[string]any)
			if l["leaseId"] != lease || l["key"] != key || l["ttl"] != "3s" {
				t.Fatalf("keepalive line: %v", m)
			}
		}
		// Lost: released behind the stream's back.
		if _, err := locks.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: lease}); err != nil {
			t.Fatal(err)
		}
		for {
			m := next(t, ch)
			if m["result"] != nil {
				continue // a renewal sent before the release
			}
			e, _ := m["error"].(map[string]any)
			if e["code"] != float64(codes.NotFound) {
				t.Fatalf("stream's last line: %v, want an error with code NOT_FOUND", m)
			}
			break
		}
		if m, more := <-ch; more {
			t.Fatalf("a line after the error: %v", m)
		}
	})

	t.Run("a duration in another form than protobuf JSON's", func(t *testing.T) {
		r := s.call(t, http.MethodPost, "/v1/locks/ka/none:acquire", "", `{"ttl":"1m"}`)
		if code, msg := r.grpcStatus(); r.status != http.StatusBadRequest || code != int(codes.InvalidArgument) || !strings.Contains(msg, "Duration") {
			t.Fatalf("HTTP %d %s, want 400 INVALID_ARGUMENT", r.status, r.raw)
		}
	})

	t.Run("a lease that is not held", func(t *testing.T) {
		r := s.call(t, http.MethodPost, "/v1/locks/ka/none:keepalive", "", `{"leaseId":"no-such-lease"}`)
		if code, _ := r.grpcStatus(); r.status != http.StatusNotFound || code != int(codes.NotFound) {
			t.Fatalf("HTTP %d %s, want 404 NOT_FOUND", r.status, r.raw)
		}
	})

	t.Run("closing the request releases the lease", func(t *testing.T) {
		const key = "ka/closed"
		a := s.call(t, http.MethodPost, "/v1/locks/"+key+":acquire", "", `{"ttl":"60s"}`).ok(t, "acquire")
		lease := a.str("lease", "leaseId")
		sctx, stop := context.WithCancel(ctx)
		res, err := s.send(sctx, http.MethodPost, "/v1/locks/"+key+":keepalive", "", `{"leaseId":"`+lease+`","releaseOnClose":true}`)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("keepalive: %v %v", res, err)
		}
		next(t, lines(t, res.Body))
		stop()
		res.Body.Close()
		// The lease had a minute left: only the release frees the key now.
		eventually(t, "the lease is released", func() bool {
			_, err := locks.Renew(ctx, &lockdv1.RenewRequest{Key: key, LeaseId: lease})
			return status.Code(err) == codes.NotFound
		})
		b := s.call(t, http.MethodPost, "/v1/locks/"+key+":acquire", "", `{"owner":"next"}`).ok(t, "acquire after close")
		if b.get("acquired") != true {
			t.Fatalf("the key is still held: %s", b.raw)
		}
	})
}

// TestDisconnectEndsWait: a client that goes away while its Acquire waits
// ends the call, and leaves nothing queued behind: readers, which a waiting
// writer keeps out, get in again, and the writer is never granted.
func TestDisconnectEndsWait(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	locks := lockdv1.NewLockServiceClient(s.conn)
	const key = "wait/for {it}"
	reader, err := locks.RLock(ctx, &lockdv1.RLockRequest{Key: key, Owner: "reader", Ttl: durationOf(time.Hour)})
	if err != nil || !reader.GetAcquired() {
		t.Fatalf("rlock: %v %v", reader, err)
	}

	wctx, leave := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		res, err := s.send(wctx, http.MethodPost, "/v1/locks/"+pathOf(key)+":acquire", "", `{"owner":"writer","waitTimeout":"3600s"}`)
		if err == nil {
			res.Body.Close()
			err = fmt.Errorf("the waiting acquire answered HTTP %d", res.StatusCode)
		}
		waited <- err
	}()

	// tryRead takes and gives back a read hold, reporting whether it got in.
	tryRead := func(owner string) bool {
		r, err := locks.RLock(ctx, &lockdv1.RLockRequest{Key: key, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetAcquired() {
			if _, err := locks.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: r.GetLease().GetLeaseId()}); err != nil {
				t.Fatal(err)
			}
		}
		return r.GetAcquired()
	}
	eventually(t, "the writer waits (and keeps new readers out)", func() bool { return !tryRead("probe") })

	leave()
	if err := <-waited; err == nil || ctx.Err() != nil {
		t.Fatalf("the request did not end with the client: %v", err)
	}
	eventually(t, "readers get in again", func() bool { return tryRead("after") })

	// The writer's call is gone: once the reader leaves, another owner's
	// write request is granted at once.
	if _, err := locks.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: reader.GetLease().GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	w, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: "someone-else"})
	if err != nil || !w.GetAcquired() {
		t.Fatalf("acquire after the writer left: %v %v", w, err)
	}
}

// TestRequestLimits: bodies and headers are bounded.
func TestRequestLimits(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	big := `{"owner":"` + strings.Repeat("o", 100<<10) + `"}`
	r := s.call(t, http.MethodPost, "/v1/locks/big:acquire", "", big)
	if code, _ := r.grpcStatus(); r.status != http.StatusRequestEntityTooLarge || code != int(codes.ResourceExhausted) {
		t.Fatalf("a 100 KiB body: HTTP %d %s", r.status, r.raw)
	}

	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/locks/big:acquire", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("p", 64<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 64 KiB header: HTTP %d", res.StatusCode)
	}

	// A request within bounds still works afterwards.
	s.call(t, http.MethodPost, "/v1/locks/big:acquire", "", `{"owner":"small"}`).ok(t, "acquire")
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// TestShutdownEndsHTTPCalls: on shutdown, HTTP callers hear what gRPC
// callers do: a waiting acquire and a KeepAlive stream end with UNAVAILABLE
// (resume on another replica; the lease stays held), and lockd stops.
func TestShutdownEndsHTTPCalls(t *testing.T) {
	t.Parallel()
	bounds := service.DefaultBounds()
	bounds.MaxWaiters = 1
	s := startStack(t, stackOptions{bounds: bounds})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := s.call(t, http.MethodPost, "/v1/locks/down/held:acquire", "", `{"ttl":"60s"}`).ok(t, "acquire")
	stream, err := s.send(ctx, http.MethodPost, "/v1/locks/down/held:keepalive", "", `{"leaseId":"`+a.str("lease", "leaseId")+`"}`)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("keepalive: %v %v", stream, err)
	}
	defer stream.Body.Close()
	renewals := lines(t, stream.Body)
	next(t, renewals)

	waited := make(chan reply, 1)
	wait := func() {
		res, err := s.send(ctx, http.MethodPost, "/v1/locks/down/held:acquire", "", `{"owner":"waiter","waitTimeout":"3600s"}`)
		if err != nil {
			waited <- reply{raw: err.Error()}
			return
		}
		defer res.Body.Close()
		r := reply{status: res.StatusCode}
		b, _ := io.ReadAll(res.Body)
		r.raw = string(b)
		_ = json.Unmarshal(b, &r.body)
		waited <- r
	}
	go wait()
	// The waiter is in once a probe finds the one waiting place taken
	// (probes run one at a time, so it is not another probe's). Should a
	// probe have taken the place first, the waiter was refused: again.
	eventually(t, "the acquire waits", func() bool {
		select {
		case r := <-waited:
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("the waiting acquire ended early: HTTP %d %s", r.status, r.raw)
			}
			go wait()
		default:
		}
		probe := s.call(t, http.MethodPost, "/v1/locks/down/other:acquire", "", `{"waitTimeout":"0.01s"}`)
		return probe.status == http.StatusTooManyRequests
	})

	if err := s.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	w := <-waited
	if code, _ := w.grpcStatus(); w.status != http.StatusServiceUnavailable || code != int(codes.Unavailable) {
		t.Errorf("the waiting acquire: HTTP %d %s, want 503 UNAVAILABLE", w.status, w.raw)
	}
	for m := range renewals {
		if m["result"] != nil {
			continue
		}
		if e, _ := m["error"].(map[string]any); e["code"] != float64(codes.Unavailable) {
			t.Errorf("the KeepAlive stream ended with %v, want UNAVAILABLE", m)
		}
		return
	}
	t.Error("the KeepAlive stream ended without an error line")
}
