package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// dial returns a LockService client for addr, its connection closed when
// the test ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) lockdv1.LockServiceClient {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return lockdv1.NewLockServiceClient(conn)
}

// TestKeepAliveStreamCut cuts a holder's KeepAlive stream (with
// release_on_close) to replica A silently; the holder resumes KeepAlive on
// replica B, which the contract allows, and keeps working. When A finally
// notices its stale stream ended, it must not release the lease that B
// keeps alive: a contender waiting on the key gets it only once the holder
// lets go, and the holder is never told of a loss after another was
// granted the key.
func TestKeepAliveStreamCut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	proxy := NewProxy(t, "lockd-a", f.procs[0].Addr)
	viaProxy := dial(t, proxy.Addr())
	const ttl = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	run := NewRun(Workload{}, f.replicas)
	holder := run.NewClient(0, 1, "holder", f.replicas)
	contender := run.NewClient(1, 1, "contender", f.replicas)
	for round := range scaled(1, 5) {
		key := fmt.Sprintf("cut/%d", round)
		h, err := holder.Acquire(ctx, key, AcquireOptions{TTL: ttl})
		if err != nil || h == nil {
			t.Fatalf("holder: %v, %v", h, err)
		}
		// The first stream goes to A through the proxy, which then drops
		// everything: the holder's cancel never reaches A.
		s1, stop1 := context.WithCancel(ctx)
		kept1 := goKeep(h, s1, KeepAliveOptions{ReleaseOnClose: true, Via: viaProxy, NoResume: true})
		if !h.AwaitNews(ctx, time.Minute) {
			t.Fatal("no renewal on the first stream")
		}
		proxy.Blackhole(t)
		stop1()
		<-kept1
		// The holder resumes on B and keeps working.
		s2, stop2 := context.WithCancel(ctx)
		kept2 := goKeep(h, s2, KeepAliveOptions{ReleaseOnClose: true, Via: f.replicas[1], NoResume: true})
		if !h.AwaitNews(ctx, time.Minute) {
			t.Fatal("no renewal on the resumed stream")
		}
		got := make(chan *Held, 1)
		go func() {
			c, _ := contender.Acquire(ctx, key, AcquireOptions{TTL: ttl, Wait: time.Minute})
			got <- c
		}()
		// A's connection closes now; A ends the stale stream.
		proxy.Heal(t)
		for range 3 * int(ttl/(100*time.Millisecond)) {
			if !h.Write(ctx, 100*time.Millisecond, nil) {
				select {
				case <-h.Lost():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		run.History.Add(Event{Op: OpAbandon, Client: holder.ID, Key: key, Lease: h.Lease, Write: true, Call: time.Now()})
		stop2() // release_on_close: B releases the lease
		<-kept2
		c := <-got
		if c == nil {
			t.Fatalf("round %d: the contender did not get the key after the holder let go", round)
		}
		c.Write(ctx, 10*time.Millisecond, nil)
		_, _ = c.Release(ctx, true)
	}
	res := run.Check()
	writeHistory(t, run, len(res.Violations()) > 0)
	report.Add("KeepAlive stream cut", "a KeepAlive stream (release_on_close) to replica A silently cut; the holder resumes on replica B; A notices later", res, false)
	expectClean(t, res)
}

// goKeep runs h.KeepAlive in a goroutine and returns a channel closed when
// it returns.
func goKeep(h *Held, ctx context.Context, o KeepAliveOptions) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.KeepAlive(ctx, o)
	}()
	return done
}

