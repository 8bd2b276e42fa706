package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lockd/lockd/internal/redistest"
)

// TestClientCAReloadsAndRejectionsAreReported rotates the client CA file
// while lockd runs: clients of the new CA get in and those of the old one
// no longer do, without a restart. Rejected handshakes and a CA file that
// does not load are logged and counted (the last good CA stays in force),
// and the served certificate's expiry is exported.
func TestClientCAReloadsAndRejectionsAreReported(t *testing.T) {
	t.Parallel()
	oldCA, newCA := newPKI(t), newPKI(t)
	serverCert, serverKey, _ := oldCA.issue(t, "lockd", true, false)
	_, _, oldClient := oldCA.issue(t, "old-client", false, false)
	_, _, newClient := newCA.issue(t, "new-client", false, false)
	caPath := filepath.Join(t.TempDir(), "client-ca.pem")
	setCA := func(content []byte) {
		t.Helper()
		if err := os.WriteFile(caPath, content, 0o600); err != nil {
			t.Fatal(err)
		}
		// A new modification time, however coarse the file system's clock.
		later := time.Now().Add(time.Duration(len(content)) * time.Second)
		if err := os.Chtimes(caPath, later, later); err != nil {
			t.Fatal(err)
		}
	}
	pemOf := func(p *pki) []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.caCert.Raw}) }
	setCA(pemOf(oldCA))
	srv := redistest.Start(t)
	proc := startLockd(t, nil, "--redis="+srv.Addr(), "--tls-cert="+serverCert, "--tls-key="+serverKey, "--tls-client-ca="+caPath)

	roots := x509.NewCertPool()
	roots.AddCert(oldCA.caCert)
	check := func(c tls.Certificate) error {
		conn, err := grpc.NewClient(proc.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: roots, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12,
		})))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	metric := func(series string) float64 {
		for _, line := range strings.Split(get(t, "http://"+proc.http+"/metrics"), "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}

	if err := check(oldClient); err != nil {
		t.Fatalf("a client of the configured CA: %v", err)
	}
	if err := check(newClient); err == nil {
		t.Fatal("a client of another CA got in")
	}
	waitUntil(t, proc, "the rejected handshake to be logged and counted", func() bool {
		return metric(`lockd_tls_handshake_failures_total{reason="client_certificate"}`) >= 1 &&
			strings.Contains(proc.logs.String(), "failed TLS handshakes")
	})

	setCA(pemOf(newCA))
	waitUntil(t, proc, "the new client CA to be in force", func() bool { return check(newClient) == nil })
	if err := check(oldClient); err == nil {
		t.Fatal("a client of the replaced CA still gets in")
	}

	setCA([]byte("not a certificate\n"))
	waitUntil(t, proc, "the broken CA file to be reported", func() bool {
		return metric(`lockd_tls_reload_failures_total{file="client_ca"}`) == 1 &&
			strings.Contains(proc.logs.String(), "could not be loaded")
	})
	if err := check(newClient); err != nil {
		t.Fatalf("a client of the last good CA after a broken reload: %v", err)
	}
	cert, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metric("lockd_tls_certificate_expiry_timestamp_seconds"), float64(cert.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("certificate expiry %v, want %v", got, want)
	}
}
