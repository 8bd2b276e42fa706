package telemetry

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/lockd/lockd/internal/redistest"
)

// The caller's trace, as a W3C traceparent header.
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
	traceparent   = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

// TestTracesReachCollector makes a traced RPC whose handler runs a Redis
// command, flushes with Shutdown, and finds both spans in an in-test OTLP
// collector: the RPC's below the caller's traceparent, Redis's below the
// RPC's, and none for health checks or Redis work outside a span.
func TestTracesReachCollector(t *testing.T) {
	t.Parallel()
	col, endpoint := startCollector(t)
	rdb := redistest.Start(t).Client(t)
	tel := setup(t, Options{ServiceName: "lockd-test", ServiceVersion: "v0.0.0-test", OTLPEndpoint: endpoint})
	if err := tel.InstrumentRedis(rdb); err != nil {
		t.Fatalf("InstrumentRedis: %v", err)
	}
	key := "telemetry:" + t.Name()
	srv := serve(t, tel, func(ctx context.Context) error {
		return rdb.Set(ctx, key, "secret-access-token", time.Minute).Err()
	})

	if err := rdb.Ping(t.Context()).Err(); err != nil { // outside any span
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", traceparent)
	srv.ping(t, ctx)
	srv.checkHealth(t, t.Context())
	srv.stop()
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	rpcs := col.named("lockd.telemetrytest.Pinger/Ping")
	if len(rpcs) != 1 {
		t.Fatalf("%d spans for the RPC, want 1; got %v", len(rpcs), names(col.received()))
	}
	rpc := rpcs[0].span
	sets := col.named("set")
	if len(sets) != 1 {
		t.Fatalf("%d spans for the Redis SET, want 1; got %v", len(sets), names(col.received()))
	}
	set := sets[0].span

	tests := []struct {
		name string
		ok   bool
	}{
		{"the RPC span is a server span", rpc.GetKind() == tracepb.Span_SPAN_KIND_SERVER},
		{"the RPC span continues the caller's trace", hex.EncodeToString(rpc.GetTraceId()) == callerTraceID},
		{"the RPC span's parent is the caller's span", hex.EncodeToString(rpc.GetParentSpanId()) == callerSpanID},
		{"the Redis span is a client span", set.GetKind() == tracepb.Span_SPAN_KIND_CLIENT},
		{"the Redis span is a child of the RPC span", string(set.GetParentSpanId()) == string(rpc.GetSpanId()) && string(set.GetTraceId()) == string(rpc.GetTraceId())},
		{"the Redis span does not carry the command's arguments", !hasAttr(set, "db.statement") && !hasAttr(set, "db.query.text")},
		{"no span is made for health checks", len(col.named("grpc.health.v1.Health/Check")) == 0},
		{"no span is made for Redis work outside a span", len(col.named("ping")) == 0},
		{"spans carry the service name", resourceAttr(rpcs[0].resource, "service.name") == "lockd-test"},
		{"spans carry the service version", resourceAttr(rpcs[0].resource, "service.version") == "v0.0.0-test"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if !tc.ok {
				t.Errorf("not so; RPC span %v, Redis span %v", rpc, set)
			}
		})
	}
}

// names lists the names of received spans, for failure messages.
func names(rs []received) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.span.GetName()
	}
	return out
}

// clearOTelEnv empties every variable that could turn trace export on or
// off, so that the test sees only what it sets. It makes the test
// non-parallel.
func clearOTelEnv(t *testing.T) {
	for _, k := range []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
	} {
		t.Setenv(k, "")
	}
}

