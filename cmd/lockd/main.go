// Command lockd serves distributed locks and fleet-wide access tokens over
// gRPC (lockd, or lockd serve); lockd lock runs a command while holding a
// lock, lockd token prints an app's access_token and lockd inspect tells
// who holds a key. lockd --help lists the subcommands and the server's
// flags; docs/operations.md and docs/clients.md describe them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/service"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	code, ok, args := clientCommand(os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads the configuration file instead of ending lockd.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reloads := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reloads <- struct{}{}:
			default: // a reload is pending already
			}
		}
	}()
	if err := run(ctx, args, os.Getenv, os.Stderr, reloads); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0) // the flag set printed the help
		}
		fmt.Fprintln(os.Stderr, "lockd:", err)
		os.Exit(2)
	}
}

// run parses flags (each also settable as LOCKD_<UPPER_SNAKE_NAME>; flags win
// over the environment) and serves until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, reloads <-chan struct{}) error {
	cfg, level, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Stderr = stderr
	cfg.Reload = reloads
	return server.Run(ctx, cfg)
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (server.Config, slog.Level, error) {
	cfg := server.Config{Bounds: service.DefaultBounds(), Transport: server.DefaultTransport(), Version: version}
	var level slog.Level
	fs := flag.NewFlagSet("lockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { writeUsage(fs) }
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:50051", "gRPC address")
	fs.StringVar(&cfg.HTTPListen, "http-listen", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz; empty turns it off")
	fs.StringVar(&cfg.GatewayListen, "gateway-listen", "", "address of the HTTP/JSON gateway (same services, auth and TLS as gRPC); empty = off")
	var gatewayHosts string
	fs.StringVar(&gatewayHosts, "gateway-hosts", "", "comma list of host names the gateway answers to without auth and TLS, besides IP addresses and localhost")
	fs.StringVar(&cfg.Redis, "redis", "", "redis:// or rediss:// URL, or a comma list of host:port (more than one = Cluster); empty = embedded store")
	fs.BoolVar(&cfg.RedisCluster, "redis-cluster", false, "force Redis Cluster mode for a single seed address")
	fs.StringVar(&cfg.RedisMaster, "redis-master", "", "Sentinel master name (then --redis lists sentinels)")
	fs.BoolVar(&cfg.RedisAllowEviction, "redis-allow-eviction", false, "start even though Redis's maxmemory-policy may evict lock keys (warns)")
	fs.DurationVar(&cfg.DataLossGrace, "data-loss-grace", time.Minute, "most that new grants pause after Redis lost its data; 0 turns the watch off")
	fs.IntVar(&cfg.RedisWaitReplicas, "redis-wait-replicas", 0, "confirm every grant and renewal on this many replicas (Redis WAIT); 0 = off")
	fs.BoolVar(&cfg.RedisAutoPipeline, "redis-autopipeline", false, "share Redis round trips among concurrent lock calls (go-redis automatic pipelining); a call then waits out Redis's read timeout rather than its own deadline")
	fs.StringVar(&cfg.RedisPasswordFile, "redis-password-file", "", "file holding the Redis password (or set LOCKD_REDIS_PASSWORD), so that it need not be in --redis")
	fs.StringVar(&cfg.Namespace, "namespace", "lockd", "prefix of every Redis key and channel, so that deployments can share one Redis")
	fs.BoolVar(&cfg.Reflection, "reflection", true, "serve gRPC server reflection")
	var configPath string
	fs.StringVar(&configPath, "config", "", "YAML file: apps and auth (see docs/operations.md)")
	fs.StringVar(&cfg.TLS.Cert, "tls-cert", "", "PEM certificate chain for the gRPC listener (TLS)")
	fs.StringVar(&cfg.TLS.Key, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&cfg.TLS.ClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates signed by it (mTLS)")
	fs.DurationVar(&cfg.Bounds.DefaultTTL, "default-ttl", cfg.Bounds.DefaultTTL, "lease ttl when a request leaves it unset")
	fs.DurationVar(&cfg.Bounds.MinTTL, "min-ttl", cfg.Bounds.MinTTL, "shortest ttl a request may ask for")
	fs.DurationVar(&cfg.Bounds.MaxTTL, "max-ttl", cfg.Bounds.MaxTTL, "longest ttl a request may ask for")
	fs.DurationVar(&cfg.Bounds.MaxWait, "max-wait", cfg.Bounds.MaxWait, "longest wait_timeout a request may ask for")
	fs.IntVar(&cfg.Bounds.MaxWaiters, "max-waiters", 10000, "calls waiting for a lock, a permit or an election at once on this replica; 0 = no limit")
	fs.IntVar(&cfg.Bounds.MaxKeepAlives, "max-keepalives", 20000, "KeepAlive, Hold, Campaign and Observe streams open at once on this replica; 0 = no limit")
	fs.IntVar(&cfg.Bounds.MaxWatches, "max-token-watches", 2000, "WatchAccessToken streams open at once on this replica; 0 = no limit")
	fs.IntVar(&cfg.Bounds.FairShareLeases, "fair-share-leases", 10000, "leases a client without limits.leases may hold at once through this replica, when two or more clients are configured; 0 = no limit")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10e9, "how long in-flight calls may drain on SIGTERM")
	fs.DurationVar(&cfg.TokenIdleAfter, "token-idle-after", 3*time.Hour, "stop renewing an app's token (and tickets) ahead when nobody asked for it this long")
	t := &cfg.Transport
	fs.DurationVar(&t.KeepAliveTime, "keepalive-time", t.KeepAliveTime, "ping a connection idle this long, to notice clients that vanished")
	fs.DurationVar(&t.KeepAliveTimeout, "keepalive-timeout", t.KeepAliveTimeout, "drop a connection whose ping goes unanswered this long; its calls end as if closed")
	fs.DurationVar(&t.KeepAliveMinTime, "keepalive-min-time", t.KeepAliveMinTime, "shortest ping interval a client may use; clients pinging more often are disconnected")
	fs.IntVar(&t.MaxConnections, "max-connections", t.MaxConnections, "admitted connections (a call let in on them: with auth, one with a known token) open at once on each listener (gRPC, gateway, HTTP port); calls that would admit more are refused (0 = no limit)")
	fs.IntVar(&t.MaxPendingConnections, "max-pending-connections", t.MaxPendingConnections, "connections not admitted yet, on each listener; when all are taken, the source address with the most loses its oldest (0 = no limit)")
	fs.DurationVar(&t.PendingTimeout, "pending-timeout", t.PendingTimeout, "close a connection not admitted within this long (0 = never)")
	var streams uint
	fs.UintVar(&streams, "max-concurrent-streams", uint(t.MaxConcurrentStreams), "calls open at once on one connection; more are refused")
	var headerBytes uint
	fs.UintVar(&headerBytes, "max-header-bytes", uint(t.MaxHeaderBytes), "largest request header list a call may send")
	fs.IntVar(&t.MaxHealthStreams, "max-health-streams", t.MaxHealthStreams, "health calls (open without a token) open at once on this replica (0 = no limit)")
	fs.DurationVar(&t.MaxConnectionIdle, "max-connection-idle", t.MaxConnectionIdle, "close a connection without calls for this long (0 = never)")
	fs.DurationVar(&t.MaxConnectionAge, "max-connection-age", t.MaxConnectionAge, "ask clients to reconnect after this long, to spread load over replicas (0 = never)")
	fs.DurationVar(&t.MaxConnectionAgeGrace, "max-connection-age-grace", t.MaxConnectionAgeGrace, "how long calls may go on after --max-connection-age (0 = until they end)")
	fs.StringVar(&cfg.AuditLog, "audit-log", "", "write the audit log (who took and released which key) to this file, or - for stderr; empty = off")
	fs.TextVar(&cfg.AuditLevel, "audit-level", slog.LevelInfo, "audit log level: INFO (takes and releases) or WARN (force-releases and revocations only)")
	fs.IntVar(&cfg.AuditFiles.MaxSizeMiB, "audit-log-max-size", 100, "rotate the --audit-log file when it reaches this many MiB")
	fs.IntVar(&cfg.AuditFiles.MaxBackups, "audit-log-max-files", 5, "rotated --audit-log files to keep (older ones are removed)")
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")

	// The environment sets defaults; the command line overrides them.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "LOCKD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, level, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, level, err
	}
	if fs.NArg() > 0 {
		return cfg, level, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if streams > 1<<31 || headerBytes > 1<<31 {
		return cfg, level, errors.New("--max-concurrent-streams and --max-header-bytes must be below 2^31")
	}
	t.MaxConcurrentStreams, t.MaxHeaderBytes = uint32(streams), uint32(headerBytes)
	if err := t.Validate(); err != nil {
		return cfg, level, err
	}
	hosts, err := hostList(gatewayHosts)
	if err != nil {
		return cfg, level, err
	}
	cfg.GatewayHosts = hosts
	// Not a flag: a password on the command line shows in ps.
	cfg.RedisPassword = getenv("LOCKD_REDIS_PASSWORD")
	if err := cfg.Bounds.Validate(); err != nil {
		return cfg, level, err
	}
	if cfg.DataLossGrace < 0 || cfg.RedisWaitReplicas < 0 {
		return cfg, level, fmt.Errorf("--data-loss-grace and --redis-wait-replicas must not be negative")
	}
	if configPath != "" {
		// Secrets come from the same environment as the flags.
		lookup := func(name string) (string, bool) { v := getenv(name); return v, v != "" }
		f, err := config.Load(configPath, lookup)
		if err != nil {
			return cfg, level, err
		}
		cfg.File = f
		cfg.LoadConfig = func() (*config.Config, error) { return config.Load(configPath, lookup) }
	}
	return cfg, level, nil
}

// hostList splits a comma list of host names (--gateway-hosts).
func hostList(list string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if strings.ContainsAny(h, ":/ ") {
			return nil, fmt.Errorf("--gateway-hosts: %q is not a host name (no scheme, port or path)", h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}
