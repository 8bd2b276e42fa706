package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// request sends method path with body and the given headers ("Host" sets
// the request's Host) and decodes the JSON answer.
func (s *stack) request(t *testing.T, method, path string, header map[string]string, body string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: %d answer is not a JSON object: %v\n%s", method, path, res.StatusCode, err, raw)
	}
	return r
}

// TestCrossSiteBrowserRequestsAreRefused: a web page on another site can
// make a browser send a "simple" POST (text/plain or form-encoded, no
// preflight) to a gateway on loopback. Without authentication that would
// take or release locks for the page; the gateway refuses every request a
// browser marks as coming from another origin, and serves curl, programs
// and same-origin pages as before.
func TestCrossSiteBrowserRequestsAreRefused(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	host := strings.TrimPrefix(s.base, "http://")
	const path = "/v1/locks/csrf/victim:acquire"
	body := `{"owner":"evil","ttl":"3600s"}`

	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"a cross-site form post (Fetch Metadata)", map[string]string{
			"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example",
			"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}},
		{"a cross-site fetch with text/plain (Fetch Metadata)", map[string]string{
			"Content-Type": "text/plain", "Origin": "https://evil.example",
			"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}},
		{"a page on another port of this host", map[string]string{
			"Content-Type": "text/plain", "Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}},
		{"an older browser: Origin of another site only", map[string]string{
			"Content-Type": "text/plain", "Origin": "https://evil.example"}},
		{"a sandboxed page: Origin null", map[string]string{
			"Content-Type": "text/plain", "Origin": "null"}},
	} {
		r := s.request(t, "POST", path, tc.header, body)
		if r.status != http.StatusForbidden {
			t.Errorf("%s: HTTP %d, want 403: %s", tc.name, r.status, r.raw)
		}
		if code, msg := r.grpcStatus(); code != 7 || !strings.Contains(msg, "cross-origin") {
			t.Errorf("%s: status %d %q, want PERMISSION_DENIED (7) saying why", tc.name, code, msg)
		}
	}

	// Reads too: an image or script tag of another site GETs an access
	// token or a lock's state, and its timing or errors tell something.
	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"a cross-site GET (Fetch Metadata)", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}},
		{"a GET from another port of this host", map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"an older browser's cross-origin GET: Origin only", map[string]string{"Origin": "https://evil.example"}},
	} {
		r := s.request(t, "GET", "/v1/apps/mp/access_token", tc.header, "")
		if r.status != http.StatusForbidden {
			t.Errorf("%s: HTTP %d, want 403: %s", tc.name, r.status, r.raw)
		}
	}
	// A link followed or an address typed into the browser is no
	// cross-origin request (Sec-Fetch-Site: none).
	if r := s.request(t, "GET", "/v1/locks/csrf/victim:describe-none", map[string]string{"Sec-Fetch-Site": "none"}, ""); r.status == http.StatusForbidden {
		t.Errorf("a GET the user asked for: HTTP 403: %s", r.raw)
	}

	// The key was never taken: curl takes it now, and a page of the
	// gateway's own origin may call it too.
	s.request(t, "POST", path, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, `{"owner":"curl"}`).ok(t, "curl's acquire")
	r := s.request(t, "POST", path, map[string]string{"Content-Type": "application/json"}, `{"owner":"other"}`).ok(t, "a second acquire")
	if r.get("acquired") != false {
		t.Fatalf("a second owner got the key: %s", r.raw)
	}
	s.request(t, "POST", "/v1/locks/csrf/own:acquire", map[string]string{
		"Content-Type": "application/json", "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}, `{}`).ok(t, "a same-origin page's acquire")
}

// TestDNSRebindingIsRefusedWithoutAuth: a page whose host name an attacker
// points at 127.0.0.1 (DNS rebinding) is "same-origin" to the browser, so
// it could read access tokens and take locks from a gateway without
// authentication. Such a gateway answers only requests addressed to an IP
// address, localhost, its own listen host or a name listed in
// GatewayHosts; with authentication on, any host name works.
func TestDNSRebindingIsRefusedWithoutAuth(t *testing.T) {
	t.Parallel()
	open := startStack(t, stackOptions{hosts: []string{"lockd.internal"}})
	_, port, err := net.SplitHostPort(strings.TrimPrefix(open.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	const path = "/v1/locks/rebind/x:acquire"
	for _, host := range []string{"rebind.evil.example:" + port, "rebind.evil.example", "lockd.internal.evil.example:" + port} {
		r := open.request(t, "POST", path, map[string]string{"Host": host, "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}, `{}`)
		if r.status != http.StatusForbidden || !strings.Contains(r.raw, "host") {
			t.Errorf("Host %s: HTTP %d, want 403 naming the host rule: %s", host, r.status, r.raw)
		}
		r = open.request(t, "GET", "/v1/apps/mp/access_token", map[string]string{"Host": host}, "")
		if r.status != http.StatusForbidden {
			t.Errorf("GET the token with Host %s: HTTP %d, want 403: %s", host, r.status, r.raw)
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "[::1]:" + port, "localhost:" + port, "app.localhost:" + port, "LOCKD.internal:" + port, "lockd.internal"} {
		open.request(t, "POST", path, map[string]string{"Host": host}, `{"owner":"`+host+`"}`).ok(t, "Host "+host)
	}

	authed := startStack(t, stackOptions{auth: true})
	r := authed.request(t, "POST", path, map[string]string{"Host": "lockd.example.com"}, `{}`)
	if r.status != http.StatusUnauthorized {
		t.Errorf("with auth on, any host reaches authentication: HTTP %d, want 401: %s", r.status, r.raw)
	}
	authed.request(t, "POST", "/v1/locks/orders/rebind:acquire", map[string]string{"Host": "lockd.example.com", "Authorization": "Bearer " + ordersToken}, `{}`).ok(t, "with auth on and a token")
}

// TestUnauthenticatedBodiesAreNotRead: with auth on, a request without a
// known bearer token is refused (401) at once, without the gateway
// waiting for, or buffering, its body: as over gRPC, a caller without a
// token costs next to nothing.
func TestUnauthenticatedBodiesAreNotRead(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{auth: true})
	for _, auth := range []string{"", "Authorization: Bearer not-anyones-token-000\r\n"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The header promises a body that never comes.
		if _, err := io.WriteString(c, "POST /v1/locks/orders/1:acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+"Content-Length: 60000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: no answer while the body was pending: %v", auth, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%q: HTTP %d, want 401 with a challenge", auth, res.StatusCode)
		}
	}
	// A known token's request is read and served as before.
	s.call(t, "POST", "/v1/locks/orders/1:acquire", ordersToken, `{}`).ok(t, "an authenticated acquire")
}
