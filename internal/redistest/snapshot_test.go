//go:build unix

package redistest

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestRestartFromAnOlderSnapshot(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "before", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	runID := func() string {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatalf("INFO: %v", err)
		}
		return infoField(info, "run_id")
	}
	first := runID()
	snap := s.Snapshot(t)
	if err := c.Set(ctx, "after", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.RestartFrom(t, snap)

	if got, err := c.Get(ctx, "before").Result(); err != nil || got != "v" {
		t.Errorf("a key written before the snapshot: %q, %v", got, err)
	}
	if err := c.Get(ctx, "after").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("a key written after the snapshot: err = %v, want redis.Nil", err)
	}
	if runID() == first {
		t.Errorf("run_id unchanged by the restart")
	}
	// A plain restart after it starts empty again.
	s.Restart(t)
	if err := c.Get(ctx, "before").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("after a plain restart: err = %v, want redis.Nil", err)
	}
}