// TestTracesFromEnvironment shows the production path: with only
// OTEL_EXPORTER_OTLP_ENDPOINT set, an RPC's span reaches the collector.
func TestTracesFromEnvironment(t *testing.T) {
	clearOTelEnv(t)
	col, endpoint := startCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	tel := setup(t, Options{})
	if tel.sdkTP == nil {
		t.Fatal("no exporter with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	srv := serve(t, tel, func(context.Context) error { return nil })
	srv.ping(t, t.Context())
	srv.stop()
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := len(col.named("lockd.telemetrytest.Pinger/Ping")); n != 1 {
		t.Fatalf("%d spans for the RPC, want 1; got %v", n, names(col.received()))
	}
}

// TestNoExporterWithoutEndpoint shows the cheap path: with no endpoint
// configured there is no exporter, spans do not record, Redis gets no
// tracing hook, and RPCs are still measured.
func TestNoExporterWithoutEndpoint(t *testing.T) {
	clearOTelEnv(t)
	tel := setup(t, Options{})
	if tel.sdkTP != nil {
		t.Fatal("an exporter was built without an endpoint")
	}
	ctx, span := tel.TracerProvider().Tracer("test").Start(t.Context(), "op")
	defer span.End()
	if span.IsRecording() {
		t.Error("a span records without an exporter")
	}
	if err := tel.InstrumentRedis(redistest.Start(t).Client(t)); err != nil {
		t.Fatalf("InstrumentRedis: %v", err)
	}
	srv := serve(t, tel, func(context.Context) error { return nil })
	srv.ping(t, ctx)
	srv.stop()
	if _, ok := scrape(t, tel.MetricsHandler())["rpc_server_call_duration_seconds"]; !ok {
		t.Error("RPCs are not measured without an exporter")
	}
}

// TestTraceConfig decides trace export from the Options endpoint and the
// environment.
func TestTraceConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		endpoint string
		env      map[string]string
		enabled  bool
		logged   string // the endpoint as logged
		protocol string
		wantErr  bool
	}{
		{name: "no endpoint anywhere leaves export off"},
		{name: "a blank endpoint variable counts as unset", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}},
		{
			name:    "OTEL_EXPORTER_OTLP_ENDPOINT turns export on",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317"},
			enabled: true, logged: "http://otel:4317",
		},
		{
			name:    "the traces endpoint alone turns export on",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces:4317"},
			enabled: true, logged: "https://traces:4317",
		},
		{
			name: "the traces endpoint is the one logged when both are set",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://otel:4317",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces:4317",
			},
			enabled: true, logged: "https://traces:4317",
		},
		{
			name:    "OTEL_TRACES_EXPORTER=none keeps export off despite an endpoint",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317", "OTEL_TRACES_EXPORTER": "none"},
			enabled: false,
		},
		{
			name:    "OTEL_SDK_DISABLED=true keeps export off despite an endpoint",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317", "OTEL_SDK_DISABLED": "true"},
			enabled: false,
		},
		{
			name:     "an Options URL turns export on with the environment empty",
			endpoint: "http://127.0.0.1:4317",
			enabled:  true, logged: "http://127.0.0.1:4317",
		},
		{
			name:     "an Options host:port turns export on",
			endpoint: "collector:4317",
			enabled:  true, logged: "collector:4317",
		},
		{
			name:     "an Options endpoint wins over OTEL_TRACES_EXPORTER=none",
			endpoint: "http://127.0.0.1:4317",
			env:      map[string]string{"OTEL_TRACES_EXPORTER": "none"},
			enabled:  true, logged: "http://127.0.0.1:4317",
		},
		{
			name:    "a password in the endpoint is not logged",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:hunter2@otel:4317"},
			enabled: true, logged: "https://user:xxxxx@otel:4317",
		},
		{
			name:    "the requested protocol is noted, to warn about",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			enabled: true, logged: "http://otel:4318", protocol: "http/protobuf",
		},
		{name: "an Options URL without a host is an error", endpoint: "http://", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := traceConfig(tc.endpoint, func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if c.enabled != tc.enabled || c.endpoint != tc.logged || c.protocol != tc.protocol {
				t.Errorf("got enabled %v endpoint %q protocol %q, want %v %q %q",
					c.enabled, c.endpoint, c.protocol, tc.enabled, tc.logged, tc.protocol)
			}
		})
	}
}
