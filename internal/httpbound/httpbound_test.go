package httpbound

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve runs an HTTP server bounded to max connections whose /wait
// requests answer when release delivers.
func serve(t *testing.T, max int, release <-chan struct{}) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	bounded := Limit(srv, lis, max)
	go func() { _ = srv.Serve(bounded) }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

type client struct {
	conn net.Conn
	rd   *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{conn: c, rd: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
}

func (c *client) answer(within time.Duration) error {
	_ = c.conn.SetReadDeadline(time.Now().Add(within))
	res, err := http.ReadResponse(c.rd, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Body.Close()
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestRequestsInProgressHoldTheirPlaces: with max requests in progress, a
// further connection waits until one of them ends.
func TestRequestsInProgressHoldTheirPlaces(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	addr := serve(t, 2, release)
	for range 2 {
		dial(t, addr).send(t, "/wait")
	}
	extra := dial(t, addr)
	extra.send(t, "/")
	if err := extra.answer(500 * time.Millisecond); !timedOut(err) {
		t.Fatalf("a third connection was served while two requests were in progress: %v", err)
	}
	release <- struct{}{}
	if err := extra.answer(20 * time.Second); err != nil {
		t.Fatalf("the waiting connection was not served once a place freed: %v", err)
	}
}

// TestIdleConnectionsGiveWay: connections left idle do not keep a new one
// waiting: at the bound, an idle keep-alive connection is closed.
func TestIdleConnectionsGiveWay(t *testing.T) {
	t.Parallel()
	addr := serve(t, 2, nil)
	var idle []*client
	for range 2 {
		c := dial(t, addr)
		c.send(t, "/")
		if err := c.answer(20 * time.Second); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	extra := dial(t, addr)
	extra.send(t, "/")
	if err := extra.answer(20 * time.Second); err != nil {
		t.Fatalf("a connection waited behind two idle ones: %v", err)
	}
	closed := 0
	for _, c := range idle {
		_ = c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.rd.ReadByte(); errors.Is(err, io.EOF) {
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("no idle connection was closed")
	}
}

// TestUnboundedWithoutMax: a max of 0 leaves the listener as it is.
func TestUnboundedWithoutMax(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	srv := &http.Server{}
	if got := Limit(srv, lis, 0); got != lis || srv.ConnState != nil {
		t.Fatal("Limit with max 0 changed the listener or the server")
	}
}
