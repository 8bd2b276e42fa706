package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// TestGatewayTLS runs the HTTP/JSON gateway beside a gRPC listener with
// mTLS: the gateway serves HTTPS (HTTP/2) with the same certificate and
// requires client certificates from the same CA, while gRPC clients are
// unaffected by the gateway's in-process connection.
func TestGatewayTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serverCert, serverKey, _ := p.issue(t, "lockd", true, false)
	_, _, clientPair := p.issue(t, "http-client", false, false)
	_, _, foreignPair := p.issue(t, "stranger", false, true)
	gateway := freeAddr(t)
	proc := startLockd(t, nil, "--gateway-listen="+gateway,
		"--tls-cert="+serverCert, "--tls-key="+serverKey, "--tls-client-ca="+filepath.Join(p.dir, "ca.pem"))

	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	client := func(cert *tls.Certificate) *http.Client {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	}
	acquire := func(c *http.Client, key string) (*http.Response, string, error) {
		res, err := c.Post("https://"+gateway+"/v1/locks/"+key+":acquire", "application/json", strings.NewReader(`{"owner":"https"}`))
		if err != nil {
			return nil, "", err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return res, string(body), err
	}

	res, body, err := acquire(client(&clientPair), "tls/https")
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(body, `"acquired":true`) {
		t.Fatalf("HTTPS acquire with a client certificate: %v %v %s", res, err, body)
	}
	if res.ProtoMajor != 2 {
		t.Errorf("served over %s, want HTTP/2", res.Proto)
	}
	for name, c := range map[string]*http.Client{"no client certificate": client(nil), "a self-signed client certificate": client(&foreignPair)} {
		if res, _, err := acquire(c, "tls/refused"); err == nil {
			t.Errorf("%s: HTTP %d, want the TLS handshake refused", name, res.StatusCode)
		}
	}
	plain, err := http.Post("http://"+gateway+"/v1/locks/tls/plain:acquire", "application/json", nil)
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Error("plaintext HTTP served on the TLS gateway")
		}
	}

	conn, err := grpc.NewClient(proc.addr, grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientPair}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	got, err := lockdv1.NewLockServiceClient(conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: "tls/https", Owner: "https"})
	if err != nil || !got.GetAcquired() || got.GetLease().GetHoldCount() != 2 {
		t.Fatalf("gRPC over mTLS re-entering the HTTPS lease: %v %v", got, err)
	}
}
