package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
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

// The steps that build a replica, in the order Run takes them. Each
// leaves what it built in the replica for replica.stop, also when it
// fails half-way.

// newReplica checks cfg and fills in its defaults.
func newReplica(ctx context.Context, cfg Config) (*replica, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = slog.New(safetext.Handler(log.Handler()))
	if err := cfg.Bounds.Validate(); err != nil {
		return nil, err
	}
	if cfg.Transport == (Transport{}) {
		cfg.Transport = DefaultTransport()
	}
	if err := cfg.Transport.Validate(); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "lockd"
	}
	if err := validNamespace(cfg.Namespace); err != nil {
		return nil, err
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
	r := &replica{cfg: cfg, log: log}
	r.background, r.stopBackground = context.WithCancel(ctx)
	return r, nil
}

// startTelemetry opens the audit log and sets up metrics and traces.
func (r *replica) startTelemetry(ctx context.Context) error {
	var err error
	if r.audit, err = openAudit(r.cfg.AuditLog, r.cfg.AuditLevel, r.cfg.AuditFiles, r.cfg.Stderr); err != nil {
		return err
	}
	if r.tel, err = telemetry.Setup(ctx, telemetry.Options{ServiceName: "lockd", ServiceVersion: r.cfg.Version, Logger: r.log, Global: true}); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	r.sec = r.tel.Security()
	return nil
}

