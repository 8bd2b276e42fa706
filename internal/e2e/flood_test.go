package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockd/lockd/internal/redistest"
)

// floodStreams is how many request HEADERS frames the flood sends on one
// connection: each opens a stream and sends no message.
const floodStreams = 20000

// TestHeaderFloodIsBounded sends lockd, on one connection, a flood of
// request HEADERS frames without a body: first for a lock call without a
// bearer token, then for health checks (open without a token). lockd must
// refuse what it cannot afford before it costs anything: its goroutines and
// memory stay bounded while the connection stays open.
func TestHeaderFloodIsBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const token = "flood-test-bearer-0123456789"
	cfgPath := filepath.Join(t.TempDir(), "lockd.yaml")
	cfg := "auth:\n  clients:\n    - {name: orders, token_env: ORDERS_TOKEN, locks: [\"orders/\"]}\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := startLockd(t, []string{"ORDERS_TOKEN=" + token}, "--redis="+srv.Addr(), "--config="+cfgPath)

	before := scrapeProcess(t, proc)
	// One call whose header list is 15 MiB, in CONTINUATION frames.
	big := newFlooder(t, proc.addr)
	big.hugeHeaders(t, "/grpc.health.v1.Health/Check", 15<<20)
	during := scrapeProcess(t, proc)
	t.Logf("a 15 MiB header list: goroutines %d -> %d, resident memory %.1f -> %.1f MiB",
		before.goroutines, during.goroutines, mib(before.rss), mib(during.rss))
	if grown := during.rss - before.rss; grown > maxHeaderListBytes {
		t.Errorf("a 15 MiB header list: resident memory grew by %.1f MiB, want at most %.1f MiB", mib(grown), mib(maxHeaderListBytes))
	}
	big.close()
	for _, method := range []string{"/lockd.v1.LockService/Acquire", "/grpc.health.v1.Health/Check"} {
		f := newFlooder(t, proc.addr)
		f.flood(t, method, floodStreams)
		during := scrapeProcess(t, proc)
		t.Logf("%s: %d HEADERS frames on one connection: goroutines %d -> %d, resident memory %.1f -> %.1f MiB",
			method, floodStreams, before.goroutines, during.goroutines, mib(before.rss), mib(during.rss))
		if grown := during.goroutines - before.goroutines; grown > maxFloodGoroutines {
			t.Errorf("%s: goroutines grew by %d during the flood, want at most %d", method, grown, maxFloodGoroutines)
		}
		if grown := during.rss - before.rss; grown > maxFloodBytes {
			t.Errorf("%s: resident memory grew by %.1f MiB during the flood, want at most %.1f MiB", method, mib(grown), mib(maxFloodBytes))
		}
		f.close()
	}
}

const (
	// maxFloodGoroutines bounds lockd's extra goroutines while one
	// connection floods it: the open (health) streams one connection may
	// hold, and lockd's own per-connection goroutines.
	maxFloodGoroutines = 1200
	// maxFloodBytes bounds lockd's extra resident memory meanwhile (the
	// race detector, when on, multiplies memory use).
	maxFloodBytes = 64 << 20
	// maxHeaderListBytes bounds lockd's extra resident memory while it
	// reads one call's 15 MiB header list: it keeps no more of it than
	// --max-header-bytes.
	maxHeaderListBytes = 10 << 20
)

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// processStats are figures read off lockd's /metrics.
type processStats struct {
	goroutines int64
	rss        int64
}

func scrapeProcess(t *testing.T, p *process) processStats {
	t.Helper()
	body := get(t, "http://"+p.http+"/metrics")
	return processStats{goroutines: int64(metricValue(t, body, "go_goroutines")), rss: int64(metricValue(t, body, "process_resident_memory_bytes"))}
}

// metricValue reads an unlabelled series from Prometheus text.
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// flooder speaks raw HTTP/2 to lockd, as a hostile client would.
type flooder struct {
	conn   net.Conn
	fr     *http2.Framer
	pinged chan struct{}
	done   chan struct{}
}

func newFlooder(t *testing.T, addr string) *flooder {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	f := &flooder{conn: conn, fr: http2.NewFramer(conn, conn), pinged: make(chan struct{}, 1), done: make(chan struct{})}
	if err := f.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// Read (and drop) whatever lockd answers, so that its writes never
	// hold it back: the worst case for lockd.
	rd := http2.NewFramer(io.Discard, conn)
	go func() {
		defer close(f.done)
		for {
			fr, err := rd.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := fr.(*http2.PingFrame); ok && p.IsAck() {
				f.pinged <- struct{}{}
			}
		}
	}()
	return f
}

// flood opens n streams calling method, each with request headers only,
// then waits until lockd has read them all (its answer to a PING sent
// after them).
func (f *flooder) flood(t *testing.T, method string, n int) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "lockd"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]}); err != nil {
			t.Fatal(err)
		}
	}
	block := hb.Bytes()
	_ = f.conn.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	for i := range n {
		err := f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true})
		if err != nil {
			t.Fatalf("HEADERS %d: %v", i, err)
		}
	}
	f.awaitPing(t)
}

