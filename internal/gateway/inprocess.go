package gateway

import (
	"errors"

	"google.golang.org/grpc"
)

// InProcess serves gs on an in-memory listener, as the gateway does, and
// returns a connection to it, for in-process callers (the admin page) that
// must go through lockd's interceptors like any client. gs must have its
// services registered; close ends the connection and the listener.
func InProcess(gs *grpc.Server) (conn *grpc.ClientConn, close func() error, err error) {
	p := newPipe()
	go func() { _ = gs.Serve(p) }()
	conn, err = p.dial()
	if err != nil {
		_ = p.Close()
		return nil, nil, err
	}
	return conn, func() error { return errors.Join(conn.Close(), p.Close()) }, nil
}
