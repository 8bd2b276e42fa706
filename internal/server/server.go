// Package server assembles lockd: the Redis connection (or the embedded
// store), the gRPC server with its interceptors, health and reflection, and
// the HTTP endpoints for probes.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/gateway"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/telemetry"
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
	r, err := newReplica(ctx, cfg)
	if err != nil {
		return err
	}
	defer r.stop()
	// Each step uses what the ones before it built; stop undoes them all,
	// however far they got.
	for _, start := range []func(context.Context) error{
		r.startTelemetry,  // the audit log, metrics and traces
		r.startSecurity,   // authentication, TLS, and warnings about both
		r.startEngine,     // Redis (or the embedded store) and the lock engine
		r.startServices,   // the gRPC services, token brokers, reloads, health
		r.startTransports, // the gRPC server, the gateway, the HTTP port
	} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	return r.serve(ctx)
}

// replica is one lockd as Run builds it: each part is set by the start
// step that builds it (and left nil by a step that failed or never ran),
// and stopped by stop.
type replica struct {
	cfg Config
	log *slog.Logger

	// background is the context of the replica's background work (log
	// summaries, the TLS files' watch, Redis's memory watch, the token
	// refreshers); stopBackground ends it.
	background     context.Context
	stopBackground context.CancelFunc

	// startTelemetry
	audit audit
	tel   *telemetry.Telemetry
	sec   *telemetry.SecurityMetrics

	// startSecurity
	authn      *auth.Authenticator
	refused    *summary // calls refused before they started
	handshakes *handshakes
	creds      []grpc.ServerOption // the gRPC server's TLS, if any
	gatewayTLS *tls.Config

	// startEngine
	rdb        redis.UniversalClient
	closeStore func()
	// running ends with Run's ctx, or, with the cause, when Redis is found
	// unfit for locks after start-up.
	running     context.Context
	stopRunning context.CancelCauseFunc
	engine      *redislock.Client

	// startServices
	locks           *service.LockServer
	elections       *service.ElectionServer
	semaphores      *service.SemaphoreServer
	admin           *service.AdminServer
	rateLimits      *service.RateLimitServer
	tokenApps       []string // the apps of the configuration lockd started with
	tokens          *brokers
	stopReloads     func() // ends the reload watch and waits for it
	health          *health.Server
	stopHealthWatch context.CancelFunc

	// startTransports
	grpcListener net.Listener
	conns        *connections
	gate         *gate
	grpc         *grpc.Server   // the gRPC listener's server
	servers      []*grpc.Server // grpc, and the gateway's own
	gateway      *gateway.Gateway
	closeUI      func() error // the admin page's connection to grpc
	http         *http.Server
	addrs        Addrs

	// serve
	serving bool // grpc serves grpcListener
}

// serve serves the gRPC listener until ctx ends, Redis is found unfit for
// locks, or the listener fails; the error tells which (nil for ctx).
func (r *replica) serve(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- r.grpc.Serve(r.grpcListener) }()
	r.serving = true
	r.log.Info("lockd serving", "grpc", r.addrs.GRPC, "http", r.addrs.HTTP, "gateway", r.addrs.Gateway, "reflection", r.cfg.Reflection,
		"tls", r.cfg.TLS.Enabled(), "mtls", r.cfg.TLS.ClientCA != "", "auth", r.authn.Enabled(), "token_apps", r.tokenApps,
		"namespace", r.cfg.Namespace, "audit", r.cfg.AuditLog != "")
	if r.cfg.Started != nil {
		r.cfg.Started(r.addrs)
	}

	var err error
	select {
	case serr := <-served:
		err = fmt.Errorf("grpc server: %w", serr)
	case <-r.running.Done():
		if ctx.Err() == nil {
			err = context.Cause(r.running)
			r.log.Error("stopping: Redis is unfit for locks", "err", err)
		}
	}
	r.log.Info("shutting down")
	return err
}

// stop shuts the replica down, whatever of it was built, in this one
// order: first what clients see (health NOT_SERVING, streams ended so
// clients resume elsewhere, calls drained, listeners closed), then what
// the handlers used (reloads, token brokers, the lock engine, Redis),
// last what records it all (telemetry, the audit log).
//
// Handlers finish their cleanup (queued writers withdrawn, holds given
// back) before the engine and Redis close, even after a forced Stop:
// every gRPC server waits for its handlers (grpc.WaitForHandlers).
func (r *replica) stop() {
	if r.stopHealthWatch != nil {
		r.stopHealthWatch() // or it would set SERVING again
	}
	if r.health != nil {
		r.health.Shutdown() // every service NOT_SERVING
	}
	if r.locks != nil {
		r.locks.Drain()
	}
	if r.tokens != nil {
		r.tokens.tokens.Drain()
	}
	r.stopServers()
	if r.grpcListener != nil && !r.serving {
		_ = r.grpcListener.Close()
	}
	if r.http != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.http.Shutdown(sctx)
		cancel()
	}
	if r.closeUI != nil {
		_ = r.closeUI()
	}
	if r.gateway != nil { // once the gRPC servers have stopped
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.gateway.Shutdown(sctx)
		cancel()
	}

	if r.stopReloads != nil { // before the brokers and Redis close
		r.stopReloads()
	}
	if r.tokens != nil {
		r.tokens.close()
	}
	if r.engine != nil {
		r.engine.Close()
	}
	if r.stopRunning != nil {
		r.stopRunning(nil)
	}
	if r.closeStore != nil {
		r.closeStore()
	}

	r.stopBackground()
	if r.tel != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.tel.Shutdown(sctx); err != nil {
			r.log.Warn("telemetry shutdown", "err", err)
		}
		cancel()
	}
	r.audit.close()
	if r.serving {
		r.log.Info("stopped")
	}
}

// stopServers stops the gRPC servers gracefully, or, after
// ShutdownTimeout, at once.
func (r *replica) stopServers() {
	if len(r.servers) == 0 {
		return
	}
	stopped := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range r.servers {
			wg.Go(s.GracefulStop)
		}
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(r.cfg.ShutdownTimeout):
		r.log.Warn("graceful stop timed out; stopping", "timeout", r.cfg.ShutdownTimeout)
		for _, s := range r.servers {
			s.Stop()
		}
	}
}
