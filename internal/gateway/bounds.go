package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// requestBounds bound what one request may cost the gateway.
type requestBounds struct {
	maxBody      int64
	bodyTimeout  time.Duration
	writeTimeout time.Duration
}

var defaultRequestBounds = requestBounds{maxBody: MaxBodyBytes, bodyTimeout: BodyTimeout, writeTimeout: WriteTimeout}

// wrap reads the request body before next sees it, within bodyTimeout and
// maxBody, and bounds each write of the response by writeTimeout.
//
// Reading the whole body first also means net/http watches the connection
// from then on, so a client that disconnects cancels its call at once (a
// waiting Acquire ends and leaves nothing queued).
func (b requestBounds) wrap(next http.Handler, mux *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body != nil && r.Body != http.NoBody {
			_ = rc.SetReadDeadline(time.Now().Add(b.bodyTimeout))
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.maxBody))
			if err != nil {
				b.bodyError(mux, w, r, err)
				return
			}
			// No deadline from here on: a call may wait for a lock, or
			// stream, for as long as the client stays.
			_ = rc.SetReadDeadline(time.Time{})
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(&boundedWriter{ResponseWriter: w, rc: rc, timeout: b.writeTimeout}, r)
	})
}

func (b requestBounds) bodyError(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	var st *runtime.HTTPStatusError
	switch {
	case errors.As(err, &tooLarge):
		st = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge,
			Err: status.Errorf(codes.ResourceExhausted, "request body is larger than %d bytes", b.maxBody)}
	case isTimeout(err):
		st = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestTimeout,
			Err: status.Errorf(codes.DeadlineExceeded, "request body not received within %v", b.bodyTimeout)}
	default:
		st = &runtime.HTTPStatusError{HTTPStatus: http.StatusBadRequest,
			Err: status.Error(codes.InvalidArgument, fmt.Sprintf("reading request body: %v", err))}
	}
	// The connection cannot carry another request after a body that was
	// not read to its end.
	w.Header().Set("Connection", "close")
	_, m := runtime.MarshalerForRequest(mux, r)
	runtime.HTTPError(r.Context(), mux, m, w, r, st)
}

// isTimeout reports whether err is a read past its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// boundedWriter gives each write and flush of a response timeout to
// complete.
type boundedWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	_ = b.rc.SetWriteDeadline(time.Now().Add(b.timeout))
	return b.ResponseWriter.Write(p)
}

func (b *boundedWriter) FlushError() error {
	_ = b.rc.SetWriteDeadline(time.Now().Add(b.timeout))
	return b.rc.Flush()
}

func (b *boundedWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }
