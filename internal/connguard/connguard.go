// Package connguard keeps the connections of a listener apart by whether
// they have shown they are wanted, so that callers without a valid token
// can never occupy the places that known clients need.
//
// A connection starts pending: accepted, but not yet admitted. The server
// admits it (Admit) when a request on it is let in: with authentication
// on, one carrying a known client's token; with it off, any request.
// Pending connections have a pool of their own, bounded (MaxPending) and
// short-lived (PendingTimeout): when it is full, the source address
// holding the most pending connections loses its oldest, so that neither
// many idle sockets from one address nor a flood from many addresses keeps
// a newcomer out for longer than it takes to send its first request.
// Admitted connections have the places of Max, and each client at most
// its share of them (Admit's share). Accept never waits for a place: a
// connection that cannot be admitted is refused as its request arrives.
package connguard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
)

// The reasons a connection is refused or closed, as told to Options.Event.
const (
	// ReasonEvicted: a pending connection closed to make room for a new
	// one while the pending pool was full.
	ReasonEvicted = "evicted"
	// ReasonPendingTimeout: a connection not admitted within
	// PendingTimeout, closed.
	ReasonPendingTimeout = "pending_timeout"
	// ReasonFull: a request refused because Max connections are admitted.
	ReasonFull = "full"
	// ReasonClientShare: a request refused because its client has its
	// share of the admitted connections.
	ReasonClientShare = "client_share"
)

// Options configure New.
type Options struct {
	// Max bounds the admitted connections; 0 means no bound.
	Max int
	// MaxPending bounds the pending connections; 0 means no bound.
	MaxPending int
	// PendingTimeout closes a connection not admitted within it; 0 means
	// never.
	PendingTimeout time.Duration
	// Event, if set, is told the reason of every connection refused or
	// closed (ReasonEvicted, ...); it must be fast and must not block.
	Event func(reason string)
}

// ErrFull is wrapped by Admit's error when every place is taken.
var ErrFull = errors.New("connguard: every connection place is taken")

// ErrClientShare is wrapped by Admit's error when the client has its
// share.
var ErrClientShare = errors.New("connguard: the client has its share of the connections")

// Listener is a guarded net.Listener.
type Listener struct {
	net.Listener
	o Options

	mu       sync.Mutex
	pending  map[string][]*conn // by source address, oldest first
	npending int
	admitted int
	byClient map[string]int
}

// New guards lis.
func New(lis net.Listener, o Options) *Listener {
	if o.Event == nil {
		o.Event = func(string) {}
	}
	return &Listener{Listener: lis, o: o, pending: map[string][]*conn{}, byClient: map[string]int{}}
}

// Counts reports how many connections are pending and admitted.
func (l *Listener) Counts() (pending, admitted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.npending, l.admitted
}

// Accept waits for the next connection and returns it, pending; it never
// waits for a place.
func (l *Listener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: raw, l: l, source: sourceOf(raw.RemoteAddr()), seq: seqs.Add(1)}
	var evict *conn
	l.mu.Lock()
	if l.o.MaxPending > 0 && l.npending >= l.o.MaxPending {
		evict = l.crowdedLocked()
		l.removePendingLocked(evict)
		evict.state.Store(stateClosing)
	}
	l.pending[c.source] = append(l.pending[c.source], c)
	l.npending++
	if l.o.PendingTimeout > 0 {
		c.timer = time.AfterFunc(l.o.PendingTimeout, func() {
			if c.state.Load() == statePending {
				l.o.Event(ReasonPendingTimeout)
				_ = c.Close()
			}
		})
	}
	l.mu.Unlock()
	if evict != nil {
		l.o.Event(ReasonEvicted)
		_ = evict.Close()
	}
	return c, nil
}

