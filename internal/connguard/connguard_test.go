package connguard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/connguard"
)

// served accepts every connection of l and hands it over on conns.
func served(t *testing.T, l *connguard.Listener) <-chan net.Conn {
	t.Helper()
	conns := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return conns
}

func guarded(t *testing.T, o connguard.Options) (*connguard.Listener, <-chan net.Conn, *events) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{n: map[string]int{}}
	o.Event = ev.add
	l := connguard.New(lis, o)
	return l, served(t, l), ev
}

type events struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *events) add(r string) { e.mu.Lock(); e.n[r]++; e.mu.Unlock() }
func (e *events) get(r string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[r]
}

// dialFrom connects to l from the loopback address from.
func dialFrom(t *testing.T, l net.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedByServer reports whether the server closed c.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestTheCrowdedSourceGivesWay: with the pending pool full of one
// source's connections, a newcomer from another source takes the place of
// the crowded source's oldest, and keeps it.
func TestTheCrowdedSourceGivesWay(t *testing.T) {
	t.Parallel()
	l, conns, ev := guarded(t, connguard.Options{MaxPending: 4})
	var flood []net.Conn
	for range 4 {
		flood = append(flood, dialFrom(t, l, "127.0.0.2"))
		<-conns
	}
	newcomer := dialFrom(t, l, "127.0.0.1")
	<-conns
	if !closedByServer(flood[0]) {
		t.Fatal("the crowded source's oldest connection stayed open")
	}
	if closedByServer(newcomer) {
		t.Fatal("the newcomer was closed")
	}
	// More from the crowded source push out its own, never the newcomer.
	for range 6 {
		dialFrom(t, l, "127.0.0.2")
		<-conns
	}
	if closedByServer(newcomer) {
		t.Fatal("the newcomer was closed by a flood from another source")
	}
	if pending, _ := l.Counts(); pending != 4 {
		t.Fatalf("%d pending, want 4", pending)
	}
	if n := ev.get(connguard.ReasonEvicted); n != 7 {
		t.Fatalf("%d evictions counted, want 7", n)
	}
}

// TestPendingConnectionsTimeOut: a connection never admitted is closed;
// an admitted one stays.
func TestPendingConnectionsTimeOut(t *testing.T) {
	t.Parallel()
	l, conns, ev := guarded(t, connguard.Options{PendingTimeout: 200 * time.Millisecond})
	idle := dialFrom(t, l, "127.0.0.1")
	<-conns
	busy := dialFrom(t, l, "127.0.0.1")
	sc := <-conns
	if err := connguard.Admit(connguard.ConnContext(context.Background(), sc), "orders", 0); err != nil {
		t.Fatal(err)
	}
	if !closedByServer(idle) {
		t.Fatal("a connection never admitted stayed open")
	}
	if closedByServer(busy) {
		t.Fatal("an admitted connection was closed")
	}
	if ev.get(connguard.ReasonPendingTimeout) != 1 {
		t.Fatal("the timeout was not counted")
	}
}

// TestAdmissionIsBounded: at most Max connections are admitted, and a
// client at most its share; a closed connection gives its place back.
func TestAdmissionIsBounded(t *testing.T) {
	t.Parallel()
	l, conns, ev := guarded(t, connguard.Options{Max: 3})
	admit := func(client string, share int) (context.Context, error) {
		dialFrom(t, l, "127.0.0.1")
		ctx := connguard.ConnContext(context.Background(), <-conns)
		return ctx, connguard.Admit(ctx, client, share)
	}
	first, err := admit("billing", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admit("billing", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := admit("billing", 2); !errors.Is(err, connguard.ErrClientShare) {
		t.Fatalf("billing's third: %v, want ErrClientShare", err)
	}
	if _, err := admit("ledger", 2); err != nil {
		t.Fatalf("ledger: %v", err)
	}
	if _, err := admit("ops", 0); !errors.Is(err, connguard.ErrFull) {
		t.Fatalf("a fourth: %v, want ErrFull", err)
	}
	// Admitting again what is admitted changes nothing.
	if err := connguard.Admit(first, "ledger", 1); err != nil {
		t.Fatal(err)
	}
	if !connguard.Admitted(first) {
		t.Fatal("not admitted")
	}
	connguard.ConnOfForTest(first).Close()
	if _, err := admit("ops", 0); err != nil {
		t.Fatalf("after a close: %v", err)
	}
	if ev.get(connguard.ReasonFull) != 1 || ev.get(connguard.ReasonClientShare) != 1 {
		t.Fatalf("refusals counted: %v", ev.n)
	}
}
