// Package server assembles lockd: the Redis connection (or the embedded
// store), the gRPC server with its interceptors, health and reflection, and
// the HTTP endpoints for probes.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/telemetry"
	"github.com/lockd/lockd/internal/token"
)

// Config is everything lockd is started with.
type Config struct {
	// Listen is the gRPC address.
	Listen string
	// HTTPListen serves /healthz and /readyz; empty turns it off.
	HTTPListen string
	// Redis is a redis:// or rediss:// URL, or a comma list of host:port;
	// empty runs the embedded store.
	Redis string
	// RedisCluster forces Redis Cluster for a single seed address.
	RedisCluster bool
	// RedisMaster is the Sentinel master name; Redis then lists sentinels.
	RedisMaster string
	// Reflection serves gRPC server reflection.
	Reflection bool
	// TLS names the gRPC listener's certificate files; zero serves
	// plaintext.
	TLS TLSFiles
	// Version is reported in telemetry.
	Version string
	// File is the parsed --config file: the apps whose access_tokens
	// TokenService serves, and auth. Nil means no apps (every
	// GetAccessToken is NOT_FOUND) and no auth.
	File *config.Config
	// Limits bound what callers may ask for.
	Limits service.Limits
	// ShutdownTimeout bounds the graceful drain on shutdown.
	ShutdownTimeout time.Duration
	// HealthInterval is how often Redis is pinged for health.
	HealthInterval time.Duration
	// Logger receives lockd's structured logs.
	Logger *slog.Logger
	// Started, if set, is called once lockd serves, with its addresses.
	Started func(Addrs)
}

// Addrs are the addresses lockd listens on.
type Addrs struct {
	GRPC, HTTP string
}

// serviceNames are the names health reports on, besides "".
var serviceNames = []string{lockdv1.LockService_ServiceDesc.ServiceName, lockdv1.TokenService_ServiceDesc.ServiceName}

// Run serves lockd until ctx ends, then shuts down gracefully: health turns
// NOT_SERVING, KeepAlive streams end so clients resume elsewhere, in-flight
// calls drain (bounded by ShutdownTimeout), and the server stops.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return err
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	authn, err := newAuthenticator(cfg.File)
	if err != nil {
		return err
	}
	var creds []grpc.ServerOption
	if cfg.TLS.Enabled() {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return err
		}
		creds = append(creds, grpc.Creds(credentials.NewTLS(tc)))
	}
	warnIfExposed(log, cfg.Listen, authn != nil, cfg.TLS)

	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "lockd", ServiceVersion: cfg.Version, Logger: log, Global: true})
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	defer func() { // runs last, once the server has stopped
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}()

	redis.SetLogger(redisLogger{log})
	rdb, closeStore, err := connect(cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	if err := tel.InstrumentRedis(rdb); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}

	engine := redislock.New(rdb, redislock.Options{Observer: tel.Locks()})
	defer engine.Close()
	locks := service.NewLockServer(engine, cfg.Limits, log)
	tel.RegisterKeepAliveStreams(locks.KeepAliveStreams)

	broker, err := newBroker(rdb, cfg.File, token.Options{Logger: log, Observer: tel.Tokens()})
	if err != nil {
		return err
	}
	defer broker.Close()
	tokens := service.NewTokenServer(broker, log)
	refreshCtx, stopRefresh := context.WithCancel(ctx)
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		broker.RunRefresher(refreshCtx)
	}()
	defer func() {
		stopRefresh()
		<-refreshed
	}()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	// Handlers finish their cleanup (queued writers withdrawn, holds given
	// back) before the engine and Redis close, even after a forced Stop.
	opts := append(creds, grpc.WaitForHandlers(true),
		// Reused handler goroutines keep their grown stacks: a fresh
		// goroutine per call spends a tenth of the CPU growing its stack.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	opts = append(opts, tel.GRPCServerOptions()...)
	gs := grpc.NewServer(append(opts, interceptors(log, authn)...)...)
	lockdv1.RegisterLockServiceServer(gs, locks)
	lockdv1.RegisterTokenServiceServer(gs, tokens)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	if cfg.Reflection {
		reflection.Register(gs)
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchHealth(watchCtx, hs, engine.Ping, cfg.HealthInterval, log)

	addrs := Addrs{GRPC: lis.Addr().String()}
	var httpSrv *http.Server
	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen %s: %w", cfg.HTTPListen, err)
		}
		addrs.HTTP = hl.Addr().String()
		httpSrv = &http.Server{Handler: httpHandler(hs, tel.MetricsHandler()), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
	}

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	log.Info("lockd serving", "grpc", addrs.GRPC, "http", addrs.HTTP, "reflection", cfg.Reflection,
		"tls", cfg.TLS.Enabled(), "mtls", cfg.TLS.ClientCA != "", "auth", authn != nil, "token_apps", broker.Apps())
	if cfg.Started != nil {
		cfg.Started(addrs)
	}

	select {
	case err := <-served:
		return fmt.Errorf("grpc server: %w", err)
	case <-ctx.Done():
	}

	log.Info("shutting down")
	stopWatch()
	hs.Shutdown() // every service NOT_SERVING
	locks.Drain()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(cfg.ShutdownTimeout):
		log.Warn("graceful stop timed out; stopping", "timeout", cfg.ShutdownTimeout)
		gs.Stop()
	}
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
	}
	log.Info("stopped")
	return nil
}

