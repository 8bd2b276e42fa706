package server

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// keptAlive is an HTTP/1.1 connection that has had one answer and stays
// open, as a client holding connections open would keep it.
type keptAlive struct {
	conn net.Conn
	rd   *bufio.Reader
}

func openHTTP(t *testing.T, addr, path string) *keptAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	k := &keptAlive{conn: c, rd: bufio.NewReader(c)}
	k.send(t, path)
	return k
}

func (k *keptAlive) send(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(k.conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
}

// answered reads one answer within d.
func (k *keptAlive) answered(d time.Duration) error {
	_ = k.conn.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(k.rd, nil)
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// TestHTTPListenersAreBounded: on the HTTP port (/metrics, probes) and the
// gateway, as on the gRPC listener, connections on which no request was
// let in yet (here: requests whose headers are still coming) are at most
// --max-pending-connections, so that a caller without a token cannot
// exhaust lockd's memory by opening connections; the oldest of them gives
// way to a newcomer, which is served at once. Connections left idle give
// way to new ones too.
func TestHTTPListenersAreBounded(t *testing.T) {
	t.Parallel()
	const bound = 3
	tr := DefaultTransport()
	tr.MaxConnections, tr.MaxPendingConnections = bound, bound
	r := start(t, Config{Redis: redistest.Start(t).Addr(), GatewayListen: "127.0.0.1:0", Transport: tr})
	for _, l := range []struct{ name, addr, path string }{
		{"the HTTP port", r.addrs.HTTP, "/healthz"},
		{"the gateway", r.addrs.Gateway, "/v1/apps/none/access_token"},
	} {
		var sending []net.Conn
		for range bound {
			c, err := net.Dial("tcp", l.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", l.path); err != nil {
				t.Fatal(err)
			}
			sending = append(sending, c)
		}
		if err := openHTTP(t, l.addr, l.path).answered(20 * time.Second); err != nil {
			t.Errorf("%s: a newcomer behind %d requests in progress: %v", l.name, bound, err)
		}
		_ = sending[0].SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := sending[0].Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("%s: the oldest request in progress kept its connection (%v); want it closed for the newcomer", l.name, err)
		}
		// Idle keep-alive connections give way.
		for range bound {
			k := openHTTP(t, l.addr, l.path)
			if err := k.answered(20 * time.Second); err != nil {
				t.Fatalf("%s: %v", l.name, err)
			}
		}
		if err := openHTTP(t, l.addr, l.path).answered(20 * time.Second); err != nil {
			t.Errorf("%s: a connection waited behind idle ones: %v", l.name, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
