package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// These are bounded load tests against a real lockd: callers without a
// token (or one team) open many connections, idle or sending slowly, and
// the test judges whether authorized clients (and probes) are served
// meanwhile, each within a deadline of its own as a real client has.

const (
	floodOrdersToken = "orders-flood-bearer-0123456789"
	floodShopToken   = "shop-flood-bearer-0123456789ab"
	// floodConns is how many connections the flood keeps open: far more
	// than the places it is tried against (--max-connections=50 and
	// --max-pending-connections=20).
	floodConns = 300
	// probes is how many authorized calls are tried during a flood.
	probes = 12
	// probeDeadline is each probe's own deadline: generous, since the
	// flood itself loads the machine the test runs on; locked out, a probe
	// never gets in, however long it waits.
	probeDeadline = 10 * time.Second
)

// multiTeam starts lockd with auth for two teams (orders and shop, no
// limits of their own), small connection bounds, and the gateway.
func multiTeam(t *testing.T, args ...string) *process {
	t.Helper()
	srv := redistest.Start(t)
	cfgPath := filepath.Join(t.TempDir(), "lockd.yaml")
	cfg := `auth:
  clients:
    - {name: orders, token_env: ORDERS_TOKEN, locks: ["orders/"]}
    - {name: shop, token_env: SHOP_TOKEN, locks: ["shop/"]}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--redis=" + srv.Addr(), "--config=" + cfgPath, "--gateway-listen=" + freeAddr(t),
		"--max-connections=50", "--max-pending-connections=20"}
	return startLockd(t, []string{"ORDERS_TOKEN=" + floodOrdersToken, "SHOP_TOKEN=" + floodShopToken}, append(base, args...)...)
}

// gatewayAddr is the gateway address a multiTeam process was given.
func gatewayAddr(p *process) string {
	for _, a := range p.proc.Cmd.Args {
		if v, ok := strings.CutPrefix(a, "--gateway-listen="); ok {
			return v
		}
	}
	return ""
}

// flood opens n connections to addr, from the loopback source addresses
// given (in turn), each doing what open does once connected; with redial,
// whenever lockd closes one, it is opened again, until the test ends.
func flood(t *testing.T, addr string, n int, sources []string, redial bool, open func(net.Conn)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	ready := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(sources[i%len(sources)])}}
			first := true
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				open(c)
				if first {
					ready <- struct{}{}
					first = false
				}
				stop := context.AfterFunc(ctx, func() { _ = c.Close() })
				_, _ = io.Copy(io.Discard, c) // until lockd closes it
				stop()
				_ = c.Close()
				if !redial {
					return
				}
			}
		}()
	}
	for range n {
		<-ready
	}
}

// sources are loopback addresses a flood comes from: one, as in a flood
// from one host, or many.
var (
	oneSource   = []string{"127.0.0.1"}
	manySources = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}
)

// grpcProbes makes probes Acquire calls as orders, each on a connection
// of its own, and returns how many were served.
func grpcProbes(t *testing.T, addr string) int {
	t.Helper()
	served := 0
	for i := range probes {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+floodOrdersToken)
		res, err := lockdv1.NewLockServiceClient(conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: fmt.Sprintf("orders/probe-%d", i), Ttl: durationpb.New(time.Second)})
		cancel()
		_ = conn.Close()
		if err == nil && res.GetAcquired() {
			served++
		} else {
			t.Logf("probe %d: %v", i, err)
		}
	}
	return served
}

// TestConnectionsWithoutATokenCannotLockClientsOut: 300 connections
// without a token (idle sockets; HTTP/2 connections whose only call, with
// no token, is refused), from the clients' own address and from many
// others (reopened as fast as lockd closes them), against
// --max-connections=50 and --max-pending-connections=20: every authorized
// call is served, and lockd counts and logs what it closed.
func TestConnectionsWithoutATokenCannotLockClientsOut(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		sources []string
		redial  bool
		open    func(net.Conn)
	}{
		{"idle sockets from the clients' own address", oneSource, false, func(net.Conn) {}},
		{"idle sockets from many addresses, reopened as they close", manySources, true, func(net.Conn) {}},
		{"calls without a token from many addresses, reopened as they close", manySources, true, unauthenticatedCall},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := multiTeam(t)
			flood(t, p.addr, floodConns, tt.sources, tt.redial, tt.open)
			if served := grpcProbes(t, p.addr); served != probes {
				t.Errorf("%d of %d authorized calls served during the flood, want all", served, probes)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if n, err := p.proc.Metric(ctx, "lockd_connections_refused_total"); err != nil || n == 0 {
				t.Errorf("lockd_connections_refused_total = %v, %v; want the closed connections counted", n, err)
			}
			waitForLog(t, p, "connections refused or closed")
		})
	}
}

// unauthenticatedCall speaks HTTP/2 on c and makes one lock call without a
// token, which lockd refuses; the connection stays open.
func unauthenticatedCall(c net.Conn) {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return
	}
	fr := http2.NewFramer(c, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: grpcHeaders("/lockd.v1.LockService/Acquire"), EndHeaders: true})
}

// grpcHeaders is the HPACK block of a gRPC call's request headers.
func grpcHeaders(method string) []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "lockd"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	return hb.Bytes()
}

// waitForLog waits until p's log has a line holding s.
func waitForLog(t *testing.T, p *process, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("lockd never logged %q", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slowHeaders sends the start of an HTTP request and never its end.
func slowHeaders(path string) func(net.Conn) {
	return func(c net.Conn) {
		_, _ = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", path)
	}
}

// httpProbes makes probes requests of path on addr (with the bearer
// token, if any), each on a connection of its own, and returns how many
// were answered with want.
func httpProbes(t *testing.T, addr, path, token string, want int) int {
	t.Helper()
	served := 0
	for i := range probes {
		client := &http.Client{Timeout: probeDeadline, Transport: &http.Transport{DisableKeepAlives: true}}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Logf("probe %d of %s: %v", i, path, err)
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode == want {
			served++
		} else {
			t.Logf("probe %d of %s: %s", i, path, res.Status)
		}
	}
	return served
}

// TestSlowlorisKeepsNeitherProbesNorClientsOut: 300 connections sending
// their request headers slowly (reopened as they are closed), on
// the HTTP port and on the gateway: /healthz answers every probe, and the
// gateway serves every authorized call.
func TestSlowlorisKeepsNeitherProbesNorClientsOut(t *testing.T) {
	t.Parallel()
	p := multiTeam(t)
	gw := gatewayAddr(p)
	flood(t, p.http, floodConns, manySources, true, slowHeaders("/healthz"))
	flood(t, gw, floodConns, manySources, true, slowHeaders("/v1/locks/orders%2Fx:acquire"))
	if served := httpProbes(t, p.http, "/healthz", "", http.StatusOK); served != probes {
		t.Errorf("/healthz answered %d of %d probes during the slowloris, want all", served, probes)
	}
	if served := httpProbes(t, gw, "/v1/admin/locks/orders%2Fp:describe", floodOrdersToken, http.StatusOK); served != probes {
		t.Errorf("the gateway served %d of %d authorized calls during the slowloris, want all", served, probes)
	}
}

// TestOneTeamCannotFillTheGateway: shop, without limits of its own, opens
// Observe streams over the gateway (one HTTP/1.1 connection each) until
// refused: it gets at most half of --max-connections, and orders is still
// served.
func TestOneTeamCannotFillTheGateway(t *testing.T) {
	t.Parallel()
	p := multiTeam(t)
	gw := gatewayAddr(p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := 0
	for i := range 60 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/v1/elections/shop%%2Fe%d:observe", gw, i), nil)
		req.Header.Set("Authorization", "Bearer "+floodShopToken)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, ResponseHeaderTimeout: probeDeadline}}
		res, err := client.Do(req)
		if err != nil {
			t.Logf("shop's stream %d: %v", i, err)
			break
		}
		if res.StatusCode != http.StatusOK {
			_ = res.Body.Close()
			if res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("shop's stream %d refused with %s, want 429", i, res.Status)
			}
			break
		}
		defer res.Body.Close()
		opened++
	}
	if opened > 25 {
		t.Errorf("shop, without limits of its own, opened %d gateway connections of 50, want at most half", opened)
	}
	if served := httpProbes(t, gw, "/v1/admin/locks/orders%2Fp:describe", floodOrdersToken, http.StatusOK); served != probes {
		t.Errorf("orders had %d of %d calls served while shop held its share, want all", served, probes)
	}
}
