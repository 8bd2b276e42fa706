package auth

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A call's right to go on is checked again at every reload. Calls can last
// long, a KeepAlive stream for as long as its client keeps it open and a
// waiting acquire up to its wait_timeout, and an operator who removes a
// client or replaces its leaked token expects it to lose its locks, not to
// keep renewing them for ever. Each call under way that may last (see
// waits) is therefore told when Replace puts a new client list in force
// (an epoch ends), and checks that the list would still let it in, as a
// new call would be checked: the same
// client (by name and token), with the key or app of its request still in
// that client's lists, or no authentication at all. A call that fails the
// check is ended with the status a new call would get (UNAUTHENTICATED,
// PERMISSION_DENIED): its handler sees its context canceled, as if the
// client had gone away, so a KeepAlive stream stops renewing (and, with
// release_on_close, releases its lease) and a waiting acquire withdraws.

// Following a call costs two contexts; only calls that may outlast a
// reload are followed: streams, and unary calls asked to wait (a lock
// request with a wait_timeout). Any other unary call is one round trip to
// Redis, as likely to have finished just before the reload as just after.

// waits reports whether a unary request may wait.
func waits(req any) bool {
	r, ok := req.(interface{ GetWaitTimeout() *durationpb.Duration })
	return ok && r.GetWaitTimeout().AsDuration() > 0
}

// epoch is the time one client list is in force; it ends when Replace puts
// another in force.
type epoch struct {
	ended context.Context
	end   context.CancelFunc
}

func newEpoch() *epoch {
	ctx, cancel := context.WithCancel(context.Background())
	return &epoch{ended: ctx, end: cancel}
}

// newEpoch ends the epoch in force, after Replace stored the new list.
func (a *Authenticator) newEpoch() {
	a.epoch.Swap(newEpoch()).end()
}

// call is one call under way, checked again whenever an epoch ends.
type call struct {
	a      *Authenticator
	ctx    context.Context
	cancel context.CancelCauseFunc
	method string
	client *client // nil: admitted while authentication was off

	mu    sync.Mutex
	req   any         // the request, once received
	stop  func() bool // stops watching the epoch
	ended bool
}

// revoked is the cause of a call's end by a reload: the status it ends
// with.
type revoked struct{ err error }

func (r *revoked) Error() string { return r.err.Error() }

// follow returns ctx for the call of method with request req (nil for a
// stream: see received), canceled when a reload would refuse the call,
// and the call, whose end must be called with the handler's error.
func (a *Authenticator) follow(ctx context.Context, method string, req any) (context.Context, *call) {
	if a == nil {
		return ctx, nil
	}
	cctx, cancel := context.WithCancelCause(ctx)
	c := &call{a: a, ctx: cctx, cancel: cancel, method: method, req: req}
	c.client, _ = ctx.Value(clientKey{}).(*client)
	c.check()
	return cctx, c
}

// check ends the call if the client list in force refuses it, and
// otherwise watches for the next reload.
func (c *call) check() {
	// The epoch is read before the list: a list stored later ends this
	// epoch, which checks again.
	e := c.a.epoch.Load()
	if err := c.allowedBy(c.a.clients.Load()); err != nil {
		c.a.refused(ReasonRevoked)
		c.cancel(&revoked{status.Convert(err).Err()})
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.stop = context.AfterFunc(e.ended, c.check)
	}
}

// allowedBy returns the status set would give the call if it started now;
// nil when set lets it in.
func (c *call) allowedBy(set *clientSet) error {
	switch {
	case set == nil:
		return nil
	case c.client == nil:
		return status.Error(codes.Unauthenticated, "authentication was turned on by a configuration reload: call again with a bearer token")
	case c.client.set == set:
		return nil
	}
	var now *client
	for i := range set.clients {
		if set.clients[i].hash == c.client.hash && set.clients[i].id.Name == c.client.id.Name {
			now = &set.clients[i]
		}
	}
	if now == nil {
		return status.Errorf(codes.Unauthenticated, "the bearer token of client %q was revoked by a configuration reload", c.client.id.Name)
	}
	if now.tlsSubject != "" && now.tlsSubject != c.client.tlsSubject {
		if subject, ok := c.a.subject(c.ctx); !ok || subject != now.tlsSubject {
			return status.Errorf(codes.Unauthenticated, "client %q must now connect with the client certificate its tls_subject names", now.id.Name)
		}
	}
	c.mu.Lock()
	req := c.req
	c.mu.Unlock()
	if req == nil {
		return nil
	}
	return now.allows(c.method, req)
}

// received records the request a stream's client sent.
func (c *call) received(req any) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.req = req
	c.mu.Unlock()
}

// end stops following the call and returns the error it ends with: the
// handler's, or, when a reload ended it, the status that reload gave it.
func (c *call) end(err error) error {
	if c == nil {
		return err
	}
	c.mu.Lock()
	c.ended = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	if r, ok := context.Cause(c.ctx).(*revoked); ok && err != nil {
		err = r.err
	}
	c.cancel(nil)
	return err
}
