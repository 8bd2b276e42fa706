package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// fencedResource is what a leader writes to: it rejects a write carrying a
// lower term than one it has seen, as resources protected by fencing tokens
// must.
type fencedResource struct {
	mu      sync.Mutex
	highest uint64
}

func (r *fencedResource) write(term uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if term < r.highest {
		return false
	}
	r.highest = term
	return true
}

// campaignMsgs reads a Campaign stream in the background: each message
// with the time it arrived, then the stream's end.
type campaignMsgs struct {
	msgs chan *lockdv1.CampaignResponse
	end  chan error
	at   chan time.Time // when the stream ended
}

func campaignOn(ctx context.Context, t *testing.T, ec lockdv1.ElectionServiceClient, req *lockdv1.CampaignRequest) *campaignMsgs {
	t.Helper()
	st, err := ec.Campaign(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c := &campaignMsgs{msgs: make(chan *lockdv1.CampaignResponse, 1000), end: make(chan error, 1), at: make(chan time.Time, 1)}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				c.at <- time.Now()
				c.end <- err
				return
			}
			c.msgs <- m
		}
	}()
	return c
}

func (c *campaignMsgs) next(t *testing.T, what string) (*lockdv1.CampaignResponse, time.Time) {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m, time.Now()
	case err := <-c.end:
		t.Fatalf("waiting for %s: the stream ended: %v", what, err)
	case <-time.After(time.Minute):
		t.Fatalf("waiting for %s: nothing came", what)
	}
	return nil, time.Time{}
}

// TestFrozenRedisDeposesTheLeaderFirst freezes the Redis master of an
// election (SIGSTOP) past its leader's ttl, with a second candidate
// campaigning on another lockd process, on a single Redis, a Cluster, and a
// Sentinel deployment (where the freeze also fails the master over): the
// leader's Campaign stream ends with NOT_FOUND before the candidate is
// elected, the new term is higher, and a resource fenced by terms rejects
// the deposed leader's writes.
func TestFrozenRedisDeposesTheLeaderFirst(t *testing.T) {
	t.Parallel()
	const name = "fault/leader"
	for _, tc := range []struct {
		topology string
		start    func(t *testing.T) (args []string, master func(t *testing.T) *redistest.Server)
	}{
		{"redis", func(t *testing.T) ([]string, func(*testing.T) *redistest.Server) {
			srv := redistest.Start(t)
			return []string{"--redis=" + srv.Addr()}, func(*testing.T) *redistest.Server { return srv }
		}},
		{"cluster", func(t *testing.T) ([]string, func(*testing.T) *redistest.Server) {
			cl := redistest.StartCluster(t, 3)
			return []string{"--redis=" + strings.Join(cl.Addrs(), ",")}, func(t *testing.T) *redistest.Server {
				node, err := cl.ClusterClient(t).MasterForKey(context.Background(), "lockd:{"+name+"}")
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range cl.Nodes() {
					if n.Addr() == node.Options().Addr {
						return n
					}
				}
				t.Fatal("the election's master is not a node of the cluster")
				return nil
			}
		}},
		{"sentinel", func(t *testing.T) ([]string, func(*testing.T) *redistest.Server) {
			st := redistest.StartSentinel(t)
			return []string{"--redis=" + strings.Join(st.SentinelAddrs(), ","), "--redis-master=" + st.MasterName(), "--data-loss-grace=2s"},
				func(*testing.T) *redistest.Server { return st.Master() }
		}},
	} {
		t.Run(tc.topology, func(t *testing.T) {
			t.Parallel()
			args, master := tc.start(t)
			one := lockdv1.NewElectionServiceClient(startLockd(t, nil, args...).dial(t))
			two := lockdv1.NewElectionServiceClient(startLockd(t, nil, args...).dial(t))
			frozenLeader(t, name, one, two, master(t))
		})
	}
}

