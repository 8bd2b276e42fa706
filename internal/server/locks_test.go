package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// runUntilDone runs lockd with cfg and returns what Run returned, or fails
// if it is still serving after a while.
func runUntilDone(t *testing.T, cfg Config) (*logtest.Buffer, error) {
	t.Helper()
	cfg.Listen, cfg.HTTPListen, cfg.Bounds = "127.0.0.1:0", "", service.DefaultBounds()
	logs := &logtest.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("lockd kept serving on a Redis it should refuse\n%s", logs)
	}
	return logs, err
}

// TestRedisThatMayEvictIsRefused starts lockd on Redis servers whose
// maxmemory-policy may evict lock keys: refused at start-up, or as soon as
// a Redis that was down at start-up answers; started with a warning under
// --redis-allow-eviction; and started, saying it could not check, where
// CONFIG is disabled.
func TestRedisThatMayEvictIsRefused(t *testing.T) {
	t.Parallel()
	evicting := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "volatile-lru"))

	t.Run("refused at start-up", func(t *testing.T) {
		t.Parallel()
		_, err := runUntilDone(t, Config{Redis: evicting.Addr()})
		if err == nil || !strings.Contains(err.Error(), "volatile-lru") || !strings.Contains(err.Error(), "--redis-allow-eviction") {
			t.Fatalf("Run = %v, want a refusal naming the policy and the flag", err)
		}
	})
	t.Run("allowed with a warning", func(t *testing.T) {
		t.Parallel()
		r := start(t, Config{Redis: evicting.Addr(), RedisAllowEviction: true})
		if !strings.Contains(r.logs.String(), "may evict lock keys") {
			t.Fatalf("no warning in\n%s", r.logs)
		}
	})
	t.Run("refused once a Redis down at start-up answers", func(t *testing.T) {
		t.Parallel()
		late := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
		late.Stop()
		go func() {
			time.Sleep(time.Second)
			late.Restart(t)
		}()
		logs, err := runUntilDone(t, Config{Redis: late.Addr()})
		if err == nil || !strings.Contains(err.Error(), "allkeys-lru") {
			t.Fatalf("Run = %v, want a refusal naming the policy\n%s", err, logs)
		}
	})
	t.Run("unchecked where CONFIG is disabled", func(t *testing.T) {
		t.Parallel()
		noConfig := redistest.Start(t, redistest.WithArgs("--rename-command", "CONFIG", ""))
		r := start(t, Config{Redis: noConfig.Addr()})
		if !strings.Contains(r.logs.String(), "could not check Redis's maxmemory-policy") {
			t.Fatalf("no word of the unchecked policy in\n%s", r.logs)
		}
	})
}
