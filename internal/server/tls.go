package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/lockd/lockd/internal/telemetry"
)

// TLSFiles names the certificate files of the gRPC listener.
type TLSFiles struct {
	// Cert and Key are the server's certificate chain and private key (PEM).
	Cert, Key string
	// ClientCA, when set, turns on mutual TLS: clients must present a
	// certificate signed by one of these CAs (PEM).
	ClientCA string
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// tlsRecheck is how often, at most, the files are checked for changes.
const tlsRecheck = 2 * time.Second

// tlsEvents are told about TLS trouble; both fields may be nil.
type tlsEvents struct {
	log *slog.Logger
	// reloadFailed is told the file ("cert", "key" or "client_ca") of a
	// change that could not be loaded.
	reloadFailed func(file string)
}

// tlsState is the listener's TLS configuration and the files behind it.
type tlsState struct {
	config *tls.Config
	cert   *watched[*tls.Certificate]
	ca     *watched[*x509.CertPool] // nil without mTLS
}

// expiry tells when the served certificate expires.
func (s *tlsState) expiry() (time.Time, bool) {
	c, err := s.cert.get()
	if err != nil || c.Leaf == nil {
		return time.Time{}, false
	}
	return c.Leaf.NotAfter, true
}

// watch checks the files every tlsRecheck until ctx ends, so that a change
// is taken up, or reported when it does not load, even while no client
// connects.
func (s *tlsState) watch(ctx context.Context) {
	tick := time.NewTicker(tlsRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_, _ = s.cert.get()
			if s.ca != nil {
				_, _ = s.ca.get()
			}
		}
	}
}

// newTLS loads the files into a server TLS configuration. The
// certificate, its key and the client CA are read again when their files
// change (checked at most every tlsRecheck), so rotation needs no restart;
// a change that does not load is logged and counted through ev, and the
// last good files stay in use.
func newTLS(f TLSFiles, ev tlsEvents) (*tlsState, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if ev.log == nil {
		ev.log = slog.New(slog.DiscardHandler)
	}
	if ev.reloadFailed == nil {
		ev.reloadFailed = func(string) {}
	}
	kp := &watched[*tls.Certificate]{paths: []string{f.Cert, f.Key}, name: "cert", flag: "--tls-cert/--tls-key", ev: ev, load: loadKeyPair}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get()
		},
	}
	state := &tlsState{config: base, cert: kp}
	if f.ClientCA == "" {
		return state, nil
	}
	ca := &watched[*x509.CertPool]{paths: []string{f.ClientCA}, name: "client_ca", flag: "--tls-client-ca", ev: ev, load: loadCAs}
	if _, err := ca.get(); err != nil {
		return nil, err
	}
	state.ca = ca
	base.ClientAuth = tls.RequireAndVerifyClientCert
	// Each handshake gets the client CAs in force at the time.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := ca.get()
		if err != nil {
			return nil, err
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		return c, nil
	}
	pool, _ := ca.get()
	base.ClientCAs = pool
	return state, nil
}

func loadKeyPair(paths []string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(paths[0], paths[1])
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func loadCAs(paths []string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(paths[0])
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", paths[0])
	}
	return pool, nil
}

// watched caches what load makes of some files and loads it again when
// their modification times change.
type watched[T any] struct {
	paths []string
	name  string // for metrics
	flag  string // for messages
	ev    tlsEvents
	load  func([]string) (T, error)

	mu      sync.Mutex
	loaded  T
	ok      bool
	stamp   []time.Time
	failure string // the failure last reported, so each is reported once
	checked time.Time
}

func (w *watched[T]) get() (T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ok && time.Since(w.checked) < tlsRecheck {
		return w.loaded, nil
	}
	w.checked = time.Now()
	stamp, err := modTimes(w.paths)
	if err == nil && w.ok && equalTimes(stamp, w.stamp) {
		return w.loaded, nil
	}
	var v T
	if err == nil {
		v, err = w.load(w.paths)
	}
	if err != nil {
		if !w.ok {
			var zero T
			return zero, fmt.Errorf("%s: %w", w.flag, err)
		}
		// Keep serving the last good files; report each failure once.
		if failure := fmt.Sprint(stamp, err); failure != w.failure {
			w.failure = failure
			w.ev.log.Error("TLS files changed but could not be loaded; still serving the previous ones", "files", w.flag, "err", err)
			w.ev.reloadFailed(w.name)
		}
		return w.loaded, nil
	}
	if w.ok {
		w.ev.log.Info("TLS files reloaded", "files", w.flag)
	}
	w.loaded, w.ok, w.stamp, w.failure = v, true, stamp, ""
	return w.loaded, nil
}

func modTimes(paths []string) ([]time.Time, error) {
	out := make([]time.Time, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// observedCreds are gRPC transport credentials that log (at most once per
// logEvery, with the count since) and count failed handshakes, telling a
// client certificate that is missing or not trusted from other failures.
type observedCreds struct {
	credentials.TransportCredentials
	log    *slog.Logger
	failed func(reason string)
	sum    *summary
}

func newObservedCreds(c credentials.TransportCredentials, log *slog.Logger, failed func(string), sum *summary) credentials.TransportCredentials {
	return &observedCreds{TransportCredentials: c, log: log, failed: failed, sum: sum}
}

func (c *observedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		reason := handshakeReason(err)
		c.failed(reason)
		c.sum.add(reason)
		c.log.Debug("TLS handshake failed", "peer.address", conn.RemoteAddr().String(), "reason", reason, "err", err)
	}
	return out, info, err
}

func (c *observedCreds) Clone() credentials.TransportCredentials {
	return &observedCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log, failed: c.failed, sum: c.sum}
}

// handshakeReason classifies a failed handshake: client_certificate when
// the client sent no certificate or one lockd does not trust, other
// otherwise (plaintext, wrong protocol, timeouts, closed connections).
func handshakeReason(err error) string {
	var (
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		verify  *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &verify):
		return "client_certificate"
	}
	// crypto/tls has no typed error for a missing client certificate.
	if msg := err.Error(); strings.Contains(msg, "client didn't provide a certificate") || strings.Contains(msg, "bad certificate") {
		return "client_certificate"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "other"
}

// handshakes counts and logs (as a summary per interval) failed TLS
// handshakes, of gRPC connections (observedCreds) and the gateway's.
type handshakes struct {
	sum     *summary
	metrics *telemetry.SecurityMetrics
}

func newHandshakes(ctx context.Context, log *slog.Logger, metrics *telemetry.SecurityMetrics) *handshakes {
	sum := newSummary(log, "failed TLS handshakes", 10*time.Second)
	go sum.run(ctx)
	return &handshakes{sum: sum, metrics: metrics}
}

// failed counts a failed handshake of the gateway's, for reason.
func (h *handshakes) failed(reason string) {
	h.metrics.TLSHandshakeFailed(reason)
	h.sum.add(reason)
}
