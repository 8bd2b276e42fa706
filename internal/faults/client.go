package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// retryBackoff is how long a client waits before it retries a call that
// failed with UNAVAILABLE on another replica.
const retryBackoff = 20 * time.Millisecond

// Client is one lock client: it talks to a fleet of lockd replicas and
// moves to the next one when a call fails with UNAVAILABLE, as lockd's own
// clients do. It records every call in the run's history.
type Client struct {
	ID       int
	Owner    string
	run      *Run
	replicas []lockdv1.LockServiceClient
	// elections are the same replicas' ElectionService, for an election
	// workload.
	elections []lockdv1.ElectionServiceClient

	mu  sync.Mutex
	cur int
}

// NewClient returns a client of the run that starts on replica
// first % len(replicas).
func (r *Run) NewClient(id, first int, owner string, replicas []lockdv1.LockServiceClient) *Client {
	return &Client{ID: id, Owner: owner, run: r, replicas: replicas, cur: first % len(replicas)}
}

func (c *Client) replica() lockdv1.LockServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replicas[c.cur]
}

// failover moves the client to the next replica after a call failed in a
// way another replica may not.
func (c *Client) failover(err error) {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		c.mu.Lock()
		c.cur = (c.cur + 1) % len(c.replicas)
		c.mu.Unlock()
	}
}

// Held is a lease a client was granted.
type Held struct {
	Client *Client
	Key    string
	Lease  string
	Token  uint64
	TTL    time.Duration

	mu       sync.Mutex
	expire   time.Time
	lost     bool
	lostC    chan struct{}
	renewedC chan struct{} // closed and replaced at every renewal
}

// Expire returns the lease's expiry as lockd last reported it.
func (h *Held) Expire() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.expire
}

// Lost returns a channel closed once the holder knows the lease is lost.
func (h *Held) Lost() <-chan struct{} { return h.lostC }

// Valid reports whether the holder may still act on the lease for at least
// margin: it was not told of a loss and its known expiry is further away.
func (h *Held) Valid(margin time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost && time.Until(h.expire) > margin
}

func (h *Held) renewed(exp time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if exp.After(h.expire) {
		h.expire = exp
	}
	if h.renewedC != nil {
		close(h.renewedC)
	}
	h.renewedC = make(chan struct{})
}

// AwaitNews waits until the lease is renewed or lost, or timeout passes,
// and reports whether news came.
func (h *Held) AwaitNews(ctx context.Context, timeout time.Duration) bool {
	h.mu.Lock()
	if h.renewedC == nil {
		h.renewedC = make(chan struct{})
	}
	c := h.renewedC
	h.mu.Unlock()
	select {
	case <-c:
		return true
	case <-h.lostC:
		return true
	case <-ctx.Done():
	case <-time.After(timeout):
	}
	return false
}

func (h *Held) markLost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.lost {
		h.lost = true
		close(h.lostC)
	}
}

// acquireAttempts is how often an Acquire that failed with UNAVAILABLE or
// timed out is tried, with the same request_id, on the next replica.
const acquireAttempts = 3

// AcquireOptions shape one Acquire.
type AcquireOptions struct {
	TTL  time.Duration
	Wait time.Duration
}

