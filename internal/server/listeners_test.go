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

// TestHTTPListenersAreBounded: the HTTP port (/metrics, probes) and the
// gateway take no more connections at once than --max-connections, as the
// gRPC listener does, so that a caller without a token cannot exhaust
// lockd's memory by opening connections (each one held a goroutine and
// some 15–25 KiB; idle keep-alives on the HTTP port, for ever); and
// connections left idle give way to new ones at the bound.
func TestHTTPListenersAreBounded(t *testing.T) {
	t.Parallel()
	const bound = 3
	tr := DefaultTransport()
	tr.MaxConnections = bound
	r := start(t, Config{Redis: redistest.Start(t).Addr(), GatewayListen: "127.0.0.1:0", Transport: tr})
	for _, l := range []struct{ name, addr, path string }{
		{"the HTTP port", r.addrs.HTTP, "/healthz"},
		{"the gateway", r.addrs.Gateway, "/v1/apps/none/access_token"},
	} {
		// Requests in progress (headers still coming) hold their places.
		// They may take only the header timeout (5 s on the HTTP port):
		// a try on which one of them ran out proves nothing, and is made
		// again.
		for try := 1; ; try++ {
			held, proven := placesHeld(t, l.addr, l.path, bound)
			if proven {
				if !held {
					t.Errorf("%s answered connection %d while %d requests were in progress", l.name, bound+1, bound)
				}
				break
			}
			if try == 3 {
				t.Fatalf("%s: requests in progress ran out of time on every try (the machine is too slow)", l.name)
			}
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

// placesHeld opens bound connections whose requests are in progress and
// one more with a whole request: held tells whether that one waited while
// the others were in progress, and was served once one of them closed;
// proven is false when one of them ran out of time first.
func placesHeld(t *testing.T, addr, path string, bound int) (held, proven bool) {
	t.Helper()
	var sending []net.Conn
	for range bound {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", path); err != nil {
			t.Fatal(err)
		}
		sending = append(sending, c)
	}
	extra := openHTTP(t, addr, path)
	defer extra.conn.Close()
	err := extra.answered(500 * time.Millisecond)
	for _, c := range sending {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var ne net.Error
		if _, rerr := c.Read(make([]byte, 1)); !errors.As(rerr, &ne) || !ne.Timeout() {
			return false, false // closed by the header timeout
		}
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false, true
	}
	// Once one closes, the one waiting is served.
	_ = sending[0].Close()
	if err := extra.answered(20 * time.Second); err != nil {
		t.Errorf("the waiting connection was not served once another closed: %v", err)
	}
	return true, true
}
