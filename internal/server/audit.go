package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/lockd/lockd/internal/safetext"
)

// AuditFiles bound the disk the audit log file may take: when it reaches
// MaxSizeMiB it is renamed (with a time stamp) and a new one started, and
// only the newest MaxBackups renamed files are kept. So however many
// grants clients make, the audit log takes at most (MaxBackups + 1) ×
// MaxSizeMiB.
type AuditFiles struct {
	// MaxSizeMiB is the size at which the file is rotated; 0 means 100.
	MaxSizeMiB int
	// MaxBackups is how many rotated files are kept; 0 means 5.
	MaxBackups int
}

// audit is the audit logger and what keeps its file.
type audit struct {
	// log is nil when the audit log is off.
	log *slog.Logger
	// file is the file written to; nil for none or stderr.
	file *lumberjack.Logger
}

// reopen opens the audit log file again at its path (SIGHUP), so a file
// renamed by logrotate is let go; a no-op for none or stderr.
func (a audit) reopen() error {
	if a.file == nil {
		return nil
	}
	if err := a.file.Close(); err != nil {
		return err
	}
	_, err := a.file.Write(nil) // opens the file at its path
	return err
}

// close closes the file, if any.
func (a audit) close() {
	if a.file != nil {
		_ = a.file.Close()
	}
}

// openAudit returns the audit log for dest ("" none, "-" stderr, otherwise
// a file appended to, rotated by files) at level.
func openAudit(dest string, level slog.Level, files AuditFiles, stderr io.Writer) (audit, error) {
	var (
		w    io.Writer
		file *lumberjack.Logger
	)
	switch dest {
	case "":
		return audit{}, nil
	case "-":
		w = stderr
	default:
		if files.MaxSizeMiB < 0 || files.MaxBackups < 0 {
			return audit{}, errors.New("--audit-log-max-size and --audit-log-max-files must not be negative")
		}
		// Fail at start-up, not at the first record, on a path that
		// cannot be written.
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return audit{}, fmt.Errorf("--audit-log: %w", err)
		}
		_ = f.Close()
		file = &lumberjack.Logger{Filename: filepath.Clean(dest), MaxSize: or(files.MaxSizeMiB, 100), MaxBackups: or(files.MaxBackups, 5)}
		w = file
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return audit{log: slog.New(safetext.Handler(h)).With("log", "audit"), file: file}, nil
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