// awaitPing sends a PING and waits for its answer: lockd has then read
// every frame sent before it.
func (f *flooder) awaitPing(t *testing.T) {
	t.Helper()
	if err := f.fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd'}); err != nil {
		select {
		case <-f.done:
			return // lockd closed the connection: that bounds the flood too
		default:
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-f.pinged:
	case <-f.done:
		// lockd closed the connection: that bounds the flood too.
	case <-ctx.Done():
		t.Fatal("lockd did not answer a PING")
	}
}

// hugeHeaders opens one stream calling method whose header list is about
// size bytes (padding headers of 1 KiB), sent as a HEADERS frame and
// CONTINUATION frames, then waits until lockd has read it all.
func (f *flooder) hugeHeaders(t *testing.T, method string, size int) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: method},
		{Name: ":authority", Value: "lockd"}, {Name: "content-type", Value: "application/grpc"},
	}
	pad := strings.Repeat("p", 1024)
	for i := 0; hb.Len() < size; i++ {
		for _, h := range fields {
			if err := enc.WriteField(h); err != nil {
				t.Fatal(err)
			}
		}
		fields = []hpack.HeaderField{{Name: "x-pad-" + strconv.Itoa(i), Value: pad, Sensitive: true}}
	}
	block := hb.Bytes()
	const frame = 16 << 10
	_ = f.conn.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	first := min(frame, len(block))
	if err := f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:first], EndHeaders: first == len(block)}); err != nil {
		t.Fatal(err)
	}
	for rest := block[first:]; len(rest) > 0; {
		n := min(frame, len(rest))
		if err := f.fr.WriteContinuation(1, n == len(rest), rest[:n]); err != nil {
			// lockd may close the connection rather than read it all.
			return
		}
		rest = rest[n:]
	}
	f.awaitPing(t)
}

func (f *flooder) close() {
	_ = f.conn.Close()
	<-f.done
}

// TestConnectionsAreBounded opens more connections than lockd keeps, each
// through the HTTP/2 preface and idle after it (no call: pending): lockd
// serves no more than --max-pending-connections of them at once (the
// others are closed as newer ones come), and closes an idle one in time.
func TestConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const bound, dialed = 50, 200
	proc := startLockd(t, nil, "--redis="+srv.Addr(), fmt.Sprintf("--max-connections=%d", bound), fmt.Sprintf("--max-pending-connections=%d", bound), "--max-connection-idle=6s")
	before := scrapeProcess(t, proc)
	var conns []*flooder
	for range dialed {
		conns = append(conns, newFlooder(t, proc.addr))
	}
	// Every connection lockd serves answers a PING; the others' PINGs wait
	// unread until lockd accepts them.
	for _, c := range conns {
		c.sendPing(t)
	}
	var served []*flooder
	window := time.Now().Add(2 * time.Second)
	for _, c := range conns {
		select {
		case <-c.pinged:
			served = append(served, c)
		case <-c.done: // closed for a newer one
		case <-time.After(time.Until(window)):
		}
	}
	// Those closed after they answered are not kept either: each is asked
	// again, since lockd's close of one it gave up may still be on its way.
	kept := served[:0]
	for _, c := range served {
		if c.stillOpen() {
			kept = append(kept, c)
		}
	}
	served = kept
	during := scrapeProcess(t, proc)
	t.Logf("%d connections dialed, %d served: goroutines %d -> %d, resident memory %.1f -> %.1f MiB",
		dialed, len(served), before.goroutines, during.goroutines, mib(before.rss), mib(during.rss))
	if len(served) > bound {
		t.Errorf("%d connections served at once, want at most %d", len(served), bound)
	}
	if grown := during.goroutines - before.goroutines; grown > 4*bound {
		t.Errorf("goroutines grew by %d for %d connections, want at most %d", grown, bound, 4*bound)
	}
	if len(served) == 0 {
		t.Fatal("no connection served")
	}
	// An idle connection is closed by lockd.
	for _, c := range conns {
		if c != served[0] {
			c.close()
		}
	}
	select {
	case <-served[0].done:
	case <-time.After(time.Minute):
		t.Fatal("an idle connection still open a minute after it went idle")
	}
}

// stillOpen reports whether lockd still serves the connection: it answers
// another PING rather than close it.
func (f *flooder) stillOpen() bool {
	_ = f.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := f.fr.WritePing(false, [8]byte{'a', 'g', 'a', 'i', 'n'}); err != nil {
		return false
	}
	select {
	case <-f.pinged:
		return true
	case <-f.done:
		return false
	case <-time.After(5 * time.Second):
		return false
	}
}

// sendPing sends a PING; its answer arrives on f.pinged.
func (f *flooder) sendPing(t *testing.T) {
	t.Helper()
	_ = f.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := f.fr.WritePing(false, [8]byte{'p', 'i', 'n', 'g'}); err != nil {
		t.Fatal(err)
	}
}
