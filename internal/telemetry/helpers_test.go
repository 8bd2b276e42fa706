package telemetry

import (
	"context"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/emptypb"
)

// setup is Setup that fails the test on error and shuts down at its end.
func setup(t *testing.T, opts Options) *Telemetry {
	t.Helper()
	tel, err := Setup(t.Context(), opts)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

// pingMethod is the one method of the hand-written test service.
const pingMethod = "/lockd.telemetrytest.Pinger/Ping"

// pinger is the handler type of pingDesc.
type pinger interface {
	ping(ctx context.Context) error
}

// pingFunc is a pinger that calls itself.
type pingFunc func(ctx context.Context) error

func (f pingFunc) ping(ctx context.Context) error { return f(ctx) }

// pingDesc describes a unary Ping(Empty) returns (Empty), so that the tests
// need no generated code; the handler runs in the RPC's context, through
// the server's interceptors as generated handlers do.
var pingDesc = grpc.ServiceDesc{
	ServiceName: "lockd.telemetrytest.Pinger",
	HandlerType: (*pinger)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Ping",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			handle := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), srv.(pinger).ping(ctx) }
			if interceptor == nil {
				return handle(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: pingMethod}, handle)
		},
	}},
}

// testServer is a gRPC server built with tel's options, serving the ping
// service (running do) and health on a loopback port.
type testServer struct {
	conn *grpc.ClientConn
	gs   *grpc.Server
}

func serve(t *testing.T, tel *Telemetry, do func(ctx context.Context) error) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(tel.GRPCServerOptions()...)
	gs.RegisterService(&pingDesc, pingFunc(do))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &testServer{conn: conn, gs: gs}
}

// ping calls Ping and fails the test on error.
func (s *testServer) ping(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := s.conn.Invoke(ctx, pingMethod, new(emptypb.Empty), new(emptypb.Empty)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// checkHealth calls the health service and fails the test on error.
func (s *testServer) checkHealth(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health Check: %v", err)
	}
}

// stop closes the client and stops the server gracefully, which returns
// once every handler, and so every server-side span and measurement, has
// ended: the client may see its answer before the server's stats handler
// runs.
func (s *testServer) stop() {
	_ = s.conn.Close()
	s.gs.GracefulStop()
}

// scrape GETs the metrics handler and parses what it serves.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// labels returns a metric's labels as a map.
func labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// find returns the metric of fam with exactly the labels want, or nil.
func find(fam *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range fam.GetMetric() {
		if maps.Equal(labels(m), want) {
			return m
		}
	}
	return nil
}

// collector is an in-test OTLP/gRPC trace collector.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []received
}

// received is a span and the resource it came with.
type received struct {
	resource *resourcepb.Resource
	span     *tracepb.Span
}

// Export stores the request's spans.
func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, received{resource: rs.GetResource(), span: s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// received returns the spans collected so far.
func (c *collector) received() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.spans...)
}

// named returns the collected spans called name.
func (c *collector) named(name string) []received {
	var out []received
	for _, r := range c.received() {
		if r.span.GetName() == name {
			out = append(out, r)
		}
	}
	return out
}

// startCollector serves a collector on a loopback port and returns it with
// its plaintext endpoint URL.
func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return c, "http://" + lis.Addr().String()
}

// resourceAttr returns a string attribute of a resource.
func resourceAttr(r *resourcepb.Resource, key string) string {
	for _, kv := range r.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// hasAttr reports whether a span carries the attribute key.
func hasAttr(s *tracepb.Span, key string) bool {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return true
		}
	}
	return false
}
