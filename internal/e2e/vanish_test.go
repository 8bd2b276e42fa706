package e2e

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestVanishedClientLosesItsKeepAlive: a client holding a lock through a
// KeepAlive stream with release_on_close vanishes (a proxy between it and
// lockd stops forwarding, as when its host loses power): lockd's keepalive
// pings go unanswered, it drops the connection, and the stream ends as if
// closed, releasing the lease, so a waiter gets the lock long before the
// hour-long lease could run out.
func TestVanishedClientLosesItsKeepAlive(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proc := startLockd(t, nil, "--redis="+srv.Addr(), "--keepalive-time=1s", "--keepalive-timeout=1s")
	proxy := newProxy(t, proc.addr)

	conn, err := grpc.NewClient(proxy.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	holder := lockdv1.NewLockServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := holder.Acquire(ctx, &lockdv1.AcquireRequest{Key: "vanish/1", Owner: "holder", Ttl: durationpb.New(time.Hour)})
	if err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}
	stream, err := holder.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "vanish/1", LeaseId: res.GetLease().GetLeaseId(), ReleaseOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}

	proxy.blackhole()
	waiter := lockdv1.NewLockServiceClient(proc.dial(t))
	got, err := waiter.Acquire(ctx, &lockdv1.AcquireRequest{Key: "vanish/1", Owner: "waiter", WaitTimeout: durationpb.New(time.Minute)})
	if err != nil || !got.GetAcquired() {
		t.Fatalf("waiter after the holder vanished: %v, %v (want the lock: lockd should have noticed)", got, err)
	}
	// The stream's handler has ended (or ends a moment after the release).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := metricValue(t, get(t, "http://"+proc.http+"/metrics"), "lockd_keepalive_streams")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockd_keepalive_streams = %v after the client vanished, want 0", n)
		}
	}
}

// proxy forwards TCP connections to a target until blackhole is called;
// from then on it forwards nothing either way but keeps the connections
// open, as a network that silently drops packets would.
type proxy struct {
	lis   net.Listener
	dead  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = down.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, down, up)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(up, down) }()
			go func() { defer wg.Done(); p.pipe(down, up) }()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) blackhole() { p.dead.Store(true) }

// pipe copies from src to dst, dropping everything once blackholed.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dead.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.dead.Load() {
				_ = dst.Close()
			}
			return
		}
	}
}
