// Command lockd serves distributed locks and fleet-wide access tokens over
// gRPC. See the README for flags and examples.
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

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/service"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "lockd:", err)
		}
		os.Exit(2)
	}
}

// run parses flags (each also settable as LOCKD_<UPPER_SNAKE_NAME>; flags win
// over the environment) and serves until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, level, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	return server.Run(ctx, cfg)
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (server.Config, slog.Level, error) {
	cfg := server.Config{Limits: service.DefaultLimits(), Version: version}
	var level slog.Level
	fs := flag.NewFlagSet("lockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:50051", "gRPC address")
	fs.StringVar(&cfg.HTTPListen, "http-listen", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz; empty turns it off")
	fs.StringVar(&cfg.Redis, "redis", "", "redis:// or rediss:// URL, or a comma list of host:port (more than one = Cluster); empty = embedded store")
	fs.BoolVar(&cfg.RedisCluster, "redis-cluster", false, "force Redis Cluster mode for a single seed address")
	fs.StringVar(&cfg.RedisMaster, "redis-master", "", "Sentinel master name (then --redis lists sentinels)")
	fs.BoolVar(&cfg.Reflection, "reflection", true, "serve gRPC server reflection")
	var configPath string
	fs.StringVar(&configPath, "config", "", "YAML file: apps and auth (see the README)")
	fs.StringVar(&cfg.TLS.Cert, "tls-cert", "", "PEM certificate chain for the gRPC listener (TLS)")
	fs.StringVar(&cfg.TLS.Key, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&cfg.TLS.ClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates signed by it (mTLS)")
	fs.DurationVar(&cfg.Limits.DefaultTTL, "default-ttl", cfg.Limits.DefaultTTL, "lease ttl when a request leaves it unset")
	fs.DurationVar(&cfg.Limits.MinTTL, "min-ttl", cfg.Limits.MinTTL, "shortest ttl a request may ask for")
	fs.DurationVar(&cfg.Limits.MaxTTL, "max-ttl", cfg.Limits.MaxTTL, "longest ttl a request may ask for")
	fs.DurationVar(&cfg.Limits.MaxWait, "max-wait", cfg.Limits.MaxWait, "longest wait_timeout a request may ask for")
	fs.IntVar(&cfg.Limits.MaxWaiters, "max-waiters", 10000, "calls waiting for a lock at once on this replica; 0 = no limit")
	fs.IntVar(&cfg.Limits.MaxKeepAlives, "max-keepalives", 20000, "KeepAlive streams open at once on this replica; 0 = no limit")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10e9, "how long in-flight calls may drain on SIGTERM")
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
	if err := cfg.Limits.Validate(); err != nil {
		return cfg, level, err
	}
	if configPath != "" {
		// Secrets come from the same environment as the flags.
		lookup := func(name string) (string, bool) { v := getenv(name); return v, v != "" }
		f, err := config.Load(configPath, lookup)
		if err != nil {
			return cfg, level, err
		}
		cfg.File = f
	}
	return cfg, level, nil
}
