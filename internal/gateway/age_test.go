package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/server"
)

// TestHTTPStreamsOutliveMaxConnectionAge: --max-connection-age (with its
// grace) moves gRPC clients to other replicas; the gateway's in-memory
// connections are lockd's own, so an HTTP KeepAlive stream goes on long
// after the age and grace have passed.
func TestHTTPStreamsOutliveMaxConnectionAge(t *testing.T) {
	t.Parallel()
	tr := server.DefaultTransport()
	tr.MaxConnectionAge, tr.MaxConnectionAgeGrace = 200*time.Millisecond, 200*time.Millisecond
	s := startStack(t, stackOptions{transport: tr})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := s.call(t, http.MethodPost, "/v1/locks/aged/kept:acquire", "", `{"ttl":"30s"}`).ok(t, "acquire")
	lease := held.str("lease", "leaseId")
	res, err := s.send(ctx, http.MethodPost, "/v1/locks/aged/kept:keepalive", "", `{"leaseId":"`+lease+`","ttl":"1s"}`)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("keepalive: %v %v", res, err)
	}
	defer res.Body.Close()
	ch := lines(t, res.Body)
	// Ten times the age and its grace: the stream renews throughout.
	for until := time.Now().Add(4 * time.Second); time.Now().Before(until); {
		if m := next(t, ch); m["result"] == nil {
			t.Fatalf("the KeepAlive stream ended after the connection's age: %v", m)
		}
	}
	if _, err := lockdv1.NewLockServiceClient(s.conn).Renew(ctx, &lockdv1.RenewRequest{Key: "aged/kept", LeaseId: lease}); err != nil {
		t.Fatalf("the lease kept alive over HTTP: %v", err)
	}
}
