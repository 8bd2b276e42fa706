package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// Bearer tokens of the clients of authStack.
const (
	ordersToken = "orders-bearer-0123456789"
	opsToken    = "ops-bearer-9876543210abc"
	adminToken  = "admin-bearer-5555555555x"
)

// stack is a lockd serving its gateway, on its own redis-server, with one
// token app ("mp") on a fake WeChat.
type stack struct {
	base  string // http://host:port of the gateway
	redis *redistest.Server
	fake  *wechatfake.Server
	conn  *grpc.ClientConn // to lockd's gRPC listener
	logs  *logtest.Buffer
	stop  func() error // shuts lockd down as SIGTERM does; Run's error
}

type stackOptions struct {
	auth   bool
	bounds service.Bounds
	hosts  []string // GatewayHosts
	// transport, when not zero, bounds connections and streams
	transport server.Transport
}

func startStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	rs := redistest.Start(t)
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx-gw": "gw-app-secret"}})
	t.Cleanup(fake.Close)
	file := &config.Config{Apps: []config.App{{
		Name: "mp", Provider: wechat.ProviderWeChat, AppID: "wx-gw", TokenAPI: wechat.TokenAPIClassic,
		APIBase: fake.URL(), Secret: "gw-app-secret",
	}}}
	if o.auth {
		file.Auth = &config.Auth{Clients: []config.Client{
			{Name: "orders", Token: ordersToken, Locks: []string{"orders/"}, Apps: []string{"mp"}},
			{Name: "ops", Token: opsToken, Locks: []string{""}},
			{Name: "admin", Token: adminToken, Admin: true},
		}}
	}
	if o.bounds == (service.Bounds{}) {
		o.bounds = service.DefaultBounds()
	}
	logs := &logtest.Buffer{}
	started := make(chan server.Addrs, 1)
	cfg := server.Config{
		Listen: "127.0.0.1:0", GatewayListen: "127.0.0.1:0", Redis: rs.Addr(), File: file,
		Bounds: o.bounds, HealthInterval: 50 * time.Millisecond, GatewayHosts: o.hosts, Transport: o.transport,
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Started: func(a server.Addrs) { started <- a },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("lockd did not stop")
		}
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("lockd logs:\n%s", logs)
		}
	})
	var addrs server.Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		t.Fatalf("Run: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatal("lockd did not start")
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &stack{base: "http://" + addrs.Gateway, redis: rs, fake: fake, conn: conn, logs: logs, stop: stop}
}

// reply is an HTTP answer with its JSON body decoded.
type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// call sends one request (body "" sends none) with the bearer token (""
// sends none) and decodes the JSON answer.
func (s *stack) call(t *testing.T, method, path, token, body string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.send(ctx, method, path, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	r := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: %d answer is not a JSON object: %v\n%s", method, path, res.StatusCode, err, raw)
	}
	return r
}

func (s *stack) send(ctx context.Context, method, path, token, body string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// ok fails the test unless r is 200.
func (r reply) ok(t *testing.T, what string) reply {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("%s: HTTP %d, want 200: %s", what, r.status, r.raw)
	}
	return r
}

// get walks the body through the named fields ("lease", "leaseId").
func (r reply) get(fields ...string) any {
	var v any = r.body
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[f]
	}
	return v
}

func (r reply) str(fields ...string) string {
	s, _ := r.get(fields...).(string)
	return s
}

// grpcStatus returns the code and message of an error answer: a
// google.rpc.Status, at the top level for unary calls and under "error"
// for streams.
func (r reply) grpcStatus() (code int, message string) {
	st := r.body
	if e, ok := st["error"].(map[string]any); ok {
		st = e
	}
	c, _ := st["code"].(float64)
	m, _ := st["message"].(string)
	return int(c), m
}

// pathOf escapes each segment of key for a URL path, keeping its slashes.
func pathOf(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// lines reads newline-delimited JSON objects from a stream.
func lines(t *testing.T, body io.Reader) <-chan map[string]any {
	t.Helper()
	out := make(chan map[string]any)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsed": sc.Text()}
			}
			out <- m
		}
	}()
	return out
}

func next(t *testing.T, ch <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("stream ended")
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no line from the stream")
		return nil
	}
}

// bearer returns ctx carrying token for gRPC calls.
func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// eventually polls cond until it holds, failing the test after a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