// frozenLeader elects a through one, has b campaign through two, freezes
// srv (the election's master) until a's lease has run out, and checks the
// order of events.
func frozenLeader(t *testing.T, name string, one, two lockdv1.ElectionServiceClient, srv *redistest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	var resource fencedResource

	a := campaignOn(ctx, t, one, &lockdv1.CampaignRequest{Name: name, Value: "a", Owner: "a", Ttl: durationpb.New(ttl)})
	first, _ := a.next(t, "a's election")
	termA := first.GetLeader().GetTerm()
	if !resource.write(termA) {
		t.Fatal("the first leader's write was rejected")
	}
	b := campaignOn(ctx, t, two, &lockdv1.CampaignRequest{Name: name, Value: "b", Owner: "b", Ttl: durationpb.New(ttl)})
	last, _ := a.next(t, "a's first renewal")

	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	// a's stream ends while Redis is frozen: its lease can no longer be
	// renewed. Renewals may still arrive first.
	var aEnded time.Time
	for aEnded.IsZero() {
		select {
		case m := <-a.msgs:
			last = m
		case err := <-a.end:
			aEnded = <-a.at
			if status.Code(err) != codes.NotFound {
				t.Fatalf("a's stream ended with %v, want NOT_FOUND", err)
			}
		case <-ctx.Done():
			t.Fatal("a's stream did not end while Redis was frozen")
		}
	}
	// Keep Redis frozen until a's lease has run out by its own clock.
	time.Sleep(time.Until(last.GetLeader().GetExpireTime().AsTime()) + 100*time.Millisecond)
	srv.Thaw()
	thawed = true

	elected, bElected := b.next(t, "b's election")
	termB := elected.GetLeader().GetTerm()
	t.Logf("a's stream ended at %v, b was elected at %v", aEnded.Format(time.StampMicro), bElected.Format(time.StampMicro))
	if !aEnded.Before(bElected) {
		t.Fatalf("b was elected at %v, before a's stream ended at %v", bElected, aEnded)
	}
	if termB <= termA {
		t.Fatalf("b's term %d is not above a's %d", termB, termA)
	}
	if !resource.write(termB) {
		t.Fatal("the new leader's write was rejected")
	}
	if resource.write(termA) {
		t.Fatal("the deposed leader's write was accepted after the new leader's")
	}
	var ld *lockdv1.LeaderResponse
	var err error
	for {
		// Right after a failover, lockd may still be finding the new master.
		ld, err = one.Leader(ctx, &lockdv1.LeaderRequest{Name: name})
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || ld.GetLeader().GetOwner() != "b" || ld.GetLeader().GetTerm() != termB {
		t.Fatalf("Leader after the outage = %v, %v", ld, err)
	}
}

// TestOneLeaderAcrossProcesses has candidates on two lockd processes
// sharing one Redis campaign, lead a moment and close their streams, over
// and over, counting leaders at once; an observer on each process sees
// only rising terms.
func TestOneLeaderAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var clients []lockdv1.ElectionServiceClient
	for range 2 {
		clients = append(clients, lockdv1.NewElectionServiceClient(startLockd(t, nil, "--redis="+srv.Addr()).dial(t)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	observed := make(chan error, len(clients))
	for _, ec := range clients {
		st, err := ec.Observe(octx, &lockdv1.ObserveRequest{Name: "procs/leader"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			var last uint64
			for {
				m, err := st.Recv()
				if err != nil {
					observed <- nil
					return
				}
				if m.GetHasLeader() {
					if m.GetLeader().GetTerm() < last {
						observed <- fmt.Errorf("observer saw term %d after %d", m.GetLeader().GetTerm(), last)
						return
					}
					last = m.GetLeader().GetTerm()
				}
			}
		}()
	}

	const (
		candidates = 12
		terms      = 5
	)
	var (
		mu       sync.Mutex
		leading  int
		overlaps int
		elected  int
		wg       sync.WaitGroup
	)
	for i := range candidates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ec := clients[i%len(clients)]
			for range terms {
				cctx, closeStream := context.WithCancel(ctx)
				st, err := ec.Campaign(cctx, &lockdv1.CampaignRequest{Name: "procs/leader", Owner: fmt.Sprint("c", i)})
				if err == nil {
					_, err = st.Recv()
				}
				if err != nil {
					closeStream()
					t.Errorf("candidate %d: %v", i, err)
					return
				}
				mu.Lock()
				leading++
				elected++
				if leading > 1 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				leading--
				mu.Unlock()
				closeStream() // resigns
			}
		}()
	}
	wg.Wait()
	stopObserving()
	for range clients {
		if err := <-observed; err != nil {
			t.Error(err)
		}
	}
	if overlaps != 0 || elected != candidates*terms {
		t.Fatalf("%d overlapping leaders in %d elections (want %d elections)", overlaps, elected, candidates*terms)
	}
}
