package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestReadmeAdminExamples runs the AdminService grpcurl examples of
// docs/admin.md, as written but for the address, against a lockd with the
// page's auth section (orders, and ops with admin: true) added to the
// configuration of the fake WeChat recipe in docs/tokens.md.
func TestReadmeAdminExamples(t *testing.T) {
	t.Parallel()
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	t.Cleanup(fake.Close)
	auth := docBlock(t, "admin-auth-config", "yaml")
	if !strings.HasPrefix(auth, "auth:\n") {
		t.Fatalf("the admin page's configuration is not an auth section:\n%s", auth)
	}
	cfg := filepath.Join(t.TempDir(), "lockd.yaml")
	if err := os.WriteFile(cfg, []byte(fakeWeChatConfig(t, fake.URL())+auth), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"MP_SECRET=app-secret", "ORDERS_TOKEN=orders-readme-token-0123", "ADMIN_TOKEN=ops-readme-token-456789"}
	p := startLockd(t, env, "--config="+cfg)

	script := strings.ReplaceAll(docBlock(t, "grpcurl-admin-examples", "sh"), "127.0.0.1:50051", p.addr)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the admin examples failed: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		`"acquired": true`, `"key": "orders/42"`, `"kind": "LOCK_KIND_LOCK"`, `"owner": "worker-1"`, `"client": "orders"`,
		"Code: PermissionDenied", "refused", `"released": [`, `"app": "mp"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the admin examples' output lacks %s:\n%s", want, text)
		}
	}
	if n := strings.Count(text, `"leaseId"`); n != 1 {
		t.Errorf("%d lease ids shown, want only Acquire's:\n%s", n, text)
	}
}
