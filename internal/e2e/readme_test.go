package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeExamples runs the grpcurl examples of README.md, as written but
// for the address, against a lockd on its embedded store.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- grpcurl-examples[^>]*-->\\s*```sh\\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no grpcurl-examples block")
	}
	p := startLockd(t, nil)
	tmp := t.TempDir()
	script := strings.ReplaceAll(string(block[1]), "127.0.0.1:50051", p.addr)
	script = strings.ReplaceAll(script, "/tmp/", tmp+"/")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README examples failed: %v\n%s", err, out)
	}
	text := string(out)
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
}
