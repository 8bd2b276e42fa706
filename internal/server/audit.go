package server

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/lockd/lockd/internal/safetext"
)

// openAudit returns the audit logger for dest ("" none, "-" stderr,
// otherwise a file appended to) at level, and a function closing it.
func openAudit(dest string, level slog.Level, stderr io.Writer) (*slog.Logger, func(), error) {
	var w io.Writer
	closer := func() {}
	switch dest {
	case "":
		return nil, closer, nil
	case "-":
		w = stderr
	default:
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("--audit-log: %w", err)
		}
		w, closer = f, func() { _ = f.Close() }
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(safetext.Handler(h)).With("log", "audit"), closer, nil
}
