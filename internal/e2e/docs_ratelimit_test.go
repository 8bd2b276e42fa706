package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runDocScript runs script with bash, PATH starting with bin (when given),
// and returns its output.
func runDocScript(t *testing.T, name, script, bin string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = os.Environ()
	if bin != "" {
		cmd.Env = append(cmd.Env, "PATH="+bin+":"+os.Getenv("PATH"))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docs/ratelimits.md %s failed: %v\n%s", name, err, out)
	}
	return string(out)
}

// TestDocsRateLimitFleet runs the fleet example of docs/ratelimits.md as
// written, with a lockd on PATH that talks to the test's lockd: every
// call is made (each host waiting its turn), five that cannot wait exit
// 75, and another rate for the same API is refused.
func TestDocsRateLimitFleet(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	bin := filepath.Join(t.TempDir(), "bin")
	wrapper := "#!/bin/sh\nsub=$1; shift\nexec " + lockdBinary(t) + " \"$sub\" --addr=" + p.addr + " \"$@\"\n"
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "lockd"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	text := runDocScript(t, "ratelimit-fleet", docBlock(t, "ratelimit-fleet", "sh"), bin)
	if n := strings.Count(text, " sent batch "); n != 9 {
		t.Errorf("%d calls made, want all 9:\n%s", n, text)
	}
	for _, want := range []string{"not now (exit 75)", "20 per 1m0s, burst 5", "refused (exit 1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

// TestDocsRateLimitGRPC runs the grpcurl and curl examples of
// docs/ratelimits.md, as written but for the addresses.
func TestDocsRateLimitGRPC(t *testing.T) {
	t.Parallel()
	gateway := freeAddr(t)
	p := startLockd(t, nil, "--gateway-listen="+gateway)
	text := runDocScript(t, "ratelimit-grpcurl", strings.ReplaceAll(docBlock(t, "ratelimit-grpcurl", "sh"), "127.0.0.1:50051", p.addr), "")
	if n := strings.Count(text, `"allowed": true`); n != 4 {
		t.Errorf("%d takes allowed, want 2 of the first 3, and both pings:\n%s", n, text)
	}
	if !regexp.MustCompile(`(?s)"allowed": false,\s*"remaining": 0,\s*"retryAfter": "[1-9][0-9.]*s"`).MatchString(text) {
		t.Errorf("the third take was not refused with a retryAfter:\n%s", text)
	}
	text = runDocScript(t, "ratelimit-curl", strings.ReplaceAll(docBlock(t, "ratelimit-curl", "sh"), "127.0.0.1:8080", gateway), "")
	if !strings.Contains(text, `"allowed":true`) || !strings.Contains(text, `"remaining":95`) {
		t.Errorf("curl example: %s", text)
	}
}
