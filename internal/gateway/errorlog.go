package gateway

import (
	"bytes"
	"log"
	"log/slog"
	"strings"
)

// serverLog is the HTTP server's error log: its messages go to log at
// DEBUG (they are about clients), and each failed TLS handshake (which
// net/http reports only there) is also told to failed, if set, with its
// reason.
func serverLog(l *slog.Logger, failed func(reason string)) *log.Logger {
	return log.New(&errorLog{log: l, failed: failed}, "", 0)
}

type errorLog struct {
	log    *slog.Logger
	failed func(reason string)
}

// handshakePrefix starts net/http's message for a failed TLS handshake:
// "http: TLS handshake error from <addr>: <err>".
const handshakePrefix = "http: TLS handshake error from "

func (e *errorLog) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	if rest, ok := strings.CutPrefix(msg, handshakePrefix); ok {
		reason := handshakeReason(rest)
		if e.failed != nil {
			e.failed(reason)
		}
		e.log.Debug("TLS handshake failed", "listener", "gateway", "reason", reason, "err", rest)
		return len(p), nil
	}
	e.log.Debug(msg)
	return len(p), nil
}

// handshakeReason classifies a failed handshake by its message, as the
// gRPC listener's are: client_certificate when the client sent no
// certificate or one lockd does not trust, timeout, or other.
func handshakeReason(msg string) string {
	switch {
	case strings.Contains(msg, "certificate"):
		return "client_certificate"
	case strings.Contains(msg, "timeout"), strings.Contains(msg, "deadline exceeded"):
		return "timeout"
	}
	return "other"
}