// Acquire asks for the write lock of key and records every attempt; an
// attempt's deadline is its wait plus 3s. It returns nil without an error
// when the lock was not granted in time.
func (c *Client) Acquire(ctx context.Context, key string, o AcquireOptions) (*Held, error) {
	reqID := newID()
	var err error
	for range acquireAttempts {
		cctx, cancel := context.WithTimeout(ctx, o.Wait+3*time.Second)
		call := time.Now()
		var res *lockdv1.AcquireResponse
		res, err = c.replica().Acquire(cctx, &lockdv1.AcquireRequest{
			Key: key, Owner: c.Owner, Ttl: durationpb.New(o.TTL), WaitTimeout: durationpb.New(o.Wait), RequestId: reqID,
		})
		cancel()
		e := Event{Op: OpAcquire, Client: c.ID, Key: key, Write: true, Call: call, Return: time.Now()}
		if err != nil {
			e.Err = status.Code(err).String()
			c.run.History.Add(e)
			c.failover(err)
			if ctx.Err() != nil {
				return nil, err
			}
			time.Sleep(retryBackoff)
			continue
		}
		if !res.GetAcquired() {
			c.run.History.Add(e)
			return nil, nil
		}
		l := res.GetLease()
		e.OK, e.Lease, e.Token, e.Expire = true, l.GetLeaseId(), l.GetFencingToken(), l.GetExpireTime().AsTime()
		e.HoldCount, e.TTL = l.GetHoldCount(), l.GetTtl().AsDuration()
		c.run.History.Add(e)
		h := &Held{Client: c, Key: key, Lease: l.GetLeaseId(), Token: l.GetFencingToken(), TTL: o.TTL, expire: e.Expire, lostC: make(chan struct{})}
		return h, nil
	}
	return nil, err
}

// Reenter acquires the held key again as the same owner (nested code) with
// ttl, and records it. It returns the hold count, or 0 when the call
// failed.
func (h *Held) Reenter(ctx context.Context, ttl time.Duration) uint32 {
	c := h.Client
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	call := time.Now()
	res, err := c.replica().Acquire(cctx, &lockdv1.AcquireRequest{Key: h.Key, Owner: c.Owner, Ttl: durationpb.New(ttl)})
	e := Event{Op: OpAcquire, Client: c.ID, Key: h.Key, Write: true, Call: call, Return: time.Now()}
	if err != nil || !res.GetAcquired() {
		if err != nil {
			e.Err = status.Code(err).String()
			c.failover(err)
		}
		c.run.History.Add(e)
		return 0
	}
	l := res.GetLease()
	e.OK, e.Lease, e.Token, e.Expire = true, l.GetLeaseId(), l.GetFencingToken(), l.GetExpireTime().AsTime()
	e.HoldCount, e.TTL = l.GetHoldCount(), l.GetTtl().AsDuration()
	c.run.History.Add(e)
	if l.GetLeaseId() == h.Lease {
		h.renewed(e.Expire)
	}
	return l.GetHoldCount()
}

// Release gives back one hold of the lease, retrying on UNAVAILABLE with
// the same request_id on the next replica. final says the holder means it
// as its last. It returns the hold count left and the call's error.
func (h *Held) Release(ctx context.Context, final bool) (uint32, error) {
	c := h.Client
	reqID := newID()
	var err error
	var first time.Time
	for range 3 {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		call := time.Now()
		var res *lockdv1.ReleaseResponse
		res, err = c.replica().Release(cctx, &lockdv1.ReleaseRequest{Key: h.Key, LeaseId: h.Lease, RequestId: reqID})
		cancel()
		e := Event{Op: OpRelease, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: call, Return: time.Now(), Final: final, Since: first}
		if first.IsZero() {
			first = call
		}
		if err == nil {
			e.HoldCount = res.GetHoldCount()
			c.run.History.Add(e)
			return res.GetHoldCount(), nil
		}
		e.Err = status.Code(err).String()
		c.run.History.Add(e)
		c.failover(err)
		if status.Code(err) == codes.NotFound || ctx.Err() != nil {
			break
		}
		time.Sleep(retryBackoff)
	}
	return 0, err
}

// Renew renews the lease by a Renew call and records the outcome. It
// reports false when the lease is lost (NOT_FOUND).
func (h *Held) Renew(ctx context.Context) bool {
	c := h.Client
	cctx, cancel := context.WithTimeout(ctx, h.TTL)
	defer cancel()
	call := time.Now()
	res, err := c.replica().Renew(cctx, &lockdv1.RenewRequest{Key: h.Key, LeaseId: h.Lease})
	e := Event{Op: OpRenew, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: call, Return: time.Now()}
	switch {
	case err == nil:
		e.Expire, e.TTL = res.GetLease().GetExpireTime().AsTime(), res.GetLease().GetTtl().AsDuration()
		c.run.History.Add(e)
		h.renewed(e.Expire)
		return true
	case status.Code(err) == codes.NotFound:
		e.Op = OpLost
		c.run.History.Add(e)
		h.markLost()
		return false
	default:
		e.Err = status.Code(err).String()
		c.run.History.Add(e)
		c.failover(err)
		return true
	}
}

