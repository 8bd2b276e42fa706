package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestReadmeTour runs the README's grpcurl tour, as written but for the
// address, against a lockd on its embedded store.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	text := runDocBlock(t, "grpcurl-tour", "127.0.0.1:50051", p.addr)
	if !regexp.MustCompile(`(?s)"acquired": true.*"acquired": false,.*"holder": "billing-1".*"holdCount": 0`).MatchString(text) {
		t.Errorf("the tour did not take orders/42, refuse billing-2 naming billing-1, and release it:\n%s", text)
	}
}

// TestDocsLockExamples runs the lock grpcurl examples of docs/locks.md, as
// written but for the address, against a lockd on its embedded store.
func TestDocsLockExamples(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	text := runDocBlock(t, "grpcurl-examples", "127.0.0.1:50051", p.addr)
	for _, want := range []string{
		`"acquired": true`, `"acquired": false`, `"retryAfter"`, `"holder": "billing-1"`, `"ttl": "60s"`,
		`"holdCount": 0`, `"mode": "LOCK_MODE_READ"`, `"status": "SERVING"`, "lockd.v1.LockService",
		"lockd.v1.ElectionService", "lockd.v1.SemaphoreService",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the lock examples' output lacks %s:\n%s", want, text)
		}
	}
	if n := strings.Count(text, `"mode": "LOCK_MODE_READ"`); n != 2 {
		t.Errorf("%d read leases granted, want 2 sharing the key:\n%s", n, text)
	}
}

// TestDocsElectionExamples runs the election grpcurl examples of
// docs/locks.md: elected, read, proclaimed, observed, resigned.
func TestDocsElectionExamples(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	text := runDocBlock(t, "grpcurl-election-examples", "127.0.0.1:50051", p.addr)
	for _, want := range []string{
		`"owner": "host-a"`, `"term": "`, `"value": "10.0.0.5:9090"`, `"hasLeader": true`, "Code: NotFound",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the election examples' output lacks %s:\n%s", want, text)
		}
	}
}

// TestDocsSemaphoreExamples runs the semaphore grpcurl examples of
// docs/locks.md: two permits, a third refused, one released.
func TestDocsSemaphoreExamples(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	text := runDocBlock(t, "grpcurl-semaphore-examples", "127.0.0.1:50051", p.addr)
	if n := strings.Count(text, `"mode": "LOCK_MODE_PERMIT"`); n != 2 {
		t.Errorf("%d permits granted, want 2:\n%s", n, text)
	}
	if !regexp.MustCompile(`(?s)"acquired": false,.*"available": 0.*"holdCount": 0`).MatchString(text) {
		t.Errorf("the third permit was not refused, or the first not released:\n%s", text)
	}
}

// runDocBlock runs the sh block named name (see docBlock), with addr in
// place of docAddr and a temporary directory in place of /tmp/, and
// returns its output.
func runDocBlock(t *testing.T, name, docAddr, addr string) string {
	t.Helper()
	script := strings.ReplaceAll(docBlock(t, name, "sh"), docAddr, addr)
	script = strings.ReplaceAll(script, "/tmp/", t.TempDir()+"/")
	out, err := exec.Command("bash", "-euo", "pipefail", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("the %s example failed: %v\n%s", name, err, out)
	}
	return string(out)
}

