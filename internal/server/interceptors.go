package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/service"
)

// interceptors log each call's end (quietly for expected outcomes), turn a
// panic into INTERNAL without taking the server down, refuse malformed
// requests (not protobuf, strings of invalid UTF-8) and then check bearer
// tokens and ACLs when authn is set: a malformed request is
// INVALID_ARGUMENT whoever sends it.
func interceptors(log *slog.Logger, authn *auth.Authenticator) []grpc.ServerOption {
	recoverOpts := []recovery.Option{
		recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
			log.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
			return status.Error(codes.Internal, "internal error")
		}),
	}
	calls := &callLog{log: log, warn: newSampler(warnInterval)}
	unary := []grpc.UnaryServerInterceptor{
		logUnary(calls),
		recovery.UnaryServerInterceptor(recoverOpts...),
		service.UnaryInterceptor,
	}
	stream := []grpc.StreamServerInterceptor{
		logStream(calls),
		recovery.StreamServerInterceptor(recoverOpts...),
		service.StreamInterceptor,
	}
	if authn != nil {
		unary = append(unary, authn.UnaryInterceptor())
		stream = append(stream, authn.StreamInterceptor())
	}
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(service.Codec()),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
}

// The call log is written here rather than by go-grpc-middleware's logging
// interceptor: that one builds every field of every call before the level
// is known, and most calls end OK and log at DEBUG, which production does
// not write. Benchmarks put that waste at about a twentieth of lockd's CPU
// per lock call; here a call whose level is off costs one Enabled check.

func logUnary(calls *callLog) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		calls.finished(ctx, info.FullMethod, "unary", start, err)
		return resp, err
	}
}

func logStream(calls *callLog) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		calls.finished(ss.Context(), info.FullMethod, "server_stream", start, err)
		return err
	}
}

// callLog logs finished calls. Those that end at WARN (a limit reached,
// Redis unavailable) are outcomes any caller can bring about as fast as
// lockd answers, so they are sampled: the first of a kind (method, code
// and client) in full at once, then at most one per warnInterval, telling
// how many like it were not logged. Metrics count every call.
type callLog struct {
	log  *slog.Logger
	warn *sampler
}

// warnInterval is how often, at most, a kind of WARN call outcome is
// logged.
const warnInterval = 10 * time.Second

// finished logs one finished call at the level its code deserves.
func (c *callLog) finished(ctx context.Context, method, kind string, start time.Time, err error) {
	code := status.Code(err)
	lvl := codeToLevel(code)
	if !c.log.Enabled(ctx, lvl) {
		return
	}
	var skipped int
	if lvl == slog.LevelWarn {
		client, _ := auth.ClientName(ctx)
		var ok bool
		if ok, skipped = c.warn.allow(method+" "+code.String()+" "+client, time.Now()); !ok {
			return
		}
	}
	attrs := []slog.Attr{
		slog.String("grpc.method", method),
		slog.String("grpc.kind", kind),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	if skipped > 0 {
		attrs = append(attrs, slog.Int("similar_calls_not_logged", skipped))
	}
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", status.Convert(err).Message()))
		// What the caller was told only in general terms (Redis's
		// address and network error), for the operator.
		if cause := service.Cause(err); cause != nil {
			attrs = append(attrs, slog.String("err", cause.Error()))
		}
	}
	c.log.LogAttrs(ctx, lvl, "finished call", attrs...)
}

func codeToLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.Canceled, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition,
		codes.DeadlineExceeded, codes.Unauthenticated, codes.PermissionDenied, codes.AlreadyExists:
		return slog.LevelDebug
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// sampler lets through the first event of each kind at once, then at most
// one per interval, counting those it holds back. Kinds are bounded by
// what names them (methods, codes, configured clients).
type sampler struct {
	interval time.Duration
	mu       sync.Mutex
	kinds    map[string]*sampled
}

type sampled struct {
	last    time.Time
	skipped int
}

func newSampler(interval time.Duration) *sampler {
	return &sampler{interval: interval, kinds: map[string]*sampled{}}
}

// allow reports whether an event of kind at now is let through and, if it
// is, how many of its kind were held back since the last let through.
func (s *sampler) allow(kind string, now time.Time) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kinds[kind]
	if !ok {
		s.kinds[kind] = &sampled{last: now}
		return true, 0
	}
	if now.Sub(k.last) < s.interval {
		k.skipped++
		return false, 0
	}
	skipped := k.skipped
	k.last, k.skipped = now, 0
	return true, skipped
}
