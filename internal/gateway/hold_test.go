package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// TestHoldStream holds a key over HTTP: the first JSON line says acquired
// with the lease, renewals follow, and ending the request releases the
// lease at once; a Hold on a busy key answers one line, acquired false.
func TestHoldStream(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	locks := lockdv1.NewLockServiceClient(s.conn)

	const key = "hold/over http 🔒"
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	res, err := s.send(hctx, http.MethodPost, "/v1/locks/"+pathOf(key)+":hold", "", `{"owner":"cron","ttl":"3s"}`)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("hold: %v %v", res, err)
	}
	defer res.Body.Close()
	ch := lines(t, res.Body)
	first := next(t, ch)["result"].(map[string]any)
	lease, _ := first["lease"].(map[string]any)
	if first["acquired"] != true || lease["key"] != key || lease["owner"] != "cron" {
		t.Fatalf("first line: %v", first)
	}
	renewal := next(t, ch)["result"].(map[string]any)
	if renewal["lease"].(map[string]any)["leaseId"] != lease["leaseId"] {
		t.Fatalf("renewal line: %v", renewal)
	}

	// Busy: one line, then the stream ends.
	busy := s.call(t, http.MethodPost, "/v1/locks:hold", "", `{"key":`+jsonString(key)+`}`)
	if busy.status != http.StatusOK || !strings.HasPrefix(busy.raw, `{"result":{"acquired":false,`) ||
		!strings.Contains(busy.raw, `"retryAfter":"`) || strings.Count(busy.raw, "\n") > 1 {
		t.Fatalf("busy hold: HTTP %d %s", busy.status, busy.raw)
	}

	// The 3s lease was just renewed: only the release on close lets a
	// waiter bounded below a second in.
	stop()
	res.Body.Close()
	eventually(t, "the lease is released", func() bool {
		r, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: "next"})
		return err == nil && r.GetAcquired()
	})
}
