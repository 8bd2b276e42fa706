package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestReadmeExamples runs the grpcurl examples of README.md, as written but
// for the address, against a lockd on its embedded store.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	text := runReadmeBlock(t, "grpcurl-examples", "127.0.0.1:50051", p.addr)
	for _, want := range []string{
		`"acquired": true`, `"acquired": false`, `"retryAfter"`, `"ttl": "60s"`,
		`"holdCount": 0`, `"mode": "LOCK_MODE_READ"`, `"status": "SERVING"`, "lockd.v1.LockService",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README examples' output lacks %s:\n%s", want, text)
		}
	}
	if n := strings.Count(text, `"mode": "LOCK_MODE_READ"`); n != 2 {
		t.Errorf("%d read leases granted, want 2 sharing the key:\n%s", n, text)
	}
	// The election: elected, read, proclaimed, observed, resigned.
	for _, want := range []string{
		`"holder": "billing-1"`, `"owner": "host-a"`, `"term": "`, `"value": "10.0.0.5:9090"`, `"hasLeader": true`,
		"lockd.v1.ElectionService", "lockd.v1.SemaphoreService", "Code: NotFound",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README examples' output lacks %s:\n%s", want, text)
		}
	}
	// The semaphore: two permits, a third refused, one released.
	if n := strings.Count(text, `"mode": "LOCK_MODE_PERMIT"`); n != 2 {
		t.Errorf("%d permits granted, want 2:\n%s", n, text)
	}
	if !regexp.MustCompile(`(?s)"acquired": false,.*"available": 0.*"holdCount": 0`).MatchString(text) {
		t.Errorf("the third permit was not refused, or the first not released:\n%s", text)
	}
}

// runReadmeBlock runs the sh block of README.md that follows the comment
// <!-- name ... -->, with addr in place of readmeAddr and a temporary
// directory in place of /tmp/, and returns its output.
func runReadmeBlock(t *testing.T, name, readmeAddr, addr string) string {
	t.Helper()
	script := strings.ReplaceAll(readmeBlock(t, name, "sh"), readmeAddr, addr)
	script = strings.ReplaceAll(script, "/tmp/", t.TempDir()+"/")
	out, err := exec.Command("bash", "-euo", "pipefail", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("README %s failed: %v\n%s", name, err, out)
	}
	return string(out)
}

// readmeApp serves the fake WeChat app of the README's recipe and writes a
// config file for it; lockd reads its secret from MP_SECRET=app-secret.
func readmeApp(t *testing.T) (*wechatfake.Server, string) {
	t.Helper()
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	t.Cleanup(fake.Close)
	cfg := filepath.Join(t.TempDir(), "lockd.yaml")
	app := fmt.Sprintf("apps:\n  - {name: mp, provider: wechat, appid: wx1234, secret_env: MP_SECRET, api_base: %q}\n", fake.URL())
	if err := os.WriteFile(cfg, []byte(app), 0o600); err != nil {
		t.Fatal(err)
	}
	return fake, cfg
}

// TestReadmeTokenExamples runs the token grpcurl examples of README.md, as
// written but for the address, against a lockd serving the fake WeChat app
// of the README's recipe.
func TestReadmeTokenExamples(t *testing.T) {
	t.Parallel()
	fake, cfg := readmeApp(t)
	p := startLockd(t, []string{"MP_SECRET=app-secret"}, "--config="+cfg)
	text := runReadmeBlock(t, "grpcurl-token-examples", "127.0.0.1:50051", p.addr)
	tokens := regexp.MustCompile(`"accessToken": "([^"]+)"`).FindAllStringSubmatch(text, -1)
	if len(tokens) != 3 || tokens[1][1] != tokens[0][1] || tokens[2][1] != tokens[0][1] || !fake.Valid(tokens[0][1]) {
		t.Errorf("access tokens %v, want the valid one three times (get, report, watch):\n%s", tokens, text)
	}
	if !strings.Contains(text, `"ticket": "fake.ticket.jsapi.`) {
		t.Errorf("README token examples' output lacks the ticket:\n%s", text)
	}
}

// TestReadmeHTTPExamples runs the curl examples of README.md, as written
// but for the address, against a lockd serving its HTTP/JSON gateway, with
// the fake WeChat app of the README's recipe.
func TestReadmeHTTPExamples(t *testing.T) {
	t.Parallel()
	fake, cfg := readmeApp(t)
	gateway := freeAddr(t)
	startLockd(t, []string{"MP_SECRET=app-secret"}, "--config="+cfg, "--gateway-listen="+gateway)
	text := runReadmeBlock(t, "curl-examples", "127.0.0.1:8080", gateway)
	for _, want := range []string{
		`"acquired":true`, `"acquired":false`, `"retryAfter":"`, `"ttl":"60s"`, `"holdCount":0`,
		`"code":5`, "HTTP 404", `"accessToken":"`, `"ticket":"fake.ticket.jsapi.`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README curl examples' output lacks %s:\n%s", want, text)
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

// readmeBlock returns the code block (in lang) that follows the README's
// <!-- marker ... --> comment.
func readmeBlock(t *testing.T, marker, lang string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + "[^>]*-->\\s*```" + lang + "\\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatalf("README.md has no %s block", marker)
	}
	return string(block[1])
}