// KeepAliveOptions shape a KeepAlive.
type KeepAliveOptions struct {
	// ReleaseOnClose asks lockd to release the lease when the stream
	// closes.
	ReleaseOnClose bool
	// Via, if set, is the replica the first stream goes to.
	Via lockdv1.LockServiceClient
	// NoResume ends the keeping when the first stream breaks, instead of
	// resuming on the next replica.
	NoResume bool
}

// KeepAlive keeps the lease alive with KeepAlive streams, reading every
// message, until ctx ends or the lease is lost. A stream that breaks is
// resumed on the next replica while the lease's known expiry is ahead;
// once it has passed, the holder gives the lease up. It returns when the
// keeping ends.
func (h *Held) KeepAlive(ctx context.Context, o KeepAliveOptions) {
	c := h.Client
	via := o.Via
	for ctx.Err() == nil {
		if via == nil {
			via = c.replica()
		}
		err := h.stream(ctx, via, o.ReleaseOnClose)
		via = nil
		switch {
		case ctx.Err() != nil:
			return
		case status.Code(err) == codes.NotFound:
			c.run.History.Add(Event{Op: OpLost, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: time.Now()})
			h.markLost()
			return
		}
		c.failover(err)
		if o.NoResume {
			return
		}
		if !h.Valid(0) {
			// lockd could not be reached until the lease ran out.
			c.run.History.Add(Event{Op: OpAbandon, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: time.Now()})
			h.markLost()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryBackoff):
		}
	}
}

// stream runs one KeepAlive stream until it ends, recording its messages.
func (h *Held) stream(ctx context.Context, via lockdv1.LockServiceClient, releaseOnClose bool) error {
	c := h.Client
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	call := time.Now()
	st, err := via.KeepAlive(sctx, &lockdv1.KeepAliveRequest{Key: h.Key, LeaseId: h.Lease, ReleaseOnClose: releaseOnClose})
	if err != nil {
		c.run.History.Add(Event{Op: OpRenew, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: call, Err: status.Code(err).String()})
		return err
	}
	watching := false
	defer func() {
		if watching {
			c.run.History.Add(Event{Op: OpUnwatch, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: time.Now()})
		}
	}()
	for {
		msg, err := st.Recv()
		now := time.Now()
		if err != nil {
			if status.Code(err) != codes.NotFound && ctx.Err() == nil {
				c.run.History.Add(Event{Op: OpRenew, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: call, Return: now, Err: status.Code(err).String()})
			}
			return err
		}
		if !watching {
			watching = true
			c.run.History.Add(Event{Op: OpWatch, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: call, Return: now})
		}
		exp := msg.GetLease().GetExpireTime().AsTime()
		c.run.History.Add(Event{Op: OpRenew, Client: c.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: now, Expire: exp, TTL: msg.GetLease().GetTtl().AsDuration()})
		h.renewed(exp)
	}
}

// Write writes once to the key's resources if the lease is valid for at
// least twice step: it enters the plain resource, offers its token to the
// fenced one, waits step, and leaves. pause, if set, runs between entering
// and the fenced write (a holder that stalls mid-write). It reports false
// when the lease was not valid.
func (h *Held) Write(ctx context.Context, step time.Duration, pause func()) bool {
	if !h.Valid(2 * step) {
		return false
	}
	r := h.Client.run
	r.Plain.Enter(h.Key, h.Lease)
	defer r.Plain.Exit(h.Key, h.Lease)
	if pause != nil {
		pause()
	}
	call := time.Now()
	ok := r.Fenced.Write(h.Key, h.Lease, h.Token)
	r.History.Add(Event{Op: OpWrite, Client: h.Client.ID, Key: h.Key, Lease: h.Lease, Token: h.Token, Write: true, Call: call, Return: time.Now(), OK: ok})
	select {
	case <-ctx.Done():
	case <-time.After(step):
	}
	return true
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