// TestClientStopsReading takes a lease and opens a KeepAlive stream that
// the client does not read (a blocking stub checked only at the end of the
// work), with a flow-control window that fills after a renewal, and a long
// key and owner, so that every renewal is large and gRPC's own buffer for
// the stream (64 KiB) fills after some 80 of them. Renewal must not wait on
// the client reading: while the stream is open, a contender trying all
// along never gets the key, unless lockd noticed the loss itself (and
// counted it in lockd_lock_lost_total) before. When the client finally
// reads, the stream ends with NOT_FOUND if the lease was lost.
func TestClientStopsReading(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	const ttl = 500 * time.Millisecond
	span := scaled(20*time.Second, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	run := NewRun(Workload{}, f.replicas)
	holder := run.NewClient(0, 0, strings.Repeat("o", 256), f.replicas)
	contender := run.NewClient(1, 1, "contender", f.replicas)
	var extra []string
	for round := range scaled(1, 3) {
		key := fmt.Sprintf("unread/%d/%s", round, strings.Repeat("k", 500))
		h, err := holder.Acquire(ctx, key, AcquireOptions{TTL: ttl})
		if err != nil || h == nil {
			t.Fatalf("holder: %v, %v", h, err)
		}
		lostBefore, err := f.procs[0].Metric(ctx, "lockd_lock_lost_total")
		if err != nil {
			t.Fatal(err)
		}
		s := openUnreadKeepAlive(t, f.procs[0].Addr, &lockdv1.KeepAliveRequest{Key: key, LeaseId: h.Lease})
		deadline := time.Now().Add(span)
		var c *Held
		for c == nil && time.Now().Before(deadline) {
			c, _ = contender.Acquire(ctx, key, AcquireOptions{TTL: ttl, Wait: time.Second})
		}
		lost, err := f.procs[0].Metric(ctx, "lockd_lock_lost_total")
		if err != nil {
			t.Fatal(err)
		}
		_, frames, _, _ := s.state()
		code := codes.Unknown
		if c != nil {
			// Reading now, the holder learns how its stream ended.
			code = s.read(30 * time.Second)
			if lost == lostBefore {
				extra = append(extra, fmt.Sprintf(
					"round %d: the key was granted to another at %s while the holder's unread KeepAlive stream was open and lockd had noticed no loss: renewal waited on the client reading",
					round, stamp(time.Now())))
			}
			if code != codes.NotFound {
				extra = append(extra, fmt.Sprintf("round %d: the lease was lost, but its stream, once read, ended with %v, not NOT_FOUND", round, code))
			}
		}
		run.History.Add(Event{Op: OpAbandon, Client: holder.ID, Key: key, Lease: h.Lease, Write: true, Call: time.Now()})
		_ = s.conn.Close()
		if c != nil {
			_, _ = c.Release(ctx, true)
		} else {
			_, _ = h.Release(ctx, true)
		}
		t.Logf("round %d: granted to another: %v; the unread stream had %d messages; lockd counted %v lost leases; once read, it ended with %v",
			round, c != nil, frames, lost-lostBefore, code)
	}
	res := run.Check()
	res.Extra = append(res.Extra, extra...)
	writeHistory(t, run, len(res.Violations()) > 0)
	report.Add("client stops reading", fmt.Sprintf("a KeepAlive stream not read, its flow-control window (%d bytes) full, for %v (ttl %v)", unreadWindow, span, ttl), res, false)
	expectClean(t, res)
}

// TestClientHostVanishes holds a lease with KeepAlive (release_on_close)
// through a proxy that then drops everything, like a client host that lost
// power: lockd's keepalive pings must notice within --keepalive-time +
// --keepalive-timeout and end the stream, releasing the lease, so a
// contender gets the key within that bound plus the ttl (allowed five times
// over here, for a loaded machine).
func TestClientHostVanishes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const (
		ttl       = time.Second
		pingEvery = time.Second
		pingWait  = time.Second
	)
	f := startFleet(t, 2, "--redis="+srv.Addr(), fmt.Sprintf("--keepalive-time=%v", pingEvery), fmt.Sprintf("--keepalive-timeout=%v", pingWait))
	proxy := NewProxy(t, "client-host", f.procs[0].Addr)
	viaProxy := dial(t, proxy.Addr())
	bound := 5 * (pingEvery + pingWait + ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	run := NewRun(Workload{}, f.replicas)
	holder := run.NewClient(0, 0, "holder", []lockdv1.LockServiceClient{viaProxy})
	contender := run.NewClient(1, 1, "contender", f.replicas)
	res := &Result{}
	for round := range scaled(1, 3) {
		key := fmt.Sprintf("vanish/%d", round)
		h, err := holder.Acquire(ctx, key, AcquireOptions{TTL: ttl})
		if err != nil || h == nil {
			t.Fatalf("holder: %v, %v", h, err)
		}
		kctx, stop := context.WithCancel(ctx)
		kept := goKeep(h, kctx, KeepAliveOptions{ReleaseOnClose: true, NoResume: true})
		if !h.AwaitNews(ctx, time.Minute) {
			t.Fatal("no renewal")
		}
		proxy.Blackhole(t)
		gone := time.Now()
		c, err := contender.Acquire(ctx, key, AcquireOptions{TTL: ttl, Wait: bound})
		switch {
		case err != nil:
			t.Fatalf("contender: %v", err)
		case c == nil:
			res.Extra = append(res.Extra, fmt.Sprintf(
				"key %q: the vanished client's lease was still held %v after it vanished; the bound is keepalive-time + keepalive-timeout + ttl = %v",
				key, time.Since(gone).Round(time.Millisecond), pingEvery+pingWait+ttl))
		default:
			_, _ = c.Release(ctx, true)
		}
		stop()
		<-kept
		proxy.Heal(t)
	}
	r := run.Check()
	res.Holds, res.FailedCalls = r.Holds, r.FailedCalls
	report.Add("client host vanishes", "proxy client→lockd drops everything while the client holds with KeepAlive (release_on_close)", res, false)
	expectClean(t, res)
}