// newBroker builds the token broker for the apps of file (none when nil).
func newBroker(rdb redis.UniversalClient, file *config.Config, opts token.Options) (*token.Broker, error) {
	var apps []token.App
	if file != nil {
		for _, a := range file.Apps {
			apps = append(apps, token.App{Name: a.Name, Upstream: a.WeChat()})
		}
	}
	b, err := token.New(rdb, apps, opts)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return b, nil
}

// connect opens the Redis deployment named by cfg, or the embedded store.
func connect(cfg Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if cfg.Redis == "" {
		st, err := embedded.Start()
		if err != nil {
			return nil, nil, fmt.Errorf("embedded store: %w", err)
		}
		log.Warn("no --redis given: serving from the embedded store, for trying lockd only, not for production; locks live in this process alone and vanish with it")
		rdb := redis.NewClient(&redis.Options{Addr: st.Addr(), ContextTimeoutEnabled: true})
		return rdb, func() { rdb.Close(); st.Close() }, nil
	}
	rdb, err := NewRedisClient(cfg.Redis, cfg.RedisCluster, cfg.RedisMaster)
	if err != nil {
		return nil, nil, err
	}
	return rdb, func() { rdb.Close() }, nil
}

// NewRedisClient opens spec: a redis:// or rediss:// URL, or a comma list of
// host:port (Cluster when more than one, or when cluster is set; sentinels
// when master names a Sentinel master).
func NewRedisClient(spec string, cluster bool, master string) (redis.UniversalClient, error) {
	const timeout = 2 * time.Second
	if strings.Contains(spec, "://") {
		opt, err := redis.ParseURL(spec)
		if err != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		if master != "" {
			return redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: master, SentinelAddrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password,
				DB: opt.DB, TLSConfig: opt.TLSConfig, ContextTimeoutEnabled: true, DialTimeout: timeout,
			}), nil
		}
		if cluster {
			return redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password,
				TLSConfig: opt.TLSConfig, ContextTimeoutEnabled: true, DialTimeout: timeout,
			}), nil
		}
		return redis.NewClient(opt), nil
	}
	var addrs []string
	for _, a := range strings.Split(spec, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("--redis: %q is not host:port: %w", a, err)
		}
		addrs = append(addrs, a)
	}
	switch {
	case len(addrs) == 0:
		return nil, errors.New("--redis: no address given")
	case master != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, ContextTimeoutEnabled: true, DialTimeout: timeout}), nil
	case len(addrs) > 1 || cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialTimeout: timeout}), nil
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true, DialTimeout: timeout}), nil
}

