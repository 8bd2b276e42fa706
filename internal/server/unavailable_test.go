package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestUnavailableTellsCallersNoNetworkDetails: with Redis gone, a call is
// UNAVAILABLE with a plain reason that names no address and quotes no
// network error; the cause, address included, is in lockd's log line of
// that call.
func TestUnavailableTellsCallersNoNetworkDetails(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := start(t, Config{Redis: srv.Addr()})
	lc := lockdv1.NewLockServiceClient(r.conn)
	port := strconv.Itoa(srv.Port())
	srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "outage/1"})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		t.Fatalf("Acquire with Redis stopped: %v, want UNAVAILABLE", err)
	}
	for _, leak := range []string{"127.0.0.1", port, "tcp", "dial", "refused"} {
		if strings.Contains(st.Message(), leak) {
			t.Errorf("the caller is told %q, which shows %q", st.Message(), leak)
		}
	}
	if !strings.Contains(st.Message(), "redis unavailable") {
		t.Errorf("the caller is told %q, want a message saying Redis is unavailable", st.Message())
	}
	var logged bool
	for _, line := range r.logs.Lines() {
		if strings.Contains(line, `"finished call"`) && strings.Contains(line, "Acquire") &&
			strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "127.0.0.1:"+port) {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no WARN line for the call names the Redis address and its error:\n%s", r.logs)
	}
}