// startSecurity loads the clients lockd lets in and the gRPC listener's
// TLS, and warns about what the configuration leaves exposed.
func (r *replica) startSecurity(context.Context) error {
	cfg, log := r.cfg, r.log
	if err := checkTLSSubjects(cfg.File, cfg.TLS.ClientCA != ""); err != nil {
		return err
	}
	r.authn = auth.Open(auth.OnRefused(r.sec.AuthRefused), auth.WithCertSubject(certSubject))
	if err := r.authn.Replace(authClients(cfg.File)); err != nil {
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
	r.refused = newSummary(log, "refused calls before they started", 10*time.Second)
	go r.refused.run(r.background)
	r.handshakes = newHandshakes(r.background, log, r.sec)
	if cfg.TLS.Enabled() {
		tc, err := newTLS(cfg.TLS, tlsEvents{log: log, reloadFailed: r.sec.TLSReloadFailed})
		if err != nil {
			return err
		}
		go tc.watch(r.background)
		r.sec.RegisterCertificateExpiry(tc.expiry)
		observed := newObservedCreds(credentials.NewTLS(tc.config), log, r.sec.TLSHandshakeFailed, r.handshakes.sum)
		r.creds = append(r.creds, grpc.Creds(gateway.Credentials(observed)))
		r.gatewayTLS = tc.config
	}
	warnIfExposed(log, cfg.Listen, r.authn.Enabled(), cfg.TLS)
	if cfg.GatewayListen != "" {
		warnIfExposed(log, cfg.GatewayListen, r.authn.Enabled(), cfg.TLS)
	}
	return nil
}

// startEngine connects to Redis (or starts the embedded store), checks it
// is fit for locks, and builds the lock engine on it.
func (r *replica) startEngine(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	redis.SetLogger(redisLogger{log})
	identity := &redislock.IdentityCheck{}
	var err error
	if r.rdb, r.closeStore, err = connect(cfg, log, identity); err != nil {
		return err
	}
	if err := r.tel.InstrumentRedis(r.rdb); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	go watchRedisMemory(r.background, r.rdb, cmp.Or(cfg.RedisMemoryInterval, redisMemoryEvery), log, r.sec)

	// A Redis found unfit for locks after start-up stops lockd.
	r.running, r.stopRunning = context.WithCancelCause(ctx)
	engineOpts, err := lockOptions(r.running, cfg, r.rdb, log, r.stopRunning)
	if err != nil {
		return err
	}
	engineOpts.Prefix, engineOpts.Observer, engineOpts.IdentityCheck = cfg.Namespace, r.tel.Locks(), identity
	r.engine = redislock.New(r.rdb, engineOpts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = r.engine.Prepare(pctx)
	cancel()
	if err != nil {
		log.Warn("could not prepare lockd's data-loss markers yet; lock calls will", "err", err)
	}
	return nil
}

// startServices builds lockd's gRPC services on the engine, the token
// brokers and their reloads, and health, which follows Redis.
func (r *replica) startServices(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	var lockOpts []service.Option
	if r.audit.log != nil {
		lockOpts = append(lockOpts, service.WithAudit(r.audit.log))
	}
	r.locks = service.NewLockServer(r.engine, cfg.Bounds, log, lockOpts...)
	r.tel.RegisterKeepAliveStreams(r.locks.KeepAliveStreams)

	tokenOpts := token.Options{Prefix: cfg.Namespace, Logger: log, Observer: r.tel.Tokens(), IdleAfter: cfg.TokenIdleAfter}
	broker, err := newBroker(r.rdb, cfg.File, tokenOpts)
	if err != nil {
		return err
	}
	r.tokenApps = broker.Apps()
	r.tokens = newBrokers(r.background, log, broker, cfg.Bounds.MaxWatches)
	reloads := &reloader{log: log, load: cfg.LoadConfig, authn: r.authn, brokers: r.tokens, rdb: r.rdb, opts: tokenOpts, metrics: r.sec,
		audit: r.audit, locks: r.locks, secretFlags: secretFlagsOf(cfg), mtls: cfg.TLS.ClientCA != ""}
	reloadCtx, cancelReloads := context.WithCancel(ctx)
	reloadsDone := make(chan struct{})
	go func() {
		defer close(reloadsDone)
		reloads.watch(reloadCtx, cfg.Reload)
	}()
	r.stopReloads = func() {
		cancelReloads()
		<-reloadsDone
	}

	r.elections, r.semaphores = service.NewElectionServer(r.locks), service.NewSemaphoreServer(r.locks)
	r.admin = service.NewAdminServer(r.locks, r.tokens.tokens)
	r.rateLimits = service.NewRateLimitServer(ratelimit.New(r.rdb, ratelimit.Options{
		Prefix: cfg.Namespace, DataLoss: r.engine, Observer: r.tel.RateLimits()}), r.locks)

	r.health = health.NewServer()
	r.tel.RegisterServing(servingOf(r.health))
	watchCtx, stopWatch := context.WithCancel(ctx)
	r.stopHealthWatch = stopWatch
	go watchHealth(watchCtx, r.health, r.engine.Ping, cfg.HealthInterval, log)
	return nil
}

// startTransports opens the listeners and builds the servers on them: the
// gRPC server, the HTTP/JSON gateway and the HTTP port (probes, metrics,
// the admin page). The gRPC server serves once serve starts; the others
// serve at once.
func (r *replica) startTransports(context.Context) error {
	cfg := r.cfg
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	r.conns = newConnections(r.background, cfg.Transport, r.authn, r.sec, r.log)
	r.grpcListener = r.conns.guard(lis, "grpc")
	r.addrs.GRPC = r.grpcListener.Addr().String()
	r.gate = newGate(r.authn, cfg.Transport.MaxHealthStreams, r.refused, r.conns)
	r.grpc = r.newGRPCServer(cfg.Transport)
	r.servers = append(r.servers, r.grpc)
	if cfg.GatewayListen != "" {
		if err := r.startGateway(); err != nil {
			return err
		}
	}
	if cfg.HTTPListen != "" {
		return r.startHTTP()
	}
	return nil
}

// newGRPCServer returns a gRPC server of lockd's services on transport t,
// with extra options.
func (r *replica) newGRPCServer(t Transport, extra ...grpc.ServerOption) *grpc.Server {
	opts := append(slices.Clone(r.creds), grpc.WaitForHandlers(true),
		// Reused handler goroutines keep their grown stacks: a fresh
		// goroutine per call spends a tenth of the CPU growing its
		// stack. gRPC starts a fresh one whenever every worker is
		// busy, so there are enough for the calls a replica has under
		// way at once, not only one per core; an idle worker's stack
		// shrinks back.
		grpc.NumStreamWorkers(uint32(streamWorkersPerCore*runtime.GOMAXPROCS(0))),
		// Calls without a known token are refused as their headers
		// arrive, before they cost a goroutine or a buffer.
		grpc.InTapHandle(r.gate.tap))
	opts = append(opts, extra...)
	opts = append(opts, t.serverOptions()...)
	opts = append(opts, r.tel.GRPCServerOptions()...)
	gs := grpc.NewServer(append(opts, interceptors(r.log, r.authn)...)...)
	lockdv1.RegisterLockServiceServer(gs, r.locks)
	lockdv1.RegisterTokenServiceServer(gs, r.tokens.tokens)
	lockdv1.RegisterElectionServiceServer(gs, r.elections)
	lockdv1.RegisterSemaphoreServiceServer(gs, r.semaphores)
	lockdv1.RegisterAdminServiceServer(gs, r.admin)
	lockdv1.RegisterRateLimitServiceServer(gs, r.rateLimits)
	healthpb.RegisterHealthServer(gs, r.health)
	if r.cfg.Reflection {
		reflection.Register(gs)
	}
	return gs
}

// startGateway starts the HTTP/JSON gateway, on a gRPC server of its own.
func (r *replica) startGateway() error {
	cfg := r.cfg
	// The gateway's in-memory connections, one per client, are lockd's
	// own: they get a server of their own without --max-connection-age,
	// whose grace would cut long HTTP streams.
	pipeTransport := cfg.Transport
	pipeTransport.MaxConnectionAge, pipeTransport.MaxConnectionAgeGrace = 0, 0
	pipe := r.newGRPCServer(pipeTransport, gateway.ServerOptions()...)
	r.servers = append(r.servers, pipe)
	gw, err := gateway.Start(pipe, gateway.Options{Listen: cfg.GatewayListen, TLS: r.gatewayTLS, Logger: r.log,
		Authenticated: r.authn.Enabled, Hosts: cfg.GatewayHosts, Identify: r.authn.Identify, MaxConnections: cfg.Transport.MaxConnections,
		Guard: func(l net.Listener) net.Listener { return r.conns.guard(l, "gateway") }, Share: r.conns.shareOf,
		HandshakeFailed: r.handshakes.failed})
	if err != nil {
		return err
	}
	r.gateway = gw
	r.addrs.Gateway = gw.Addr()
	return nil
}

// startHTTP serves the HTTP port: /healthz, /readyz, /metrics and the
// admin page.
func (r *replica) startHTTP() error {
	cfg, log := r.cfg, r.log
	hl, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPListen, err)
	}
	r.addrs.HTTP = hl.Addr().String()
	// Anyone who reaches the port may connect: connections, headers
	// and idle keep-alives are bounded as the gateway's are.
	uiConn, closeUI, err := gateway.InProcess(r.grpc)
	if err != nil {
		hl.Close()
		return err
	}
	r.closeUI = closeUI
	ui := adminui.Handler(adminui.Options{Admin: lockdv1.NewAdminServiceClient(uiConn), Authenticated: r.authn.Enabled,
		IsAdmin: r.authn.IsAdminToken, Hosts: cfg.GatewayHosts})
	r.http = &http.Server{Handler: r.conns.admitHTTP(httpHandler(r.health, r.tel.MetricsHandler(), ui)), ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout: gateway.IdleTimeout, WriteTimeout: gateway.WriteTimeout, MaxHeaderBytes: gateway.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug), ConnContext: connguard.ConnContext}
	httpbound.Reclaim(r.http, cfg.Transport.MaxConnections)
	hl = r.conns.guard(hl, "http")
	go func() {
		if err := r.http.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return nil
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
