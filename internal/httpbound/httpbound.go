// Package httpbound bounds the connections an HTTP server holds open at
// once, so that callers, with or without credentials, cannot exhaust its
// memory by opening connections, nor keep others out by leaving theirs
// idle.
package httpbound

import (
	"net"
	"net/http"
	"sync"

	"golang.org/x/net/netutil"
)

// Limit returns lis bounded to max connections open at once (more wait in
// the kernel's accept queue until one closes), and sets srv.ConnState so
// that, while all max are open, srv closes keep-alive connections as soon
// as they are idle: holding a place then takes a request in progress, not
// an open socket. srv must serve the returned listener. A max of 0 or less
// returns lis unbounded.
func Limit(srv *http.Server, lis net.Listener, max int) net.Listener {
	if max <= 0 {
		return lis
	}
	Reclaim(srv, max)
	return netutil.LimitListener(lis, max)
}

// Reclaim sets srv.ConnState so that, while max connections are open, srv
// closes keep-alive connections as soon as they are idle, for a listener
// bounded otherwise (see package connguard). A max of 0 or less does
// nothing.
func Reclaim(srv *http.Server, max int) {
	if max <= 0 {
		return
	}
	r := &reclaimer{max: max, idle: map[net.Conn]bool{}}
	srv.ConnState = r.track
}

// reclaimer follows the server's connections and closes idle ones while
// the bound is reached.
type reclaimer struct {
	max int

	mu   sync.Mutex
	open int
	idle map[net.Conn]bool
}

func (r *reclaimer) track(c net.Conn, s http.ConnState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s {
	case http.StateNew:
		r.open++
	case http.StateActive:
		delete(r.idle, c)
	case http.StateIdle:
		r.idle[c] = true
	case http.StateHijacked, http.StateClosed:
		r.open--
		delete(r.idle, c)
	}
	if r.open < r.max {
		return
	}
	// The server's goroutine of each connection notices the close and
	// reports StateClosed.
	for ic := range r.idle {
		_ = ic.Close()
		delete(r.idle, ic)
	}
}
