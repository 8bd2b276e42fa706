package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/server"
)

// TestOneClientCannotStarveAnotherThroughTheGateway: lockd bounds the calls
// open at once on one connection (--max-concurrent-streams). A client that
// keeps that many HTTP calls open through the gateway (KeepAlive streams
// here; waiting acquires alike) fills only its own share: another client's
// HTTP calls are served at once.
func TestOneClientCannotStarveAnotherThroughTheGateway(t *testing.T) {
	t.Parallel()
	const streams = 4
	tr := server.DefaultTransport()
	tr.MaxConcurrentStreams = streams
	s := startStack(t, stackOptions{auth: true, transport: tr})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	locks := lockdv1.NewLockServiceClient(s.conn)

	// ops keeps as many KeepAlive streams open through the gateway as one
	// connection may carry, each confirmed open by its first renewal.
	for i := range streams {
		key := fmt.Sprintf("hog/%d", i)
		l, err := locks.Acquire(bearer(ctx, opsToken), &lockdv1.AcquireRequest{Key: key, Ttl: durationOf(3 * time.Second)})
		if err != nil || !l.GetAcquired() {
			t.Fatalf("ops acquires %s: %v %v", key, l, err)
		}
		res, err := s.send(ctx, http.MethodPost, "/v1/locks/"+key+":keepalive", opsToken, `{"leaseId":"`+l.GetLease().GetLeaseId()+`","ttl":"3s"}`)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("ops' keepalive on %s: %v %v", key, res, err)
		}
		t.Cleanup(func() { res.Body.Close() })
		next(t, lines(t, res.Body))
	}

	// orders is served while ops' streams stay open.
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	defer ocancel()
	res, err := s.send(octx, http.MethodPost, "/v1/locks/orders/free:acquire", ordersToken, `{}`)
	if err != nil {
		t.Fatalf("orders' acquire while ops keeps %d streams open through the gateway: %v", streams, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("orders' acquire: HTTP %d", res.StatusCode)
	}
}
