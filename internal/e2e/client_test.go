package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/leasetest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func newGoClient(t *testing.T, addrs ...string) *client.Client {
	t.Helper()
	c, err := client.New(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestGoClientLeaseSurvivesAKilledReplica kills (SIGKILL) the lockd process
// a Go client keeps its lease alive through: the lease resumes KeepAlive
// on the other process and stays held.
func TestGoClientLeaseSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := startLockd(t, nil, "--redis="+srv.Addr())
	b := startLockd(t, nil, "--redis="+srv.Addr())
	c := newGoClient(t, a.addr, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	l, err := c.Acquire(ctx, "e2e/client/kill", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	leasetest.Renewals(ctx, t, l, 1)
	if m := get(t, "http://"+a.http+"/metrics"); !strings.Contains(m, "lockd_keepalive_streams 1") {
		t.Fatalf("the lease is not kept alive through the first replica:\n%s", m)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	leasetest.Renewals(ctx, t, l, 4) // two ttls through b
	res, err := lockdv1.NewLockServiceClient(b.dial(t)).Acquire(ctx, &lockdv1.AcquireRequest{Key: "e2e/client/kill"})
	if err != nil || res.GetAcquired() {
		t.Fatalf("key taken while the lease moved: %v, %v", res, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after the replica was killed: %v", err)
	}
}

// TestGoClientLostBeforeAnotherOwnerIsGranted freezes Redis (SIGSTOP) past
// the ttl of a lease a Go client holds, then thaws it: the client's Lost
// closes before a second owner's successful Acquire is even sent.
func TestGoClientLostBeforeAnotherOwnerIsGranted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startLockd(t, nil, "--redis="+srv.Addr())
	holder, other := newGoClient(t, p.addr), newGoClient(t, p.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = time.Second
	l, err := holder.Acquire(ctx, "e2e/client/frozen", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		<-l.Lost()
		lostAt <- time.Now()
	}()

	srv.Freeze()
	time.Sleep(3 * ttl) // Redis's clock runs on: the lease expires there
	srv.Thaw()

	var grantSent time.Time
	for {
		sent := time.Now()
		l2, err := other.Acquire(ctx, "e2e/client/frozen", client.WithWait(0))
		if err == nil {
			grantSent = sent
			defer l2.Release(ctx)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the second owner never got the key: %v", err)
		}
	}
	select {
	case lost := <-lostAt:
		if !lost.Before(grantSent) {
			t.Fatalf("Lost closed at %v, after the second owner asked at %v", lost, grantSent)
		}
	default:
		t.Fatalf("Lost still open after another owner was granted the key (%v)", grantSent)
	}
	if !errors.Is(l.Err(), client.ErrLost) {
		t.Fatalf("Err = %v", l.Err())
	}
}

// TestCommandsOverTLSWithAuth runs lockd token and lockd lock against a
// lockd with mTLS and bearer-token auth.
func TestCommandsOverTLSWithAuth(t *testing.T) {
	t.Parallel()
	pk := newPKI(t)
	serverCert, serverKey, _ := pk.issue(t, "lockd", true, false)
	clientCert, clientKey, _ := pk.issue(t, "jobs-client", false, false)
	fake := newFake(t, wechatfake.Options{})
	dir := t.TempDir()
	const jobsToken = "jobs-bearer-0123456789"
	cfg := "apps:\n  - {name: mp, provider: wechat, appid: wx-classic, secret_env: CLASSIC_SECRET, api_base: \"" + fake.URL() + "\"}\n" +
		"auth:\n  clients:\n    - {name: jobs, token_env: JOBS_TOKEN, locks: [\"jobs/\"], apps: [\"mp\"]}\n"
	cfgPath, tokenPath := filepath.Join(dir, "lockd.yaml"), filepath.Join(dir, "token")
	for path, body := range map[string]string{cfgPath: cfg, tokenPath: jobsToken + "\n"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := startLockd(t, []string{"CLASSIC_SECRET=" + classicSecret, "JOBS_TOKEN=" + jobsToken},
		"--config="+cfgPath, "--tls-cert="+serverCert, "--tls-key="+serverKey, "--tls-client-ca="+filepath.Join(pk.dir, "ca.pem"))
	tlsFlags := []string{"--addr=" + p.addr, "--tls-ca=" + filepath.Join(pk.dir, "ca.pem"), "--tls-cert=" + clientCert, "--tls-key=" + clientKey}

	tok := startCLI(t, dir, nil, append(append([]string{"token"}, tlsFlags...), "--token-file="+tokenPath, "mp")...)
	tok.wantExit(t, 0)
	if out := strings.TrimSpace(tok.out.String()); out == "" || strings.ContainsAny(out, " \n") {
		t.Fatalf("lockd token printed %q", out)
	}
	noAuth := startCLI(t, dir, nil, append(append([]string{"token"}, tlsFlags...), "mp")...)
	noAuth.wantExit(t, 1)
	if !strings.Contains(noAuth.out.String(), "Unauthenticated") {
		t.Fatalf("lockd token without a bearer token:\n%s", noAuth.out)
	}
	startCLI(t, dir, nil, append(append([]string{"token"}, tlsFlags...), "--token-file="+tokenPath, "no-such-app")...).wantExit(t, 1)

	// lockd lock takes its token from LOCKD_TOKEN, and may lock only the
	// client's keys.
	env := []string{"LOCKD_TOKEN=" + jobsToken}
	startCLI(t, dir, env, append(append([]string{"lock"}, tlsFlags...), "jobs/nightly", "--", "true")...).wantExit(t, 0)
	denied := startCLI(t, dir, env, append(append([]string{"lock"}, tlsFlags...), "billing/1", "--", "true")...)
	denied.wantExit(t, 69)
	if !strings.Contains(denied.out.String(), "PermissionDenied") {
		t.Fatalf("lockd lock outside the client's prefixes:\n%s", denied.out)
	}
}
