package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// forgedPeer is an address no caller of the test has.
const forgedPeer = "203.0.113.9:4242"

// TestHTTPCallersAreLoggedWithTheirOwnAddress: lockd's log names the
// HTTP client's address for a call through the gateway, not the gateway's
// in-memory connection; neither an HTTP header nor gRPC metadata from
// outside can make lockd log another address.
func TestHTTPCallersAreLoggedWithTheirOwnAddress(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	s.call(t, http.MethodPost, "/v1/locks/peer/http:acquire", "", `{}`).ok(t, "acquire over HTTP")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/locks/peer/forged-header:rlock", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Lockd-Gateway-Peer", "Grpc-Metadata-Lockd-Gateway-Peer", "X-Forwarded-For", "Forwarded"} {
		req.Header.Set(h, forgedPeer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()

	forged := metadata.AppendToOutgoingContext(ctx, "lockd-gateway-peer", forgedPeer)
	if _, err := lockdv1.NewLockServiceClient(s.conn).WLock(forged, &lockdv1.WLockRequest{Key: "peer/forged-metadata"}); err != nil {
		t.Fatal(err)
	}

	for _, method := range []string{"Acquire", "RLock", "WLock"} {
		var got string
		eventually(t, method+" logged", func() bool {
			got = loggedPeer(s, "/lockd.v1.LockService/"+method)
			return got != ""
		})
		if !strings.HasPrefix(got, "127.0.0.1:") {
			t.Errorf("%s was logged with peer.address %q, want the caller's own 127.0.0.1:port", method, got)
		}
	}
}

// loggedPeer is the peer.address of the last finished call of method.
func loggedPeer(s *stack, method string) string {
	var peer string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != "finished call" || e["grpc.method"] != method {
			continue
		}
		peer, _ = e["peer.address"].(string)
	}
	return peer
}