// watchHealth turns every service NOT_SERVING while Redis does not answer,
// and back to SERVING when it does.
func watchHealth(ctx context.Context, hs *health.Server, ping func(context.Context) error, every time.Duration, log *slog.Logger) {
	last := healthpb.HealthCheckResponse_UNKNOWN
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(every, 500*time.Millisecond))
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			if err != nil {
				log.Warn("redis unreachable: NOT_SERVING", "err", err)
			} else if last != healthpb.HealthCheckResponse_UNKNOWN {
				log.Info("redis reachable again: SERVING")
			}
			hs.SetServingStatus("", st)
			for _, name := range serviceNames {
				hs.SetServingStatus(name, st)
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func httpHandler(hs *health.Server, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		res, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// interceptors log each call's end (quietly for expected outcomes), turn a
// panic into INTERNAL without taking the server down, check bearer tokens
// and ACLs when authn is set, and refuse strings of invalid UTF-8.
func interceptors(log *slog.Logger, authn *auth.Authenticator) []grpc.ServerOption {
	recoverOpts := []recovery.Option{
		recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
			log.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
			return status.Error(codes.Internal, "internal error")
		}),
	}
	unary := []grpc.UnaryServerInterceptor{
		logUnary(log),
		recovery.UnaryServerInterceptor(recoverOpts...),
	}
	stream := []grpc.StreamServerInterceptor{
		logStream(log),
		recovery.StreamServerInterceptor(recoverOpts...),
	}
	if authn != nil {
		unary = append(unary, authn.UnaryInterceptor())
		stream = append(stream, authn.StreamInterceptor())
	}
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(service.Codec()),
		grpc.ChainUnaryInterceptor(append(unary, service.UnaryInterceptor)...),
		grpc.ChainStreamInterceptor(append(stream, service.StreamInterceptor)...),
	}
}

// The call log is written here rather than by go-grpc-middleware's logging
// interceptor: that one builds every field of every call before the level
// is known, and most calls end OK and log at DEBUG, which production does
// not write. Benchmarks put that waste at about a twentieth of lockd's CPU
// per lock call; here a call whose level is off costs one Enabled check.

func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		logCall(ctx, log, info.FullMethod, "unary", start, err)
		return resp, err
	}
}

func logStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		logCall(ss.Context(), log, info.FullMethod, "server_stream", start, err)
		return err
	}
}

// logCall logs one finished call at the level its code deserves.
func logCall(ctx context.Context, log *slog.Logger, method, kind string, start time.Time, err error) {
	code := status.Code(err)
	lvl := codeToLevel(code)
	if !log.Enabled(ctx, lvl) {
		return
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
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", status.Convert(err).Message()))
	}
	log.LogAttrs(ctx, lvl, "finished call", attrs...)
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

// newAuthenticator returns the Authenticator for the auth section of file,
// or nil when there is none (no authentication).
func newAuthenticator(file *config.Config) (*auth.Authenticator, error) {
	if file == nil || file.Auth == nil {
		return nil, nil
	}
	var clients []auth.Client
	for _, c := range file.Auth.Clients {
		clients = append(clients, auth.Client{Name: c.Name, Token: string(c.Token), Locks: c.Locks, Apps: c.Apps})
	}
	a, err := auth.New(clients)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return a, nil
}

// warnIfExposed warns loudly when the gRPC listener is reachable beyond
// this host without authentication (or without TLS).
func warnIfExposed(log *slog.Logger, listen string, authenticated bool, tls TLSFiles) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || loopback(host) {
		return
	}
	if !authenticated {
		log.Warn("INSECURE: listening on " + listen + " beyond loopback without authentication: anyone who can reach it can take and release every lock and read every access token; configure auth.clients in --config")
	}
	if !tls.Enabled() {
		log.Warn("listening on " + listen + " beyond loopback without TLS: bearer tokens and access tokens cross the network in plaintext; set --tls-cert and --tls-key")
	}
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// redisLogger sends go-redis's own messages (reconnects, dial failures) to
// the debug log; outages are reported once by the health watcher instead.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
