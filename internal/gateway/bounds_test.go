package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// rawRequest opens a connection to srv and writes req as is.
func rawRequest(t *testing.T, srv *httptest.Server, req string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSlowBodyIsCutOff: a client that sends its header but not its body
// gets 408 instead of holding the connection and a handler.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{}, 1)
	b := requestBounds{maxBody: 1 << 10, bodyTimeout: 100 * time.Millisecond, writeTimeout: time.Minute}
	srv := httptest.NewServer(b.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached <- struct{}{} }), runtime.NewServeMux()))
	defer srv.Close()

	c := rawRequest(t, srv, "POST /v1/locks/k:acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"ow")
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":4`) {
		t.Fatalf("HTTP %d %s, want 408 with DEADLINE_EXCEEDED", res.StatusCode, body)
	}
	select {
	case <-reached:
		t.Fatal("the handler ran without the body")
	default:
	}
}

// TestStalledReaderIsCutOff: a response to a client that stops reading
// fails its write after the write timeout, rather than blocking the
// handler (and its call) for as long as the connection stays open.
func TestStalledReaderIsCutOff(t *testing.T) {
	t.Parallel()
	writeErr := make(chan error, 1)
	b := requestBounds{maxBody: 1 << 10, bodyTimeout: time.Minute, writeTimeout: 100 * time.Millisecond}
	srv := httptest.NewServer(b.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rc := http.NewResponseController(w)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
			if err := rc.Flush(); err != nil {
				writeErr <- err
				return
			}
		}
	}), runtime.NewServeMux()))
	defer srv.Close()

	rawRequest(t, srv, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-writeErr:
		t.Logf("the write failed: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the handler is still writing to a client that does not read")
	}
}

// TestBodyIsBounded: a body over the limit gets 413 and never reaches the
// handler.
func TestBodyIsBounded(t *testing.T) {
	t.Parallel()
	b := requestBounds{maxBody: 16, bodyTimeout: time.Minute, writeTimeout: time.Minute}
	srv := httptest.NewServer(b.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}), runtime.NewServeMux()))
	defer srv.Close()
	for body, want := range map[string]int{`{"key":"k"}`: http.StatusOK, `{"key":"a-key-too-long"}`: http.StatusRequestEntityTooLarge} {
		res, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: HTTP %d %s, want %d", body, res.StatusCode, got, want)
		}
		if want == http.StatusOK && string(got) != body {
			t.Errorf("the handler read %q, want %q", got, body)
		}
	}
}
