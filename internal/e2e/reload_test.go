package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestSIGHUPReloadsTheConfig rotates a client's token, grants it an app
// that was not configured before and then feeds lockd a broken file, each
// followed by SIGHUP: lockd keeps running throughout, the new token and app
// work and the old token stops working, and the broken file is refused
// with a clear log line while the running configuration stays in force.
func TestSIGHUPReloadsTheConfig(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	srv := redistest.Start(t)
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const oldToken, newToken = "orders-old-token-0123456789", "orders-new-token-9876543210"
	appsAnd := func(apps, clientApps string) string {
		return fmt.Sprintf(`apps:
  - {name: classic, provider: wechat, appid: wx-classic, secret_env: CLASSIC_SECRET, api_base: %[1]q}
%[2]sauth:
  clients:
    - {name: orders, token_file: orders.token, locks: ["orders/"], apps: [%[3]s]}
`, fake.URL(), apps, clientApps)
	}
	write("orders.token", oldToken+"\n")
	write("stable.secret", stableSecret+"\n")
	write("lockd.yaml", appsAnd("", "classic"))
	proc := startLockd(t, []string{"CLASSIC_SECRET=" + classicSecret}, "--redis="+srv.Addr(), "--config="+filepath.Join(dir, "lockd.yaml"))

	conn := proc.dial(t)
	locks, tokens := lockdv1.NewLockServiceClient(conn), lockdv1.NewTokenServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lock := func(token string) error {
		c := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		_, err := locks.Acquire(c, &lockdv1.AcquireRequest{Key: "orders/1"})
		return err
	}
	stableToken := func(token string) error {
		c := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		_, err := tokens.GetAccessToken(c, &lockdv1.GetAccessTokenRequest{App: "stable"})
		return err
	}
	hup := func() {
		t.Helper()
		if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if err := lock(oldToken); err != nil {
		t.Fatalf("the old token before the reload: %v", err)
	}
	if err := stableToken(oldToken); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an app not granted yet: %v, want PERMISSION_DENIED", err)
	}

	// Rotate the token and add an app, whose secret is read at reload.
	write("orders.token", newToken+"\n")
	write("lockd.yaml", appsAnd("  - {name: stable, provider: wechat, appid: wx-stable, token_api: stable, secret_file: stable.secret, api_base: \""+fake.URL()+"\"}\n", "classic, stable"))
	hup()
	waitUntil(t, proc, "the new token to work", func() bool { return lock(newToken) == nil })
	if err := lock(oldToken); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the old token after the reload: %v, want UNAUTHENTICATED", err)
	}
	if err := stableToken(newToken); err != nil {
		t.Fatalf("the app added by the reload: %v", err)
	}

	// A broken file changes nothing.
	write("lockd.yaml", "apps: [\n")
	hup()
	waitUntil(t, proc, "the broken file to be refused", func() bool {
		return strings.Contains(proc.logs.String(), "configuration reload refused")
	})
	if err := lock(newToken); err != nil {
		t.Fatalf("the running configuration after a refused reload: %v", err)
	}
	if err := stableToken(newToken); err != nil {
		t.Fatalf("the app after a refused reload: %v", err)
	}
	if !strings.Contains(proc.logs.String(), "not YAML") {
		t.Errorf("the refusal does not say what is wrong:\n%s", proc.logs)
	}
	for _, secret := range []string{oldToken, newToken, stableSecret, classicSecret} {
		if strings.Contains(proc.logs.String(), secret) {
			t.Errorf("a secret reached the logs")
		}
	}
	if err := proc.terminate(t); err != nil {
		t.Fatalf("lockd exited with %v after the reloads", err)
	}
}

// waitUntil polls cond until it holds, failing if lockd exits meanwhile.
func waitUntil(t *testing.T, p *process, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("lockd exited while waiting for %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