// fakeWeChatConfig is the configuration the fake WeChat recipe of
// docs/tokens.md writes, with the fake's address in place of the one
// cmd/wechat-fake serves on by default.
func fakeWeChatConfig(t *testing.T, fakeURL string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<<'YAML'\n(.*?)\nYAML\n`).FindStringSubmatch(docBlock(t, "fake-wechat-recipe", "sh"))
	if m == nil || !strings.Contains(m[1], "http://127.0.0.1:9480") {
		t.Fatal("the fake WeChat recipe writes no configuration for the fake on 127.0.0.1:9480")
	}
	return strings.ReplaceAll(m[1], "http://127.0.0.1:9480", fakeURL) + "\n"
}

// readmeApp serves the fake WeChat app of the recipe in docs/tokens.md
// (wx1234, secret app-secret) and writes the recipe's config file for it;
// lockd reads its secret from MP_SECRET=app-secret.
func readmeApp(t *testing.T) (*wechatfake.Server, string) {
	t.Helper()
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	t.Cleanup(fake.Close)
	cfg := filepath.Join(t.TempDir(), "lockd.yaml")
	if err := os.WriteFile(cfg, []byte(fakeWeChatConfig(t, fake.URL())), 0o600); err != nil {
		t.Fatal(err)
	}
	return fake, cfg
}

// TestReadmeTokenExamples runs the token grpcurl examples of
// docs/tokens.md, as written but for the address, against a lockd serving
// the fake WeChat app of its recipe.
func TestReadmeTokenExamples(t *testing.T) {
	t.Parallel()
	fake, cfg := readmeApp(t)
	p := startLockd(t, []string{"MP_SECRET=app-secret"}, "--config="+cfg)
	text := runDocBlock(t, "grpcurl-token-examples", "127.0.0.1:50051", p.addr)
	tokens := regexp.MustCompile(`"accessToken": "([^"]+)"`).FindAllStringSubmatch(text, -1)
	if len(tokens) != 3 || tokens[1][1] != tokens[0][1] || tokens[2][1] != tokens[0][1] || !fake.Valid(tokens[0][1]) {
		t.Errorf("access tokens %v, want the valid one three times (get, report, watch):\n%s", tokens, text)
	}
	if !strings.Contains(text, `"ticket": "fake.ticket.jsapi.`) {
		t.Errorf("the token examples' output lacks the ticket:\n%s", text)
	}
}

// TestReadmeHTTPExamples runs the curl examples of docs/http.md, as
// written but for the address, against a lockd serving its HTTP/JSON
// gateway, with the fake WeChat app of the recipe in docs/tokens.md.
func TestReadmeHTTPExamples(t *testing.T) {
	t.Parallel()
	fake, cfg := readmeApp(t)
	gateway := freeAddr(t)
	startLockd(t, []string{"MP_SECRET=app-secret"}, "--config="+cfg, "--gateway-listen="+gateway)
	text := runDocBlock(t, "curl-examples", "127.0.0.1:8080", gateway)
	for _, want := range []string{
		`"acquired":true`, `"acquired":false`, `"retryAfter":"`, `"ttl":"60s"`, `"holdCount":0`,
		`"code":5`, "HTTP 404", `"accessToken":"`, `"ticket":"fake.ticket.jsapi.`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the curl examples' output lacks %s:\n%s", want, text)
		}
	}
	if n := strings.Count(text, `"key":"reports/2024 Q1 {eu}","leaseId"`); n != 2 {
		t.Errorf("%d read leases on the escaped key, want 2:\n%s", n, text)
	}
	// jobs/nightly: held by job-1's Hold stream past its ttl (another owner
	// is refused and told the holder), renewed on the stream, and granted
	// to "other" once the stream closed.
	if !regexp.MustCompile(`(?s)"acquired":false,[^\n]*"holder":"job-1".*` +
		`"result":\{"acquired":true,"lease":\{"key":"jobs/nightly"[^}]*"owner":"job-1".*` +
		`"acquired":true,"lease":\{"key":"jobs/nightly"[^}]*"owner":"other"`).MatchString(text) {
		t.Errorf("jobs/nightly was not held past its ttl, then released on close:\n%s", text)
	}
	if n := strings.Count(text, `"result":{"acquired":true,"lease":{"key":"jobs/nightly"`); n < 3 {
		t.Errorf("%d messages on the Hold stream over 4s of a 3s lease, want the grant and 2 renewals or more:\n%s", n, text)
	}
	if tokens := regexp.MustCompile(`"accessToken":"([^"]+)"`).FindAllStringSubmatch(text, -1); len(tokens) != 2 || !fake.Valid(tokens[1][1]) {
		t.Errorf("access tokens %v, want two, the last valid:\n%s", tokens, text)
	}
}
