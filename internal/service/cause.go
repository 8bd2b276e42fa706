package service

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// causedError is a status told to the caller in general terms, such as
// "redis unavailable", that keeps the error behind it (a network error
// naming Redis's address, say) for lockd's own log: callers learn what to
// do, not how lockd's network looks.
type causedError struct {
	st    *status.Status
	cause error
}

// withCause returns a status error of code and msg whose cause, err, is
// kept for the log only.
func withCause(code codes.Code, msg string, err error) error {
	return &causedError{st: status.New(code, msg), cause: err}
}

// Error is the message the caller gets, never the cause's.
func (e *causedError) Error() string { return e.st.Err().Error() }

// GRPCStatus is the status the caller gets.
func (e *causedError) GRPCStatus() *status.Status { return e.st }

// Cause returns the error behind a status that lockd tells callers only in
// general terms, for lockd's log; nil for every other error.
func Cause(err error) error {
	var ce *causedError
	if errors.As(err, &ce) {
		return ce.cause
	}
	return nil
}
