// Package server assembles lockd: the Redis connection (or the embedded
// store), the gRPC server with its interceptors, health and reflection, and
// the HTTP endpoints for probes.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/adminui"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/connguard"
	"github.com/lockd/lockd/internal/gateway"
	"github.com/lockd/lockd/internal/httpbound"
	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/safetext"
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
	// GatewayListen serves the HTTP/JSON gateway; empty turns it off.
	GatewayListen string
	// GatewayHosts are host names, besides IP addresses, localhost and
	// GatewayListen's own host, that the gateway answers to while lockd
	// runs without authentication and TLS (see gateway.Options.Hosts).
	GatewayHosts []string
	// Redis is a redis:// or rediss:// URL, or a comma list of host:port;
	// empty runs the embedded store.
	Redis string
	// RedisCluster forces Redis Cluster for a single seed address.
	RedisCluster bool
	// RedisMaster is the Sentinel master name; Redis then lists sentinels.
	RedisMaster string
	// RedisAllowEviction starts lockd (with a warning) on a Redis whose
	// maxmemory-policy may evict lock keys.
	RedisAllowEviction bool
	// DataLossGrace is the most that new grants pause after Redis lost its
	// data; zero turns the watch off.
	DataLossGrace time.Duration
	// RedisWaitReplicas, when positive, confirms every grant and renewal
	// on that many replicas (Redis WAIT).
	RedisWaitReplicas int
	// RedisAutoPipeline sends the lock scripts of concurrent calls in
	// shared round trips (redislock.Options.AutoPipeline); not with
	// RedisWaitReplicas.
	RedisAutoPipeline bool
	// RedisPassword is the Redis password, when it is not in the URL.
	RedisPassword string
	// RedisPasswordFile names a file holding the Redis password instead.
	RedisPasswordFile string
	// Namespace starts every Redis key and channel, so that deployments can
	// share one Redis; "lockd" when empty.
	Namespace string
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
	// LoadConfig reads the --config file again; each value on Reload
	// applies what it returns (clients, tokens, ACLs, limits, apps and
	// secrets), or keeps the running configuration when it fails.
	LoadConfig func() (*config.Config, error)
	// Reload asks for the configuration to be reloaded (SIGHUP).
	Reload <-chan struct{}
	// Transport bounds connections and streams; zero means
	// DefaultTransport.
	Transport Transport
	// AuditLog is where the audit log goes: "" nowhere, "-" stderr,
	// otherwise a file appended to; AuditLevel is its level (INFO: takes
	// and releases; WARN: force-releases only).
	AuditLog   string
	AuditLevel slog.Level
	// AuditFiles bound the disk the audit log file takes.
	AuditFiles AuditFiles
	// RedisMemoryInterval is how often Redis's memory is read, to warn
	// before it is full; 0 means every 30s.
	RedisMemoryInterval time.Duration
	// Bounds bound what any caller may ask for and the pools all callers
	// share on this replica (a client's own limits are in File).
	Bounds service.Bounds
	// TokenIdleAfter is how long after the last call for it an app's token
	// stops being renewed ahead (token.Options.IdleAfter); zero is the
	// broker's default.
	TokenIdleAfter time.Duration
	// ShutdownTimeout bounds the graceful drain on shutdown.
	ShutdownTimeout time.Duration
	// HealthInterval is how often Redis is pinged for health.
	HealthInterval time.Duration
	// Logger receives lockd's structured logs; every string in them is
	// escaped (see package safetext).
	Logger *slog.Logger
	// Stderr receives the audit log when AuditLog is "-"; os.Stderr when
	// nil.
	Stderr io.Writer
	// Started, if set, is called once lockd serves, with its addresses.
	Started func(Addrs)
}

// Addrs are the addresses lockd listens on.
type Addrs struct {
	GRPC, HTTP, Gateway string
}

