package telemetry

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/rpcconv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// callMetrics measures gRPC calls while no trace is exported: it records
// rpc.server.call.duration as otelgrpc's server handler does (the same
// instrument, scope, buckets and attributes: rpc.method, rpc.system.name,
// rpc.response.status_code and, for the codes otelgrpc counts as server
// errors, error.type), and nothing else, as otelgrpc then records nothing
// else either. It skips what otelgrpc and gRPC spend on every call even
// so: the stats events gRPC builds for a stats handler (with a copy of the
// call's metadata), extracting the caller's trace context (another copy),
// starting a span that records nothing, and building and hashing an
// attribute set per call. It measures from interceptors, and each
// method's sets are built once per status code.
type callMetrics struct {
	duration metric.Float64Histogram
	filter   otelgrpc.Filter

	methods sync.Map // full method name -> *methodSets
	cached  atomic.Int64
}

// maxCachedMethods bounds the methods whose attribute sets are kept: gRPC
// measures calls to unknown methods too, and their names come from callers.
const maxCachedMethods = 1024

// methodSets are the attribute sets of one method's calls, by status code.
type methodSets struct {
	skip   bool                 // not measured (health checks, reflection)
	attrs  []attribute.KeyValue // rpc.method (when well formed), rpc.system.name
	byCode [codes.Unauthenticated + 1]atomic.Pointer[attribute.Set]
}

// callDurationBuckets are otelgrpc's bucket boundaries for
// rpc.server.call.duration, in seconds.
var callDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// newCallMetrics returns the handler, with otelgrpc's instrument on mp's
// meter of otelgrpc's scope, leaving out the calls filter refuses.
func newCallMetrics(mp metric.MeterProvider, filter otelgrpc.Filter) (*callMetrics, error) {
	meter := mp.Meter(otelgrpc.ScopeName, metric.WithInstrumentationVersion(otelgrpc.Version),
		metric.WithSchemaURL(semconv.SchemaURL))
	d, err := rpcconv.NewServerCallDuration(meter, metric.WithExplicitBucketBoundaries(callDurationBuckets...))
	if err != nil {
		return nil, err
	}
	return &callMetrics{duration: d.Inst(), filter: filter}, nil
}

// leanCallMetrics reports whether the environment leaves otelgrpc on the
// stable RPC conventions alone (OTEL_SEMCONV_STABILITY_OPT_IN without
// rpc/old or rpc/dup), the only ones callMetrics records.
func leanCallMetrics(getenv func(string) string) bool {
	for p := range strings.SplitSeq(getenv("OTEL_SEMCONV_STABILITY_OPT_IN"), ",") {
		if p = strings.TrimSpace(p); p == "rpc/old" || p == "rpc/dup" {
			return false
		}
	}
	return true
}

// serverOptions are the interceptors that measure every call, outermost
// in the chain. They see what a stats handler sees of a call but its
// decoding and its last write, without gRPC building the stats events
// (and copying the call's metadata) for them.
func (h *callMetrics) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(h.unary), grpc.ChainStreamInterceptor(h.stream)}
}

func (h *callMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m := h.method(info.FullMethod)
	if m.skip {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	h.record(ctx, m, start, err)
	return resp, err
}

func (h *callMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m := h.method(info.FullMethod)
	if m.skip {
		return handler(srv, ss)
	}
	start := time.Now()
	err := handler(srv, ss)
	h.record(ss.Context(), m, start, err)
	return err
}

// method returns the sets of fullMethod, cached while there are few.
func (h *callMetrics) method(fullMethod string) *methodSets {
	if m, ok := h.methods.Load(fullMethod); ok {
		return m.(*methodSets)
	}
	m := &methodSets{skip: h.filter != nil && !h.filter(&stats.RPCTagInfo{FullMethodName: fullMethod})}
	if name, ok := strings.CutPrefix(fullMethod, "/"); ok {
		m.attrs = append(m.attrs, semconv.RPCMethod(name))
	}
	m.attrs = append(m.attrs, semconv.RPCSystemNameGRPC)
	if h.cached.Load() >= maxCachedMethods {
		return m
	}
	if actual, loaded := h.methods.LoadOrStore(fullMethod, m); loaded {
		return actual.(*methodSets)
	}
	h.cached.Add(1)
	return m
}

// record records a call of m that began at start and ended with err.
func (h *callMetrics) record(ctx context.Context, m *methodSets, start time.Time, err error) {
	if !h.duration.Enabled(ctx) {
		return
	}
	elapsed := time.Since(start).Seconds()
	h.duration.Record(ctx, elapsed, metric.WithAttributeSet(*m.set(status.Code(err))))
}

// set returns the attribute set of a call of m that ended with code.
func (m *methodSets) set(code codes.Code) *attribute.Set {
	if int(code) < len(m.byCode) {
		if s := m.byCode[code].Load(); s != nil {
			return s
		}
	}
	attrs := append(append(make([]attribute.KeyValue, 0, len(m.attrs)+2), m.attrs...),
		semconv.RPCResponseStatusCode(codeName(code)))
	if serverError(code) {
		attrs = append(attrs, semconv.ErrorTypeKey.String(codeName(code)))
	}
	s := attribute.NewSet(attrs...)
	if int(code) < len(m.byCode) {
		m.byCode[code].Store(&s)
	}
	return &s
}

// serverError reports the codes otelgrpc counts as the server's errors.
func serverError(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// codeName spells a status code as otelgrpc does: "OK", "CANCELLED",
// "INVALID_ARGUMENT", …
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	}
	return "CODE(" + strconv.FormatInt(int64(c), 10) + ")"
}

// useLeanCallMetrics is leanCallMetrics on the process's environment.
func useLeanCallMetrics() bool { return leanCallMetrics(os.Getenv) }
