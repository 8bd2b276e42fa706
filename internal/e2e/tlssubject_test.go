package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestTLSSubjectAndGatewayHandshakes: with mTLS, a client with a
// tls_subject is let in only with its own certificate, over gRPC and over
// the HTTPS gateway; the gateway's failed handshakes (no client
// certificate) are counted and logged as the gRPC listener's are.
func TestTLSSubjectAndGatewayHandshakes(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serverCert, serverKey, _ := p.issue(t, "lockd", true, false)
	_, _, ordersPair := p.issue(t, "orders", false, false)
	_, _, otherPair := p.issue(t, "billing", false, false)
	const ordersToken = "orders-bearer-0123456789"
	cfgPath := filepath.Join(t.TempDir(), "lockd.yaml")
	cfg := `auth:
  clients:
    - {name: orders, token_env: ORDERS_TOKEN, locks: ["orders/"], tls_subject: "CN=orders"}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := freeAddr(t)
	proc := startLockd(t, []string{"ORDERS_TOKEN=" + ordersToken}, "--redis="+redistest.Start(t).Addr(), "--config="+cfgPath,
		"--tls-cert="+serverCert, "--tls-key="+serverKey, "--tls-client-ca="+filepath.Join(p.dir, "ca.pem"), "--gateway-listen="+gw)
	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	acquire := func(pair tls.Certificate) error {
		conn, err := grpc.NewClient(proc.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}})))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = lockdv1.NewLockServiceClient(conn).Acquire(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+ordersToken), &lockdv1.AcquireRequest{Key: "orders/1"})
		return err
	}
	if err := acquire(ordersPair); err != nil {
		t.Fatalf("orders with its certificate: %v", err)
	}
	if err := acquire(otherPair); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("orders's token with billing's certificate: %v, want UNAUTHENTICATED", err)
	}

	get := func(certs []tls.Certificate) (int, error) {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+gw+"/v1/admin/locks/orders%2F1:describe", nil)
		req.Header.Set("Authorization", "Bearer "+ordersToken)
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if code, err := get([]tls.Certificate{ordersPair}); err != nil || code != http.StatusOK {
		t.Fatalf("orders over HTTPS with its certificate: %d, %v", code, err)
	}
	if code, err := get([]tls.Certificate{otherPair}); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("orders's token over HTTPS with billing's certificate: %d, %v; want 401", code, err)
	}
	if _, err := get(nil); err == nil {
		t.Fatal("an HTTPS client without a certificate got an answer")
	}
	waitForLog(t, proc, "failed TLS handshakes")
	if n, err := proc.proc.Metric(ctx, "lockd_tls_handshake_failures_total"); err != nil || n == 0 {
		t.Fatalf("lockd_tls_handshake_failures_total = %v, %v; want the gateway's failed handshake counted", n, err)
	}
}
