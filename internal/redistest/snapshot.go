//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Snapshot has the server write its data to disk (SAVE) and keeps a copy of
// it, returning the copy's path: what a backup, an RDB snapshot taken before
// a crash, or a lagging replica holds.
func (s *Server) Snapshot(tb testing.TB) string {
	tb.Helper()
	c := s.Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.Save(ctx).Err(); err != nil {
		tb.Fatalf("redistest: SAVE: %v", err)
	}
	s.mu.Lock()
	n := s.incarnation
	s.mu.Unlock()
	data, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("dump-%d.rdb", n)))
	if err != nil {
		tb.Fatalf("redistest: reading the snapshot: %v", err)
	}
	path := filepath.Join(s.dir, fmt.Sprintf("snapshot-%d.rdb", time.Now().UnixNano()))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatalf("redistest: keeping the snapshot: %v", err)
	}
	return path
}

// RestartFrom stops the server and starts a new one on the same port with
// the data of snapshot (from [Server.Snapshot]): Redis coming back with
// older data than it had, as after a crash with RDB persistence, a failover
// to a lagging replica, or a restore from backup.
func (s *Server) RestartFrom(tb testing.TB, snapshot string) {
	tb.Helper()
	data, err := os.ReadFile(snapshot)
	if err != nil {
		tb.Fatalf("redistest: reading %s: %v", snapshot, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(syscall.SIGTERM); err != nil {
		tb.Fatalf("redistest: restart: %v", err)
	}
	// The next incarnation loads its own file name (see argv).
	if err := os.WriteFile(filepath.Join(s.dir, fmt.Sprintf("dump-%d.rdb", s.incarnation+1)), data, 0o600); err != nil {
		tb.Fatalf("redistest: restoring the snapshot: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.launchLocked()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restarting %s on %s from %s: %v", s.kind(), s.Addr(), snapshot, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
