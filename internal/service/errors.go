package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
)

// codeTable maps the lock engine's and the rate limiter's errors to gRPC
// codes (SPEC §5).
var codeTable = []struct {
	err  error
	code codes.Code
}{
	{redislock.ErrInvalidKey, codes.InvalidArgument},
	{redislock.ErrInvalidTTL, codes.InvalidArgument},
	{redislock.ErrInvalidMode, codes.InvalidArgument},
	{redislock.ErrNotHeld, codes.NotFound},
	{redislock.ErrUpgrade, codes.FailedPrecondition},
	{redislock.ErrClosed, codes.Unavailable},
	{redislock.ErrNotReplicated, codes.Unavailable},
	{redislock.ErrLate, codes.Unavailable},
	{redislock.ErrInvalidValue, codes.InvalidArgument},
	{redislock.ErrNoLeader, codes.NotFound},
	{redislock.ErrNotLeader, codes.FailedPrecondition},
	{redislock.ErrKeyInUse, codes.FailedPrecondition},
	{redislock.ErrInvalidLimit, codes.InvalidArgument},
	{redislock.ErrLimitMismatch, codes.FailedPrecondition},
	{ratelimit.ErrInvalidRequest, codes.InvalidArgument},
	{ratelimit.ErrConflict, codes.FailedPrecondition},
	{errLimit, codes.ResourceExhausted},
	{errShuttingDown, codes.Unavailable},
}

var (
	errLimit        = errors.New("server limit reached")
	errShuttingDown = errors.New("server is shutting down; resume on another replica")
)

// toStatus turns an error from the engine or from Redis into a gRPC status.
// Context errors pass through as CANCELED / DEADLINE_EXCEEDED; Redis that
// cannot be reached or cannot serve now is UNAVAILABLE; anything else is a
// bug, logged and reported as INTERNAL.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return status.Error(e.code, short(err.Error()))
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// The bound lockd puts on Redis calls ran out before the caller's
		// deadline: Redis did not answer in time.
		return status.Error(codes.Unavailable, "redis did not answer in time")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case redisUnavailable(err):
		return withCause(codes.Unavailable, "redis unavailable: retry, here or on another replica (lockd logs the cause)", err)
	}
	log.ErrorContext(ctx, "internal error", "err", err)
	return status.Error(codes.Internal, "internal error")
}

// transient reports whether err means Redis could not serve a call just
// now, so that the same call may succeed later.
func transient(err error) bool {
	return redisUnavailable(err) || errors.Is(err, redislock.ErrNotReplicated)
}

// maxMessageBytes bounds a status message: the engine's errors quote the
// key (escaped), which may be 512 bytes; an excerpt of it is enough.
const maxMessageBytes = 200

// short cuts msg to about maxMessageBytes, on a character boundary, noting
// the full length.
func short(msg string) string {
	if len(msg) <= maxMessageBytes {
		return msg
	}
	cut := maxMessageBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "… (" + strconv.Itoa(len(msg)) + " bytes)"
}

// redisUnavailable reports whether err means Redis cannot be reached or
// cannot serve at the moment, so a retry may succeed.
func redisUnavailable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		// A client without the password may send only small commands:
		// Redis answers a script with this rather than NOAUTH.
		const unauthenticated = "ERR Protocol error: unauthenticated"
		for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "NOREPLICAS", "OOM", "NOAUTH", "NOPERM", "WRONGPASS", unauthenticated} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	// Dial and connection errors that are not net.Error.
	return strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "connection reset")
}

// bounded returns ctx with a deadline a little before the caller's (a fifth
// of the time left, at most 200 ms), so that when Redis does not answer the
// caller still hears UNAVAILABLE (retryable) from lockd rather than its own
// DEADLINE_EXCEEDED, even when a busy machine delays the answer.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	left := time.Until(dl)
	return context.WithDeadline(ctx, dl.Add(-min(left/5, 200*time.Millisecond)))
}