// crowdedLocked returns the pending connection that gives way first: one
// whose call was refused (Refuse), the oldest; else one of the source
// address holding the most pending connections: of those, one whose peer
// has sent nothing (an idle socket: a client sends its first request as
// soon as it is connected), the oldest, else the oldest. l.mu is held and
// a connection is pending.
func (l *Listener) crowdedLocked() *conn {
	var refused *conn
	most := 0
	for _, cs := range l.pending {
		most = max(most, len(cs))
		for _, c := range cs {
			if c.refused.Load() && (refused == nil || c.seq < refused.seq) {
				refused = c
			}
		}
	}
	if refused != nil {
		return refused
	}
	var candidates []*conn
	for _, cs := range l.pending {
		if len(cs) == most {
			candidates = append(candidates, cs...)
		}
	}
	slices.SortFunc(candidates, func(a, b *conn) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range candidates {
		if !c.hasSent() {
			return c
		}
	}
	return candidates[0]
}

// removePendingLocked takes c out of the pending pool; l.mu is held.
func (l *Listener) removePendingLocked(c *conn) {
	cs := l.pending[c.source]
	for i, p := range cs {
		if p == c {
			cs = append(cs[:i:i], cs[i+1:]...)
			l.npending--
			break
		}
	}
	if len(cs) == 0 {
		delete(l.pending, c.source)
	} else {
		l.pending[c.source] = cs
	}
}

// sourceOf is the address a connection comes from, without its port.
func sourceOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

const (
	statePending int32 = iota
	stateAdmitted
	stateClosing
)

var seqs atomic.Uint64

// conn is a guarded connection. Its RemoteAddr carries it, so that a
// gRPC call's peer leads back to it.
type conn struct {
	net.Conn
	l      *Listener
	source string
	seq    uint64
	timer  *time.Timer
	state  atomic.Int32
	client string // once admitted
	once   sync.Once
	// sent is set once the peer has sent something; refused once a call
	// on it was refused for want of a token.
	sent, refused atomic.Bool
}

// hasSent reports whether the peer has sent something, read or not.
func (c *conn) hasSent() bool {
	if c.sent.Load() {
		return true
	}
	if waiting(c.Conn) {
		c.sent.Store(true)
		return true
	}
	return false
}

// Read reads from the connection, noting that the peer sent something.
func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.sent.Load() {
		c.sent.Store(true)
	}
	return n, err
}

// RemoteAddr is the peer's address, which Admit finds its connection by.
func (c *conn) RemoteAddr() net.Addr { return addr{Addr: c.Conn.RemoteAddr(), c: c} }

// Close closes the connection and gives back its place.
func (c *conn) Close() error {
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		if c.timer != nil {
			c.timer.Stop()
		}
		switch c.state.Swap(stateClosing) {
		case statePending:
			l.removePendingLocked(c)
		case stateAdmitted:
			l.admitted--
			if l.byClient[c.client]--; l.byClient[c.client] <= 0 {
				delete(l.byClient, c.client)
			}
		}
		l.mu.Unlock()
	})
	return c.Conn.Close()
}

// addr is a guarded connection's remote address.
type addr struct {
	net.Addr
	c *conn
}

type connKey struct{}

// ConnContext records in ctx the connection an HTTP server serves it on:
// set it as http.Server.ConnContext (with TLS, the connection under it).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	if gc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

func connOf(ctx context.Context) *conn {
	if c, ok := ctx.Value(connKey{}).(*conn); ok {
		return c
	}
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(addr); ok {
			return a.c
		}
	}
	return nil
}

// Admitted reports whether the connection of ctx (a gRPC call's, or an
// HTTP request's through ConnContext) is admitted; true for one that is
// not guarded.
func Admitted(ctx context.Context) bool {
	c := connOf(ctx)
	return c == nil || c.state.Load() != statePending
}

// Admit admits the connection of ctx (a gRPC call's, or an HTTP
// request's through ConnContext) for client, which may hold at most
// share of the admitted connections (0: no share of its own). A
// connection admitted already stays so, whoever calls on it; one that is
// not guarded needs no admission. The error wraps ErrFull or
// ErrClientShare; the connection is then left pending, to be closed by
// the caller after it answers or by its timeout.
func Admit(ctx context.Context, client string, share int) error {
	c := connOf(ctx)
	if c == nil || c.state.Load() != statePending {
		return nil
	}
	l := c.l
	l.mu.Lock()
	if c.state.Load() != statePending {
		l.mu.Unlock()
		return nil
	}
	if l.o.Max > 0 && l.admitted >= l.o.Max {
		l.mu.Unlock()
		l.o.Event(ReasonFull)
		return fmt.Errorf("%w (%d)", ErrFull, l.o.Max)
	}
	if share > 0 && l.byClient[client] >= share {
		l.mu.Unlock()
		l.o.Event(ReasonClientShare)
		return fmt.Errorf("%w (%d)", ErrClientShare, share)
	}
	l.removePendingLocked(c)
	c.state.Store(stateAdmitted)
	c.client = client
	l.admitted++
	l.byClient[client]++
	if c.timer != nil {
		c.timer.Stop()
	}
	l.mu.Unlock()
	return nil
}

// CloseSoon closes the connection of ctx after grace, unless it was
// admitted meanwhile: for a connection whose request was refused, once
// the refusal has had time to reach the client.
func CloseSoon(ctx context.Context, grace time.Duration) {
	c := connOf(ctx)
	if c == nil {
		return
	}
	time.AfterFunc(grace, func() {
		if c.state.Load() == statePending {
			_ = c.Close()
		}
	})
}

// Refuse notes that a call on the connection of ctx was refused for want
// of a valid token: while it stays pending, it is the first to give way,
// and it is closed after grace.
func Refuse(ctx context.Context, grace time.Duration) {
	c := connOf(ctx)
	if c == nil || c.state.Load() != statePending {
		return
	}
	c.refused.Store(true)
	CloseSoon(ctx, grace)
}