// Run serves lockd until ctx ends, then shuts down gracefully: health turns
// NOT_SERVING, KeepAlive streams end so clients resume elsewhere, in-flight
// calls drain (bounded by ShutdownTimeout), and the server stops.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = slog.New(safetext.Handler(log.Handler()))
	if err := cfg.Bounds.Validate(); err != nil {
		return err
	}
	if cfg.Transport == (Transport{}) {
		cfg.Transport = DefaultTransport()
	}
	if err := cfg.Transport.Validate(); err != nil {
		return err
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "lockd"
	}
	if err := validNamespace(cfg.Namespace); err != nil {
		return err
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	auditLog, err := openAudit(cfg.AuditLog, cfg.AuditLevel, cfg.AuditFiles, cfg.Stderr)
	if err != nil {
		return err
	}
	defer auditLog.close()

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
	sec := tel.Security()

	if err := checkTLSSubjects(cfg.File, cfg.TLS.ClientCA != ""); err != nil {
		return err
	}
	authn := auth.Open(auth.OnRefused(sec.AuthRefused), auth.WithCertSubject(certSubject))
	if err := authn.Replace(authClients(cfg.File)); err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	if cfg.File != nil {
		for _, w := range cfg.File.Warnings {
			log.Warn("config: " + w)
		}
	}
	secretFlagsOf(cfg).warn(log)
	// Refusals are logged as a summary per interval, so that a flood of
	// them does not flood the log.
	bgCtx, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	refused := newSummary(log, "refused calls before they started", 10*time.Second)
	go refused.run(bgCtx)
	var creds []grpc.ServerOption
	var gatewayTLS *tls.Config
	handshakes := newHandshakes(bgCtx, log, sec)
	if cfg.TLS.Enabled() {
		tc, err := newTLS(cfg.TLS, tlsEvents{log: log, reloadFailed: sec.TLSReloadFailed})
		if err != nil {
			return err
		}
		go tc.watch(bgCtx)
		sec.RegisterCertificateExpiry(tc.expiry)
		observed := newObservedCreds(credentials.NewTLS(tc.config), log, sec.TLSHandshakeFailed, handshakes.sum)
		creds = append(creds, grpc.Creds(gateway.Credentials(observed)))
		gatewayTLS = tc.config
	}
	warnIfExposed(log, cfg.Listen, authn.Enabled(), cfg.TLS)
	if cfg.GatewayListen != "" {
		warnIfExposed(log, cfg.GatewayListen, authn.Enabled(), cfg.TLS)
	}

	redis.SetLogger(redisLogger{log})
	identity := &redislock.IdentityCheck{}
	rdb, closeStore, err := connect(cfg, log, identity)
	if err != nil {
		return err
	}
	defer closeStore()
	if err := tel.InstrumentRedis(rdb); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	go watchRedisMemory(bgCtx, rdb, cmp.Or(cfg.RedisMemoryInterval, redisMemoryEvery), log, sec)

	// A Redis found unfit for locks after start-up stops lockd.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	engineOpts, err := lockOptions(runCtx, cfg, rdb, log, stopRun)
	if err != nil {
		return err
	}
	engineOpts.Prefix, engineOpts.Observer, engineOpts.IdentityCheck = cfg.Namespace, tel.Locks(), identity
	engine := redislock.New(rdb, engineOpts)
	defer engine.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	err = engine.Prepare(pctx)
	pcancel()
	if err != nil {
		log.Warn("could not prepare lockd's data-loss markers yet; lock calls will", "err", err)
	}
	lockOpts := []service.Option{}
	if auditLog.log != nil {
		lockOpts = append(lockOpts, service.WithAudit(auditLog.log))
	}
	locks := service.NewLockServer(engine, cfg.Bounds, log, lockOpts...)
	tel.RegisterKeepAliveStreams(locks.KeepAliveStreams)

	tokenOpts := token.Options{Prefix: cfg.Namespace, Logger: log, Observer: tel.Tokens(), IdleAfter: cfg.TokenIdleAfter}
	broker, err := newBroker(rdb, cfg.File, tokenOpts)
	if err != nil {
		return err
	}
	tokens := newBrokers(bgCtx, log, broker, cfg.Bounds.MaxWatches)
	defer tokens.close()
	reloads := &reloader{log: log, load: cfg.LoadConfig, authn: authn, brokers: tokens, rdb: rdb, opts: tokenOpts, metrics: sec, audit: auditLog,
		locks: locks, secretFlags: secretFlagsOf(cfg), mtls: cfg.TLS.ClientCA != ""}
	reloadCtx, stopReloads := context.WithCancel(ctx)
	reloadsDone := make(chan struct{})
	go func() {
		defer close(reloadsDone)
		reloads.watch(reloadCtx, cfg.Reload)
	}()
	defer func() { // before the brokers and Redis close
		stopReloads()
		<-reloadsDone
	}()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	conns := newConnections(bgCtx, cfg.Transport, authn, sec, log)
	lis = conns.guard(lis, "grpc")
	// Handlers finish their cleanup (queued writers withdrawn, holds given
	// back) before the engine and Redis close, even after a forced Stop.
	gate := newGate(authn, cfg.Transport.MaxHealthStreams, refused, conns)
	hs := health.NewServer()
	tel.RegisterServing(servingOf(hs))
	elections, semaphores := service.NewElectionServer(locks), service.NewSemaphoreServer(locks)
	admin := service.NewAdminServer(locks, tokens.tokens)
	rateLimits := service.NewRateLimitServer(ratelimit.New(rdb, ratelimit.Options{
		Prefix: cfg.Namespace, DataLoss: engine, Observer: tel.RateLimits()}), locks)
	// newServer returns a gRPC server of lockd's services on transport t,
	// with extra options.
	newServer := func(t Transport, extra ...grpc.ServerOption) *grpc.Server {
		opts := append(slices.Clone(creds), grpc.WaitForHandlers(true),
			// Reused handler goroutines keep their grown stacks: a fresh
			// goroutine per call spends a tenth of the CPU growing its
			// stack. gRPC starts a fresh one whenever every worker is
			// busy, so there are enough for the calls a replica has under
			// way at once, not only one per core; an idle worker's stack
			// shrinks back.
			grpc.NumStreamWorkers(uint32(streamWorkersPerCore*runtime.GOMAXPROCS(0))),
			// Calls without a known token are refused as their headers
			// arrive, before they cost a goroutine or a buffer.
			grpc.InTapHandle(gate.tap))
		opts = append(opts, extra...)
		opts = append(opts, t.serverOptions()...)
		opts = append(opts, tel.GRPCServerOptions()...)
		gs := grpc.NewServer(append(opts, interceptors(log, authn)...)...)
		lockdv1.RegisterLockServiceServer(gs, locks)
		lockdv1.RegisterTokenServiceServer(gs, tokens.tokens)
		lockdv1.RegisterElectionServiceServer(gs, elections)
		lockdv1.RegisterSemaphoreServiceServer(gs, semaphores)
		lockdv1.RegisterAdminServiceServer(gs, admin)
		lockdv1.RegisterRateLimitServiceServer(gs, rateLimits)
		healthpb.RegisterHealthServer(gs, hs)
		if cfg.Reflection {
			reflection.Register(gs)
		}
		return gs
	}
	gs := newServer(cfg.Transport)
	servers := []*grpc.Server{gs}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchHealth(watchCtx, hs, engine.Ping, cfg.HealthInterval, log)

	addrs := Addrs{GRPC: lis.Addr().String()}
	if cfg.GatewayListen != "" {
		// The gateway's in-memory connections, one per client, are
		// lockd's own: they get a server of their own without
		// --max-connection-age, whose grace would cut long HTTP streams.
		pipeTransport := cfg.Transport
		pipeTransport.MaxConnectionAge, pipeTransport.MaxConnectionAgeGrace = 0, 0
		pipe := newServer(pipeTransport, gateway.ServerOptions()...)
		servers = append(servers, pipe)
		gw, err := gateway.Start(pipe, gateway.Options{Listen: cfg.GatewayListen, TLS: gatewayTLS, Logger: log,
			Authenticated: authn.Enabled, Hosts: cfg.GatewayHosts, Identify: authn.Identify, MaxConnections: cfg.Transport.MaxConnections,
			Guard: func(l net.Listener) net.Listener { return conns.guard(l, "gateway") }, Share: conns.shareOf,
			HandshakeFailed: handshakes.failed})
		if err != nil {
			lis.Close()
			return err
		}
		addrs.Gateway = gw.Addr()
		defer func() { // once the gRPC server has stopped
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = gw.Shutdown(sctx)
		}()
	}

	var httpSrv *http.Server
	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen %s: %w", cfg.HTTPListen, err)
		}
		addrs.HTTP = hl.Addr().String()
		// Anyone who reaches the port may connect: connections, headers
		// and idle keep-alives are bounded as the gateway's are.
		uiConn, closeUI, err := gateway.InProcess(gs)
		if err != nil {
			hl.Close()
			lis.Close()
			return err
		}
		defer func() { _ = closeUI() }()
		ui := adminui.Handler(adminui.Options{Admin: lockdv1.NewAdminServiceClient(uiConn), Authenticated: authn.Enabled,
			IsAdmin: authn.IsAdminToken, Hosts: cfg.GatewayHosts})
		httpSrv = &http.Server{Handler: conns.admitHTTP(httpHandler(hs, tel.MetricsHandler(), ui)), ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout: gateway.IdleTimeout, WriteTimeout: gateway.WriteTimeout, MaxHeaderBytes: gateway.MaxHeaderBytes,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug), ConnContext: connguard.ConnContext}
		httpbound.Reclaim(httpSrv, cfg.Transport.MaxConnections)
		hl = conns.guard(hl, "http")
		go func() {
			if err := httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
	}

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	log.Info("lockd serving", "grpc", addrs.GRPC, "http", addrs.HTTP, "gateway", addrs.Gateway, "reflection", cfg.Reflection,
		"tls", cfg.TLS.Enabled(), "mtls", cfg.TLS.ClientCA != "", "auth", authn.Enabled(), "token_apps", broker.Apps(),
		"namespace", cfg.Namespace, "audit", cfg.AuditLog != "")
	if cfg.Started != nil {
		cfg.Started(addrs)
	}

	select {
	case err := <-served:
		return fmt.Errorf("grpc server: %w", err)
	case <-runCtx.Done():
	}
	unfit := context.Cause(runCtx)
	if ctx.Err() != nil {
		unfit = nil
	} else {
		log.Error("stopping: Redis is unfit for locks", "err", unfit)
	}

	log.Info("shutting down")
	stopWatch()
	hs.Shutdown() // every service NOT_SERVING
	locks.Drain()
	tokens.tokens.Drain()
	stopped := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Go(s.GracefulStop)
		}
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(cfg.ShutdownTimeout):
		log.Warn("graceful stop timed out; stopping", "timeout", cfg.ShutdownTimeout)
		for _, s := range servers {
			s.Stop()
		}
	}
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
	}
	log.Info("stopped")
	return unfit
}

// streamWorkersPerCore is how many gRPC stream workers lockd runs per
// core: a core serves dozens of lock calls at once, each mostly waiting
// for Redis.
const streamWorkersPerCore = 32

// newBroker builds the token broker for the apps of file (none when nil).
func newBroker(rdb redis.UniversalClient, file *config.Config, opts token.Options) (*token.Broker, error) {
	var apps []token.App
	if file != nil {
		for _, a := range file.Apps {
			apps = append(apps, token.App{Name: a.Name, Upstream: a.Upstream()})
		}
	}
	b, err := token.New(rdb, apps, opts)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return b, nil
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
