package telemetry

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestCallMetricsMatchOtelgrpc sends the same calls, ending with every
// kind of status, to a server measured by lockd's lean interceptors and
// to one measured by otelgrpc's stats handler: both must serve the same
// rpc_server_call_duration_seconds family, with the same help, unit,
// buckets, label sets and counts, and neither may measure health checks.
func TestCallMetricsMatchOtelgrpc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lean := setup(t, Options{})
	if lean.calls == nil {
		t.Fatal("without trace export calls are not measured by callMetrics")
	}
	full := setup(t, Options{})
	full.calls = nil
	full.grpcStats = otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(full.tp), otelgrpc.WithMeterProvider(full.mp), otelgrpc.WithPropagators(full.propagator),
		otelgrpc.WithFilter(filters.None(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection."))))

	outcomes := []codes.Code{codes.OK, codes.OK, codes.NotFound, codes.Unavailable, codes.Internal, codes.InvalidArgument,
		codes.DeadlineExceeded, codes.ResourceExhausted, codes.Code(42)}
	families := map[string]*dto.MetricFamily{}
	for name, tel := range map[string]*Telemetry{"lean": lean, "otelgrpc": full} {
		var n atomic.Int64
		srv := serve(t, tel, func(context.Context) error {
			c := outcomes[int(n.Add(1)-1)%len(outcomes)]
			if c == codes.OK {
				return nil
			}
			return status.Error(c, "as asked")
		})
		for range outcomes {
			_ = srv.conn.Invoke(ctx, pingMethod, new(emptypb.Empty), new(emptypb.Empty))
		}
		_ = srv.conn.Invoke(ctx, "/lockd.telemetrytest.Pinger/Missing", new(emptypb.Empty), new(emptypb.Empty))
		_ = srv.conn.Invoke(ctx, "no-slash", new(emptypb.Empty), new(emptypb.Empty))
		srv.checkHealth(t, ctx)
		srv.stop()
		fam, ok := scrape(t, tel.MetricsHandler())["rpc_server_call_duration_seconds"]
		if !ok {
			t.Fatalf("%s: no rpc_server_call_duration_seconds", name)
		}
		families[name] = fam
	}
	got, want := describe(families["lean"]), describe(families["otelgrpc"])
	if got != want {
		t.Fatalf("lean handler's series:\n%s\notelgrpc's:\n%s", got, want)
	}
	if strings.Contains(got, "grpc.health.v1") {
		t.Fatalf("a health check was measured:\n%s", got)
	}
	for _, code := range []string{"NOT_FOUND", "UNAVAILABLE", "CODE(42)"} {
		if !strings.Contains(got, code) {
			t.Errorf("no series for %s:\n%s", code, got)
		}
	}
}

// describe prints a histogram family's help, type and, per label set, the
// count and bucket bounds, in a stable order.
func describe(fam *dto.MetricFamily) string {
	lines := []string{fmt.Sprintf("help=%q type=%v", fam.GetHelp(), fam.GetType())}
	var series []string
	for _, m := range fam.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(ls)
		var bounds []string
		for _, b := range m.GetHistogram().GetBucket() {
			bounds = append(bounds, fmt.Sprint(b.GetUpperBound()))
		}
		series = append(series, fmt.Sprintf("{%s} count=%d buckets=%s", strings.Join(ls, ","), m.GetHistogram().GetSampleCount(), strings.Join(bounds, ",")))
	}
	sort.Strings(series)
	return strings.Join(append(lines, series...), "\n")
}
