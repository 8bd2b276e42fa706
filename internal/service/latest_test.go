package service

import (
	"bytes"
	"context"
	"errors"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// senders counts the goroutines running a latest's sender.
func senders(t *testing.T) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	return bytes.Count(buf.Bytes(), []byte("service.(*latest[...]).run"))
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestLatestHoldsNoGoroutineBetweenMessages opens many senders, as many
// streams a replica keeps alive, and sends one message on each: once the
// messages are out, no sender may keep a goroutine waiting for the next.
func TestLatestHoldsNoGoroutineBetweenMessages(t *testing.T) {
	const n = 200
	var sent atomic.Int64
	ls := make([]*latest[int], n)
	for i := range ls {
		ls[i] = newLatest(func(int) error { sent.Add(1); return nil })
		ls[i].offer(i)
	}
	waitFor(t, "every message sent", func() bool { return sent.Load() == n })
	waitFor(t, "the senders to end", func() bool { return senders(t) == 0 })
	for _, l := range ls {
		l.stop()
	}
}

// TestLatestKeepsOnlyTheNewestWhileASendIsStuck blocks the first send, as
// a client that never reads blocks it: offers must not wait, the messages
// offered meanwhile collapse to the newest, and stop returns within its
// bound and starts no further send.
func TestLatestKeepsOnlyTheNewestWhileASendIsStuck(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	l := newLatest(func(m int) error {
		mu.Lock()
		got = append(got, m)
		first := len(got) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return nil
	})
	l.offer(1)
	waitFor(t, "the first send", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
	offered := make(chan struct{})
	go func() {
		for i := 2; i <= 100; i++ {
			l.offer(i)
		}
		close(offered)
	}()
	select {
	case <-offered:
	case <-time.After(30 * time.Second):
		t.Fatal("offer waited on a stuck send")
	}
	close(release)
	waitFor(t, "the newest message", func() bool { mu.Lock(); defer mu.Unlock(); return got[len(got)-1] == 100 })
	mu.Lock()
	if len(got) != 2 {
		t.Errorf("sent %v, want the first and then only the newest", got)
	}
	mu.Unlock()
	l.stop()
	l.offer(101)
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if got[len(got)-1] == 101 {
		t.Error("a message offered after stop was sent")
	}
}

// TestLatestStopsAfterAFailedSend ends sending at the first error: the
// stream is broken.
func TestLatestStopsAfterAFailedSend(t *testing.T) {
	var calls atomic.Int64
	l := newLatest(func(int) error { calls.Add(1); return errors.New("broken") })
	l.offer(1)
	waitFor(t, "the failed send", func() bool { return calls.Load() == 1 })
	waitFor(t, "the sender to end", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return !l.sending })
	l.offer(2)
	l.stop()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d sends after a failed one, want none", n-1)
	}
}

// TestEndOnDrainHoldsNoGoroutine watches many calls for the server's drain
// without a goroutine per call, and still ends each with errShuttingDown
// when the drain comes.
func TestEndOnDrainHoldsNoGoroutine(t *testing.T) {
	drained, drain := context.WithCancel(context.Background())
	const n = 200
	ctxs := make([]context.Context, n)
	stops := make([]func(), n)
	for i := range ctxs {
		ctxs[i], stops[i] = endOnDrain(context.Background(), drained)
	}
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	if k := bytes.Count(buf.Bytes(), []byte("service.endOnDrain")); k > 0 {
		t.Fatalf("%d goroutines watch %d calls for the drain, want none", k, n)
	}
	stops[0]()
	drain()
	for i, ctx := range ctxs[1:] {
		waitFor(t, "the drain to end the call", func() bool { return ctx.Err() != nil })
		if c := context.Cause(ctx); c != errShuttingDown {
			t.Fatalf("call %d ended with %v, want errShuttingDown", i+1, c)
		}
	}
	if c := context.Cause(ctxs[0]); c == errShuttingDown {
		t.Fatal("a call stopped before the drain ended with errShuttingDown")
	}
	for _, stop := range stops {
		stop()
	}
}
