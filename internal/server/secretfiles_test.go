package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
)

// TestSecretFilesOthersMayReadAreWarnedOf: --redis-password-file and a
// client's token_file can be read by others; lockd warns of each at
// start-up and again on each reload, and no more once fixed.
func TestSecretFilesOthersMayReadAreWarnedOf(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const pw = "redis-file-password-4567"
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	password := write("redis.password", pw+"\n", 0o644)
	tokenFile := write("orders.token", ordersToken+"\n", 0o640)
	cfgPath := write("lockd.yaml", "auth:\n  clients:\n    - {name: orders, token_file: orders.token, locks: [\"orders/\"]}\n", 0o600)
	load := func() (*config.Config, error) { return config.Load(cfgPath, nil) }
	file, err := load()
	if err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{})
	r := start(t, Config{Redis: srv.Addr(), RedisPasswordFile: password, File: file, LoadConfig: load, Reload: reload})

	warnings := func(of string) int {
		n := 0
		for _, line := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, of) && strings.Contains(line, "can be read by group or others") {
				n++
			}
		}
		return n
	}
	if warnings("--redis-password-file") != 1 || warnings("orders.token") != 1 {
		t.Fatalf("at start-up: %d warnings of the password file, %d of the token file; want 1 each\n%s",
			warnings("--redis-password-file"), warnings("orders.token"), r.logs)
	}
	reload <- struct{}{}
	waitFor(t, "the warnings again after a reload", func() bool {
		return warnings("--redis-password-file") == 2 && warnings("orders.token") == 2
	})
	for _, p := range []string{password, tokenFile} {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reload <- struct{}{}
	waitFor(t, "the reload after the fix", func() bool { return strings.Count(r.logs.String(), "configuration reloaded") == 2 })
	if warnings("--redis-password-file") != 2 || warnings("orders.token") != 2 {
		t.Fatalf("warnings after the files were fixed:\n%s", r.logs)
	}
	if strings.Contains(r.logs.String(), pw) || strings.Contains(r.logs.String(), ordersToken) {
		t.Fatal("a secret reached the log")
	}
}

// TestATLSKeyOthersMayReadIsWarnedOf: the same check covers --tls-key.
func TestATLSKeyOthersMayReadIsWarnedOf(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "server.key")
	if err := os.WriteFile(key, []byte("not really a key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	secretFlagsOf(Config{TLS: TLSFiles{Cert: "c", Key: key}}).warn(slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "--tls-key: "+key+" can be read by group or others (mode 0644)") {
		t.Fatalf("no warning of the TLS key:\n%s", logs.String())
	}
}
