//go:build unix

package redistest

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestSentinelFailoverKeepsTheFailoverClientWorking(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t)
	c := st.FailoverClient(t)
	ctx := context.Background()

	old := st.MasterAddr()
	if old != st.Nodes()[0].Addr() {
		t.Fatalf("MasterAddr() = %s, want the first node %s", old, st.Nodes()[0].Addr())
	}
	if len(st.SentinelAddrs()) != 3 || st.MasterName() == "" {
		t.Fatalf("SentinelAddrs() = %v, MasterName() = %q", st.SentinelAddrs(), st.MasterName())
	}
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET before failover: %v", err)
	}
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the write on the replica", n, err)
	}

	start := time.Now()
	st.Failover(t)
	t.Logf("failover took %v", time.Since(start))

	next := st.MasterAddr()
	if next == old {
		t.Fatalf("MasterAddr() = %s after Failover, want a new master", next)
	}
	if m := st.Master(); m == nil || m.Addr() != next {
		t.Fatalf("Master() = %v, want the server at %s", m, next)
	}

	// The client follows the new master; a command or two may fail while
	// it notices.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Set(ctx, "after", "2", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET after failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := c.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("GET before = %q, %v; want the replicated value", got, err)
	}
	port, err := c.ConfigGet(ctx, "port").Result()
	if err != nil {
		t.Fatalf("CONFIG GET port: %v", err)
	}
	if got := net.JoinHostPort("127.0.0.1", port["port"]); got != next {
		t.Errorf("client talks to %s, want the new master %s", got, next)
	}

	// The old master was demoted and follows the new one.
	oldClient := st.Nodes()[0].Client(t)
	if err := oldClient.Set(ctx, "x", "y", 0).Err(); err == nil {
		t.Errorf("old master %s still accepts writes", old)
	}
	waitFor(t, 30*time.Second, "old master in sync with the new one", func(ctx context.Context) error {
		return replicaInSync(ctx, next, old)
	})

	// Failover is repeatable: back to the first master.
	st.Failover(t)
	if got := st.MasterAddr(); got != old {
		t.Fatalf("MasterAddr() after the second Failover = %s, want %s", got, old)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		got, err := c.Get(ctx, "after").Result()
		if err == nil && got == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET after the second failover = %q, %v; want 2", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
