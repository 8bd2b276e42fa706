//go:build unix

// Package deploy holds lockd's operator kit: Prometheus alert rules
// (prometheus/lockd-alerts.yml, with promtool unit tests beside them) and a
// Grafana dashboard (grafana/lockd-dashboard.json). This test checks them
// against a real lockd: every metric they use is one lockd exports, and every
// dashboard query is valid PromQL.
package deploy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

const (
	rulesFile     = "prometheus/lockd-alerts.yml"
	dashboardFile = "grafana/lockd-dashboard.json"
	kitToken      = "kit-token-0123456789abcdef"
)

// metricName matches the metric names the kit may use: lockd's own, the
// Redis pool's, the gRPC calls', and the Go runtime's and process's.
var metricName = regexp.MustCompile(`\b(?:lockd|db_client|rpc_server|process|go)_[a-zA-Z0-9_]+`)

// quoted matches PromQL string literals, whose text names no metric.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// ruleExprs returns the expression of every alert in the rules file.
func ruleExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	return out
}

// dashboardExprs returns every query of the dashboard, named by its panel.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			out[fmt.Sprintf("panel %q query %s", p.Title, q.RefID)] = q.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
	return out
}

// metricsIn lists the metric names an expression reads.
func metricsIn(expr string) []string {
	return metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
}

// TestDashboardQueriesAreValidPromQL has promtool parse every dashboard
// query (as a recording rule, Grafana's variables given plain values).
func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	t.Parallel()
	promtool := promtoolBinary(t)
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$instance", ".*")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	names := map[string]string{}
	exprs := dashboardExprs(t)
	for _, what := range slices.Sorted(maps.Keys(exprs)) {
		name := fmt.Sprintf("dashboard:query_%d", len(rules))
		names[name] = what
		rules = append(rules, rule{Record: name, Expr: grafanaVars.Replace(exprs[what])})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool finds invalid dashboard queries (%v):\n%s\nqueries: %v", err, out, names)
	}
}

// promtoolBinary finds promtool or fails: `make test` installs it.
func promtoolBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run `make test`, which installs Debian's prometheus package")
	}
	return p
}

// TestKitUsesOnlyExportedMetrics runs lockd on real Redis with an app on a
// fake WeChat upstream, TLS and bearer tokens, exercises it so that every
// series exists (grants, waits, holds, KeepAlive, a token minted after an
// upstream error, a refused token, a failed TLS handshake), and checks that
// each metric the alert rules and the dashboard read is on /metrics. Then it
// has Redis lose its data and stop, and sees lockd_lock_data_loss_total and
// lockd_serving report it, as LockdRedisDataLoss and LockdNotServing expect.
func TestKitUsesOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srv := redistest.Start(t)
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx-kit": "kit-secret"}})
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	certFile, keyFile, roots := selfSigned(t, dir)
	config := filepath.Join(dir, "lockd.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apps:
  - {name: mp, provider: wechat, appid: wx-kit, secret_env: MP_SECRET, api_base: %q}
auth:
  clients:
    - {name: kit, token_env: KIT_TOKEN, locks: ["kit/"], apps: [mp]}
`, fake.URL())), 0o600); err != nil {
		t.Fatal(err)
	}
	p := lockdtest.Start(t, lockdtest.Options{
		Env:  []string{"MP_SECRET=kit-secret", "KIT_TOKEN=" + kitToken},
		Args: []string{"--redis=" + srv.Addr(), "--config=" + config, "--tls-cert=" + certFile, "--tls-key=" + keyFile},
	})

	exercise(ctx, t, p, fake, roots)

	exported := scrape(ctx, t, p.HTTP)
	used := map[string][]string{}
	for what, expr := range ruleExprs(t) {
		for _, m := range metricsIn(expr) {
			used[m] = append(used[m], what)
		}
	}
	for what, expr := range dashboardExprs(t) {
		for _, m := range metricsIn(expr) {
			used[m] = append(used[m], what)
		}
	}
	if len(used) < 10 {
		t.Fatalf("only %d metric names found in the kit: %v", len(used), used)
	}
	var missing []string
	for m, by := range used {
		if !exported[m] {
			sort.Strings(by)
			missing = append(missing, fmt.Sprintf("%s (used by %s)", m, strings.Join(by, ", ")))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("lockd does not export metrics the kit uses:\n  %s", strings.Join(missing, "\n  "))
	}

	// Redis comes back empty: the engine learns its data is gone.
	srv.Restart(t)
	waitMetric(ctx, t, p, "lockd_lock_data_loss_total", func(v float64) bool { return v >= 1 })
	// Redis goes away: the replica stops serving.
	srv.Stop()
	waitMetric(ctx, t, p, "lockd_serving", func(v float64) bool { return v == 0 })
}

// exercise makes the calls after which every series of the kit exists.
func exercise(ctx context.Context, t *testing.T, p *lockdtest.Process, fake *wechatfake.Server, roots *x509.CertPool) {
	t.Helper()
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	locks, tokens := lockdv1.NewLockServiceClient(conn), lockdv1.NewTokenServiceClient(conn)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+kitToken)

	// Refused: no token (lockd_auth_failures_total).
	if _, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: "kit/a"}); err == nil {
		t.Fatal("Acquire without a bearer token succeeded")
	}
	// Grants, a wait that ends without the lock, a KeepAlive, a release.
	got, err := locks.Acquire(authed, &lockdv1.AcquireRequest{Key: "kit/a", Ttl: durationpb.New(10 * time.Second)})
	if err != nil || !got.GetAcquired() {
		t.Fatalf("Acquire: %v %v", got, err)
	}
	busy, err := locks.Acquire(authed, &lockdv1.AcquireRequest{Key: "kit/a", WaitTimeout: durationpb.New(50 * time.Millisecond)})
	if err != nil || busy.GetAcquired() {
		t.Fatalf("Acquire of a held key: %v %v", busy, err)
	}
	kctx, kcancel := context.WithCancel(authed)
	stream, err := locks.KeepAlive(kctx, &lockdv1.KeepAliveRequest{Key: "kit/a", LeaseId: got.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	kcancel()
	if _, err := locks.Release(authed, &lockdv1.ReleaseRequest{Key: "kit/a", LeaseId: got.GetLease().GetLeaseId()}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A token minted after the upstream failed once (lockd_token_*).
	fake.FailNext(1, -1)
	for {
		if _, err := tokens.GetAccessToken(authed, &lockdv1.GetAccessTokenRequest{App: "mp"}); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("GetAccessToken: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A TLS handshake that fails: a client speaking plaintext.
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	_, _ = bufio.NewReader(c).ReadByte()
	_ = c.Close()
	waitMetric(ctx, t, p, "lockd_tls_handshake_failures_total", func(v float64) bool { return v >= 1 })
	waitMetric(ctx, t, p, "lockd_token_upstream_errors_total", func(v float64) bool { return v >= 1 })
}

// scrape returns the names of the samples on /metrics (a histogram's as
// name_bucket, name_sum and name_count).
func scrape(ctx context.Context, t *testing.T, addr string) map[string]bool {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// waitMetric polls a metric's sum over its series until ok holds.
func waitMetric(ctx context.Context, t *testing.T, p *lockdtest.Process, name string, ok func(float64) bool) {
	t.Helper()
	for {
		v, err := p.Metric(ctx, name)
		if err == nil && ok(v) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never reached the expected value (last %v, %v)", name, v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns them with a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockd kit test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}
