//go:build unix

package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Snapshot saves the server's data to an RDB file now (SAVE) and returns
// the file's contents, for [Server.RestartFrom].
func (s *Server) Snapshot(tb testing.TB) []byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := command(ctx, s.Addr(), "SAVE"); err != nil {
		tb.Fatalf("redistest: SAVE on %s: %v", s.Addr(), err)
	}
	s.mu.Lock()
	path := s.rdbPath(s.incarnation)
	s.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("redistest: reading the snapshot: %v", err)
	}
	return b
}

// RestartFrom stops the server and starts a new one on the same port that
// loads snapshot (from [Server.Snapshot]): Redis restarted from an older
// RDB file, with what was written since gone and the rest back.
func (s *Server) RestartFrom(tb testing.TB, snapshot []byte) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(syscall.SIGTERM); err != nil {
		tb.Fatalf("redistest: restart: %v", err)
	}
	// The next incarnation loads the file of its own name.
	if err := os.WriteFile(s.rdbPath(s.incarnation+1), snapshot, 0o600); err != nil {
		tb.Fatalf("redistest: writing the snapshot: %v", err)
	}
	s.relaunchLocked(tb)
}

// rdbPath is the RDB file of an incarnation (see argv).
func (s *Server) rdbPath(incarnation int) string {
	return filepath.Join(s.dir, fmt.Sprintf("dump-%d.rdb", incarnation))
}
