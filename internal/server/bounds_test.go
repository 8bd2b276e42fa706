package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestRedisNearMaxmemoryIsWarnedOf: with Redis's maxmemory just above
// what it uses, lockd warns and exports Redis's memory, so that operators
// act before Redis refuses every team's grants.
func TestRedisNearMaxmemoryIsWarnedOf(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(infoValue(info, "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Used at some 89%: beyond the warning mark, with room for lockd's
	// own connections.
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+used/8, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	r := start(t, Config{Redis: srv.Addr(), RedisMemoryInterval: 50 * time.Millisecond})
	waitFor(t, "the warning", func() bool { return strings.Contains(r.logs.String(), "Redis is near its maxmemory") })
	metrics := httpBody(t, "http://"+r.addrs.HTTP+"/metrics")
	for _, name := range []string{"lockd_redis_used_memory_bytes ", "lockd_redis_maxmemory_bytes "} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestAuditLogCannotFillTheDisk: a client taking many locks with long
// keys rotates the audit log file at its size, and only the newest
// rotated files are kept: the log takes a bounded amount of disk.
func TestAuditLogCannotFillTheDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	r := start(t, Config{Redis: redistest.Start(t).Addr(), AuditLog: path, AuditFiles: AuditFiles{MaxSizeMiB: 1, MaxBackups: 2}})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Each take and release writes two records of some 1.1 KiB: 4 MiB
	// of audit records in all, four times the file's size.
	pad := strings.Repeat("k", 500)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := range 120 {
				key := fmt.Sprintf("%s/%d/%d", pad, w, i)
				res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: pad[:200]})
				if err == nil {
					_, err = lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, "the rotated files trimmed to two", func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) == 3
	})
	entries, _ := os.ReadDir(dir)
	var total int64
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	if total > 3<<20 {
		t.Errorf("the audit log takes %d bytes in %d files, want at most 3 MiB", total, len(entries))
	}
}

// TestAFullListenerRefusesAndSaysSo: with every connection place taken, a
// call on a new connection is refused UNAVAILABLE at once (it does not
// wait in the accept queue), and lockd counts and logs it.
func TestAFullListenerRefusesAndSaysSo(t *testing.T) {
	t.Parallel()
	tr := DefaultTransport()
	tr.MaxConnections = 1
	r := start(t, Config{Redis: redistest.Start(t).Addr(), Transport: tr})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := lockdv1.NewLockServiceClient(r.conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: "first"}); err != nil {
		t.Fatal(err)
	}
	other, err := grpc.NewClient(r.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = lockdv1.NewLockServiceClient(other).Acquire(ctx, &lockdv1.AcquireRequest{Key: "second"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a call on a second connection: %v, want UNAVAILABLE", err)
	}
	if m, want := httpBody(t, "http://"+r.addrs.HTTP+"/metrics"), `lockd_connections_refused_total{listener="grpc",reason="full"`; !strings.Contains(m, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(r.logs.String(), `"grpc_full":1`) })
}
