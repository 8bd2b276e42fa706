package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestReloadReopensTheAuditLog: logrotate renames the audit log and sends
// SIGHUP; lockd goes on writing to a new file at the configured path (even
// without --config), and the renamed file keeps what came before.
func TestReloadReopensTheAuditLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	reload := make(chan struct{})
	r := start(t, Config{Redis: redistest.Start(t).Addr(), AuditLog: path, Reload: reload})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(p string) string {
		data, _ := os.ReadFile(p)
		return string(data)
	}
	take := func(key string) {
		t.Helper()
		if res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key}); err != nil || !res.GetAcquired() {
			t.Fatal(res, err)
		}
	}

	take("before-rotation")
	waitFor(t, "the first take audited", func() bool { return strings.Contains(read(path), `"key":"before-rotation"`) })
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	waitFor(t, "a new audit log at the configured path", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	take("after-rotation")
	waitFor(t, "the second take audited in the new file", func() bool { return strings.Contains(read(path), `"key":"after-rotation"`) })
	if old := read(rotated); !strings.Contains(old, `"key":"before-rotation"`) || strings.Contains(old, "after-rotation") {
		t.Fatalf("the rotated file holds:\n%s", old)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the new audit log: %v, %v (want mode 0600)", info, err)
	}
}
