package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/config"
)

// TestParseWarnsAboutSecretFilesOthersMayRead: a token_file or
// secret_file that group or others may read is a warning naming the field
// and the mode (the path only where it may be shown); one readable by
// lockd's user alone is not.
func TestParseWarnsAboutSecretFilesOthersMayRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("secret-value-of-"+name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("orders.token", 0o644)
	write("ops.token", 0o600)
	write("mp.secret", 0o640)
	write("wx.secret", 0o400)
	file := `apps:
  - {name: mp, provider: wechat, appid: wx1, secret_file: mp.secret}
  - {name: wx, provider: wechat, appid: wx2, secret_file: wx.secret}
auth:
  clients:
    - {name: orders, token_file: orders.token, locks: ["orders/"], apps: [mp]}
    - {name: ops, token_file: ops.token, locks: ["ops/"]}
`
	path := filepath.Join(dir, "lockd.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	warned := strings.Join(c.Warnings, "\n")
	for _, want := range []string{"token_file: " + filepath.Join(dir, "orders.token") + " can be read by group or others (mode 0644)",
		"secret_file: " + filepath.Join(dir, "mp.secret") + " can be read by group or others (mode 0640)"} {
		if !strings.Contains(warned, want) {
			t.Errorf("the warnings lack %q:\n%s", want, warned)
		}
	}
	for _, quiet := range []string{"ops.token", "wx.secret"} {
		if strings.Contains(warned, quiet) {
			t.Errorf("a warning about %s, readable by lockd's user alone:\n%s", quiet, warned)
		}
	}
}
