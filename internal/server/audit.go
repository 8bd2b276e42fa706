package server

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/lockd/lockd/internal/safetext"
)

// audit is the audit logger and what keeps its file.
type audit struct {
	// log is nil when the audit log is off.
	log *slog.Logger
	// file is the file written to; nil for none or stderr.
	file *reopenable
}

// reopen opens the audit log file again at its path (SIGHUP), so a file
// renamed by logrotate is let go; a no-op for none or stderr.
func (a audit) reopen() error {
	if a.file == nil {
		return nil
	}
	return a.file.reopen()
}

// close closes the file, if any.
func (a audit) close() {
	if a.file != nil {
		_ = a.file.close()
	}
}

// openAudit returns the audit log for dest ("" none, "-" stderr, otherwise
// a file appended to) at level.
func openAudit(dest string, level slog.Level, stderr io.Writer) (audit, error) {
	var (
		w    io.Writer
		file *reopenable
	)
	switch dest {
	case "":
		return audit{}, nil
	case "-":
		w = stderr
	default:
		file = &reopenable{path: dest}
		if err := file.reopen(); err != nil {
			return audit{}, fmt.Errorf("--audit-log: %w", err)
		}
		w = file
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return audit{log: slog.New(safetext.Handler(h)).With("log", "audit"), file: file}, nil
}

// reopenable is a file appended to that can be opened again at its path.
// slog handlers write each record in one Write, so records never straddle
// two files.
type reopenable struct {
	path string

	mu sync.Mutex
	f  *os.File
}

func (r *reopenable) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

// reopen opens path again and closes the file written to so far; if path
// cannot be opened, writing goes on to the old file.
func (r *reopenable) reopen() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

func (r *reopenable) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}
