package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

const (
	workerToken = "faults-worker-token-0123456789"
	adminToken  = "faults-admin-token-0123456789"
)

// bearer sends a bearer token with every call, over plaintext loopback.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// authFleet is a fleet whose clients authenticate: workers may lock keys
// under prefix, and admin (admin: true) may ForceRelease.
type authFleet struct {
	*fleet
	admins []lockdv1.AdminServiceClient
}

// startAuthFleet starts n lockd processes with args and an auth section
// of two clients, workers (locks under prefix) and ops (admin: true).
func startAuthFleet(t *testing.T, n int, prefix string, args ...string) *authFleet {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "lockd.yaml")
	yaml := fmt.Sprintf("auth:\n  clients:\n    - {name: workers, token_env: WORKER_TOKEN, locks: [%q]}\n    - {name: ops, token_env: ADMIN_TOKEN, admin: true}\n", prefix)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--log-level=WARN", "--data-loss-grace=5s", "--config=" + cfg}, args...)
	env := []string{"WORKER_TOKEN=" + workerToken, "ADMIN_TOKEN=" + adminToken}
	f := &authFleet{fleet: &fleet{}}
	for range n {
		p := lockdtest.Start(t, lockdtest.Options{Race: lockdtest.Race, Args: args, Env: env})
		f.procs = append(f.procs, p)
		f.replicas = append(f.replicas, lockdv1.NewLockServiceClient(dialAs(t, p, workerToken)))
		f.admins = append(f.admins, lockdv1.NewAdminServiceClient(dialAs(t, p, adminToken)))
	}
	return f
}

// dialAs connects to p with token.
func dialAs(t *testing.T, p *lockdtest.Process, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestForceReleaseHolders has an admin force-release the keys of a lock
// workload (AdminService.ForceRelease, every holder of a key, one key
// every 200ms for 3 ttls, through either replica) while clients hold and
// wait. A force-release is judged like any other loss: every evicted
// holder reading its KeepAlive stream must be told (NOT_FOUND) before the
// key is granted to anyone else (the lead column measures by how much),
// and the fenced resource accepts no evicted holder's write after its
// successor's.
func TestForceReleaseHolders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startAuthFleet(t, 2, "force/", "--redis="+srv.Addr())
	w := defaultWorkload("force")
	forcedTotal := 0
	res := scenario{
		name: "admin force-releases", fault: fmt.Sprintf("AdminService.ForceRelease of every holder of a key, a key every 200ms for %v (ttl %v); each eviction judged like any loss", 3*w.TTL, w.TTL),
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			deadline := time.Now().Add(4 * w.TTL)
			for i := 0; time.Now().Before(deadline); i++ {
				n, err := run.ForceRelease(ctx, f.admins[i%len(f.admins)], w.Keys[i%len(w.Keys)])
				if err != nil {
					t.Errorf("ForceRelease: %v", err)
					return nil
				}
				forcedTotal += n
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		},
	}.run(t)
	expectClean(t, res)
	t.Logf("%d leases force-released, %d while their holder claimed them, %d followed by a grant while their holder listened", forcedTotal, res.ForcedLeases, res.ForcedHandovers)
	if res.ForcedHandovers == 0 {
		t.Errorf("no force-released holder was listening when its key was granted again: the scenario tests nothing")
	}
}

// staleWriterRun has a holder write to key's resources, an admin
// force-release its lease, a contender take the key at once and write,
// and then the evicted holder (not yet told, its expiry still ahead)
// write again, and then keep its lease alive: the stream must end with
// NOT_FOUND. With ignoreFencing the resource accepts every write.
func staleWriterRun(t *testing.T, name string, ignoreFencing bool) *Result {
	t.Helper()
	srv := redistest.Start(t)
	f := startAuthFleet(t, 2, "stale/", "--redis="+srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 10 * time.Second
	run := NewRun(Workload{}, f.replicas)
	run.Fenced.Ignore = ignoreFencing
	holder := run.NewClient(0, 0, "holder", f.replicas)
	contender := run.NewClient(1, 1, "contender", f.replicas)
	for round := range scaled(1, 3) {
		key := fmt.Sprintf("stale/%d", round)
		h, err := holder.Acquire(ctx, key, AcquireOptions{TTL: ttl})
		if err != nil || h == nil {
			t.Fatalf("holder: %v, %v", h, err)
		}
		h.Write(ctx, time.Millisecond, nil)
		if n, err := run.ForceRelease(ctx, f.admins[1], key); err != nil || n != 1 {
			t.Fatalf("ForceRelease: %d leases, %v", n, err)
		}
		c, err := contender.Acquire(ctx, key, AcquireOptions{TTL: ttl})
		if err != nil || c == nil {
			t.Fatalf("contender, right after the force-release: %v, %v", c, err)
		}
		c.Write(ctx, time.Millisecond, nil)
		if !h.Write(ctx, time.Millisecond, nil) {
			t.Fatal("the evicted holder, not yet told, did not write")
		}
		kctx, stop := context.WithTimeout(ctx, 30*time.Second)
		h.KeepAlive(kctx, KeepAliveOptions{})
		stop()
		select {
		case <-h.Lost():
		default:
			t.Errorf("the evicted holder's KeepAlive did not end with NOT_FOUND")
		}
		if _, err := c.Release(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	res := run.Check()
	writeHistory(t, run, len(res.Violations()) > 0)
	report.Add(name, "a lease force-released (AdminService.ForceRelease) under its holder, who writes once more after the next holder's write, then keeps it alive", res, ignoreFencing)
	return res
}

// TestForceReleaseStaleWriter: the evicted holder's write after its
// successor's is refused by the fenced resource, and its KeepAlive ends
// with NOT_FOUND; the checker, knowing of the force-release, finds nothing.
func TestForceReleaseStaleWriter(t *testing.T) {
	t.Parallel()
	res := staleWriterRun(t, "force-released holder writes late", false)
	expectClean(t, res)
	rounds := scaled(1, 3)
	if res.StaleWritesRejected != rounds || res.ForcedLeases != rounds || res.LossReports != rounds {
		t.Errorf("%d stale writes rejected, %d leases force-released, %d losses reported; want %d each",
			res.StaleWritesRejected, res.ForcedLeases, res.LossReports, rounds)
	}
}

// TestForceReleaseNegativeFencingIgnored is the same run against a
// resource that ignores fencing tokens: the evicted holder's write is
// accepted after its successor's, and the checker must say so.
func TestForceReleaseNegativeFencingIgnored(t *testing.T) {
	t.Parallel()
	res := staleWriterRun(t, "control: force-released holder writes late, fencing ignored", true)
	if len(res.OutOfOrder) == 0 {
		t.Errorf("the checker found no write accepted out of fencing order; violations: %q", res.Violations())
	}
}
