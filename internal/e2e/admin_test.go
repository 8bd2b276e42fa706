package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/faults"
	"github.com/lockd/lockd/internal/redistest"
)

// TestAdminOnEveryTopology runs AdminService through a lockd process on a
// redis-server, the embedded store, a 3-master Cluster and Sentinel: keys
// spread over every master are all listed, page by page; a lock, an
// election and a semaphore are described with their kind; ForceRelease of a
// KeepAlive holder ends its stream with NOT_FOUND and lets a waiter in.
func TestAdminOnEveryTopology(t *testing.T) {
	t.Parallel()
	topologies := map[string]func(t *testing.T) []string{
		"redis":    func(t *testing.T) []string { return []string{"--redis=" + redistest.Start(t).Addr()} },
		"embedded": func(t *testing.T) []string { return nil },
		"cluster": func(t *testing.T) []string {
			return []string{"--redis=" + strings.Join(redistest.StartCluster(t, 3).Addrs(), ",")}
		},
		"sentinel": func(t *testing.T) []string {
			st := redistest.StartSentinel(t)
			return []string{"--redis=" + strings.Join(st.SentinelAddrs(), ","), "--redis-master=" + st.MasterName()}
		},
	}
	for name, args := range topologies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn := startLockd(t, nil, args(t)...).dial(t)
			adminOnTopology(t, lockdv1.NewLockServiceClient(conn), lockdv1.NewElectionServiceClient(conn),
				lockdv1.NewSemaphoreServiceClient(conn), lockdv1.NewAdminServiceClient(conn))
		})
	}
}

func adminOnTopology(t *testing.T, lc lockdv1.LockServiceClient, ec lockdv1.ElectionServiceClient, sc lockdv1.SemaphoreServiceClient, ac lockdv1.AdminServiceClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 30
	for i := range n {
		if _, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: fmt.Sprintf("spread/%d", i), Owner: "o", Ttl: durationpb.New(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		page, err := ac.ListLocks(ctx, &lockdv1.ListLocksRequest{Prefix: "spread/", PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.GetLocks() {
			if seen[l.GetKey()] {
				t.Fatalf("%s listed twice", l.GetKey())
			}
			seen[l.GetKey()] = true
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
		if pages > 200 {
			t.Fatal("the listing does not end")
		}
	}
	if len(seen) != n {
		t.Fatalf("listed %d of %d keys", len(seen), n)
	}

	camp, err := ec.Campaign(ctx, &lockdv1.CampaignRequest{Name: "topo/leader", Owner: "node-a", Value: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := camp.Recv()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ac.DescribeLock(ctx, &lockdv1.DescribeLockRequest{Key: "topo/leader"})
	if e := d.GetLock().GetElection(); err != nil || d.GetLock().GetKind() != lockdv1.LockKind_LOCK_KIND_ELECTION || e.GetLeader() != "node-a" ||
		e.GetTerm() != first.GetLeader().GetTerm() || e.GetValue() != "10.0.0.1" {
		t.Fatalf("DescribeLock of an election = %v, %v", d, err)
	}
	if _, err := sc.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "topo/pool", Limit: 5}); err != nil {
		t.Fatal(err)
	}
	d, err = ac.DescribeLock(ctx, &lockdv1.DescribeLockRequest{Key: "topo/pool"})
	if s := d.GetLock().GetSemaphore(); err != nil || s.GetLimit() != 5 || s.GetPermitsInUse() != 1 {
		t.Fatalf("DescribeLock of a semaphore = %v, %v", d, err)
	}
	// Forcing the leader out ends its Campaign stream.
	if _, err := ac.ForceRelease(ctx, &lockdv1.ForceReleaseRequest{Key: "topo/leader"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := camp.Recv()
		if err != nil {
			if status.Code(err) != codes.NotFound {
				t.Fatalf("the evicted leader's Campaign ended with %v, want NOT_FOUND", err)
			}
			break
		}
	}

	held, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "topo/stuck", Owner: "stuck", Ttl: durationpb.New(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ka, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "topo/stuck", LeaseId: held.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.ForceRelease(ctx, &lockdv1.ForceReleaseRequest{Key: "topo/stuck", Owner: "stuck"}); err != nil {
		t.Fatal(err)
	}
	next, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "topo/stuck", Owner: "next", WaitTimeout: durationpb.New(30 * time.Second)})
	if err != nil || !next.GetAcquired() || next.GetLease().GetFencingToken() <= held.GetLease().GetFencingToken() {
		t.Fatalf("the next writer = %v, %v", next, err)
	}
	// A resource that checks fencing tokens: the evicted holder's writes
	// are refused once the next holder wrote.
	var res faults.Fenced
	if !res.Write("topo/stuck", "evicted", held.GetLease().GetFencingToken()) {
		t.Fatal("the first write was refused")
	}
	if !res.Write("topo/stuck", "next", next.GetLease().GetFencingToken()) {
		t.Fatal("the next holder's write was refused")
	}
	if res.Write("topo/stuck", "evicted", held.GetLease().GetFencingToken()) {
		t.Fatal("the evicted holder's write was accepted after the next holder's")
	}
	for {
		if _, err := ka.Recv(); err != nil {
			if status.Code(err) != codes.NotFound {
				t.Fatalf("the evicted KeepAlive ended with %v, want NOT_FOUND", err)
			}
			break
		}
	}
}

// TestInspect runs lockd inspect against a lockd: a held key in human form
// and as JSON, a free key, and a key the caller may not see.
func TestInspect(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "orders/42", Owner: "worker-1", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	r := startCLI(t, t.TempDir(), nil, "inspect", "--addr="+p.addr, "orders/42")
	r.wantExit(t, 0)
	out := r.out.String()
	for _, want := range []string{"key:      orders/42", "kind:     lock", "worker-1: write, hold_count 1, fencing_token " + fmt.Sprint(held.GetLease().GetFencingToken()), "expires in ", "waiting:  0 writer(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("lockd inspect printed %q, lacking %q", out, want)
		}
	}
	if strings.Contains(out, held.GetLease().GetLeaseId()) {
		t.Errorf("lockd inspect printed the lease id: %s", out)
	}
	r = startCLI(t, t.TempDir(), nil, "inspect", "--json", "--addr="+p.addr, "orders/42")
	r.wantExit(t, 0)
	var got struct {
		Key     string `json:"key"`
		Kind    string `json:"kind"`
		Holders []struct {
			Owner        string `json:"owner"`
			FencingToken string `json:"fencingToken"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(r.out.String()), &got); err != nil || got.Key != "orders/42" || got.Kind != "LOCK_KIND_LOCK" ||
		len(got.Holders) != 1 || got.Holders[0].Owner != "worker-1" || got.Holders[0].FencingToken != fmt.Sprint(held.GetLease().GetFencingToken()) {
		t.Errorf("lockd inspect --json printed %s (%v)", r.out, err)
	}
	r = startCLI(t, t.TempDir(), nil, "inspect", "--addr="+p.addr, "orders/43")
	r.wantExit(t, 0)
	if !strings.Contains(r.out.String(), "free (nobody holds it)") {
		t.Errorf("lockd inspect of a free key printed %s", r.out)
	}
	startCLI(t, t.TempDir(), nil, "inspect", "--addr="+p.addr).wantExit(t, 2)
	startCLI(t, t.TempDir(), nil, "inspect", "--addr="+p.addr, "").wantExit(t, 1)
}
