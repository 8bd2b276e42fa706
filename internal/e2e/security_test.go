package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// pki is a test CA and the certificates it signs.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), caCert: cert, caKey: key}
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for name (a server when server is true, else a
// client) and returns its cert and key files. signer nil self-signs.
func (p *pki) issue(t *testing.T, name string, server bool, selfSigned bool) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	parent, signer := p.caCert, any(p.caKey)
	if selfSigned {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = p.write(t, name+".pem", "CERTIFICATE", der)
	keyFile = p.write(t, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// TestAuthMTLSAndMetrics runs lockd with mTLS, bearer-token auth and a
// token app: only clients with a certificate from the configured CA get a
// TLS session, only known bearer tokens get in, each only to its key
// prefixes and apps; health stays open; no token reaches the logs; and
// /metrics shows the promised series after traffic.
func TestAuthMTLSAndMetrics(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serverCert, serverKey, _ := p.issue(t, "lockd", true, false)
	_, _, clientPair := p.issue(t, "orders-client", false, false)
	_, _, foreignPair := p.issue(t, "stranger", false, true)

	fake := newFake(t, wechatfake.Options{})
	srv := redistest.Start(t)
	const ordersToken, opsToken = "orders-bearer-0123456789", "ops-bearer-9876543210"
	cfgPath := filepath.Join(t.TempDir(), "lockd.yaml")
	cfg := fmt.Sprintf(`apps:
  - {name: mp, provider: wechat, appid: wx-classic, secret_env: CLASSIC_SECRET, api_base: %q}
auth:
  clients:
    - {name: orders, token_env: ORDERS_TOKEN, locks: ["orders/"], apps: ["mp"]}
    - {name: ops, token_env: OPS_TOKEN, locks: [""]}
`, fake.URL())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := startLockd(t, []string{"CLASSIC_SECRET=" + classicSecret, "ORDERS_TOKEN=" + ordersToken, "OPS_TOKEN=" + opsToken},
		"--redis="+srv.Addr(), "--config="+cfgPath,
		"--tls-cert="+serverCert, "--tls-key="+serverKey, "--tls-client-ca="+filepath.Join(p.dir, "ca.pem"))

	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	dial := func(opt grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient(proc.addr, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	withCert := func(c *tls.Certificate) grpc.DialOption {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if c != nil {
			tc.Certificates = []tls.Certificate{*c}
		}
		return grpc.WithTransportCredentials(credentials.NewTLS(tc))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bearer := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(bearer(ordersToken), 3*time.Second)
	}

	// No TLS session without a certificate from the CA.
	for name, opt := range map[string]grpc.DialOption{
		"plaintext":                        grpc.WithTransportCredentials(insecure.NewCredentials()),
		"TLS without a client certificate": withCert(nil),
		"a self-signed client certificate": withCert(&foreignPair),
	} {
		c, stop := short()
		_, err := lockdv1.NewLockServiceClient(dial(opt)).Acquire(c, &lockdv1.AcquireRequest{Key: "orders/1"})
		stop()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want the connection refused (UNAVAILABLE)", name, err)
		}
	}

	conn := dial(withCert(&clientPair))
	locks, tokens := lockdv1.NewLockServiceClient(conn), lockdv1.NewTokenServiceClient(conn)
	checks := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"no bearer token", func() error { _, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: "orders/1"}); return err }(), codes.Unauthenticated},
		{"a wrong bearer token", func() error {
			_, err := locks.Acquire(bearer("not-a-known-token-at-all"), &lockdv1.AcquireRequest{Key: "orders/1"})
			return err
		}(), codes.Unauthenticated},
		{"a key under the prefix", func() error {
			_, err := locks.Acquire(bearer(ordersToken), &lockdv1.AcquireRequest{Key: "orders/1"})
			return err
		}(), codes.OK},
		{"a key outside the prefix", func() error {
			_, err := locks.Acquire(bearer(ordersToken), &lockdv1.AcquireRequest{Key: "billing/1"})
			return err
		}(), codes.PermissionDenied},
		{"a listed app", func() error {
			_, err := tokens.GetAccessToken(bearer(ordersToken), &lockdv1.GetAccessTokenRequest{App: "mp"})
			return err
		}(), codes.OK},
		{"an app not listed for the client", func() error {
			_, err := tokens.GetAccessToken(bearer(opsToken), &lockdv1.GetAccessTokenRequest{App: "mp"})
			return err
		}(), codes.PermissionDenied},
		{"health without a token", func() error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}(), codes.OK},
	}
	for _, c := range checks {
		if got := status.Code(c.err); got != c.want {
			t.Errorf("%s: %v (%v), want %v", c.name, got, c.err, c.want)
		}
	}

	// A wait that times out and a release feed the lock histograms.
	res, err := locks.Acquire(bearer(opsToken), &lockdv1.AcquireRequest{Key: "metrics/1"})
	if err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}
	if _, err := locks.Release(bearer(opsToken), &lockdv1.ReleaseRequest{Key: "metrics/1", LeaseId: res.GetLease().GetLeaseId()}); err != nil {
		t.Fatal(err)
	}

	body := get(t, "http://"+proc.http+"/metrics")
	for _, series := range []string{
		"rpc_server_", "lockd_lock_grants_total", "lockd_lock_wait_seconds_bucket", "lockd_lock_hold_seconds_bucket",
		"lockd_lock_lost_total", "lockd_keepalive_streams", `lockd_token_mints_total{app="mp"}`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	for _, secret := range []string{ordersToken, opsToken, classicSecret} {
		if strings.Contains(proc.logs.String(), secret) || strings.Contains(body, secret) {
			t.Errorf("a secret appears in the logs or metrics")
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
