package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
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

// tlsConfig loads the files into a server TLS configuration. The
// certificate is read again when its files change (checked at most every
// few seconds), so rotated certificates are picked up without a restart.
func tlsConfig(f TLSFiles) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	kp := &keyPair{cert: f.Cert, key: f.Key}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get()
		},
	}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca: no PEM certificate in %s", f.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// keyPair caches a certificate and reloads it when its files change.
type keyPair struct {
	cert, key string

	mu      sync.Mutex
	loaded  *tls.Certificate
	stamp   [2]time.Time
	checked time.Time
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loaded != nil && time.Since(k.checked) < 5*time.Second {
		return k.loaded, nil
	}
	k.checked = time.Now()
	stamp, err := modTimes(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil // keep serving the last good pair
		}
		return nil, err
	}
	if k.loaded != nil && stamp == k.stamp {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil
		}
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	k.loaded, k.stamp = &c, stamp
	return k.loaded, nil
}

func modTimes(paths ...string) ([2]time.Time, error) {
	var out [2]time.Time
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}
