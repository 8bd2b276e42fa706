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

// TestReadmeAdminExamples runs the AdminService grpcurl examples of
// README.md, as written but for the address, against a lockd with the
// README's auth section (orders, and ops with admin: true) and the fake
// WeChat app of the README's recipe.
func TestReadmeAdminExamples(t *testing.T) {
	t.Parallel()
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	t.Cleanup(fake.Close)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	auth := regexp.MustCompile("(?s)```yaml\n(auth:\n  clients:\n    - \\{name: orders.*?)```").FindSubmatch(readme)
	if auth == nil {
		t.Fatal("README.md's Admin section has no auth example")
	}
	cfg := filepath.Join(t.TempDir(), "lockd.yaml")
	app := fmt.Sprintf("apps:\n  - {name: mp, provider: wechat, appid: wx1234, secret_env: MP_SECRET, api_base: %q}\n", fake.URL())
	if err := os.WriteFile(cfg, append([]byte(app), auth[1]...), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"MP_SECRET=app-secret", "ORDERS_TOKEN=orders-readme-token-0123", "ADMIN_TOKEN=ops-readme-token-456789"}
	p := startLockd(t, env, "--config="+cfg)

	script := strings.ReplaceAll(readmeBlock(t, "grpcurl-admin-examples", "sh"), "127.0.0.1:50051", p.addr)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README admin examples failed: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		`"acquired": true`, `"key": "orders/42"`, `"kind": "LOCK_KIND_LOCK"`, `"owner": "worker-1"`, `"client": "orders"`,
		"Code: PermissionDenied", "refused", `"released": [`, `"app": "mp"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README admin examples' output lacks %s:\n%s", want, text)
		}
	}
	if n := strings.Count(text, `"leaseId"`); n != 1 {
		t.Errorf("%d lease ids shown, want only Acquire's:\n%s", n, text)
	}
}
