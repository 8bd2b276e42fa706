package client

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Lease is one hold on a key, kept alive by the client until Release. Its
// methods are safe for concurrent use.
type Lease struct {
	k        *keeper
	owner    string
	mode     Mode
	token    uint64
	released atomic.Bool
}

// Key returns the lock's name.
func (l *Lease) Key() string { return l.k.key }

// ID returns the lease's opaque id.
func (l *Lease) ID() string { return l.k.id }

// Owner returns who holds the lease.
func (l *Lease) Owner() string { return l.owner }

// Mode returns Read, Write or Permit.
func (l *Lease) Mode() Mode { return l.mode }

// FencingToken returns the lease's fencing token: greater than every token
// issued before for the key. Pass it with every write to the resource the
// lock protects, and have the resource reject tokens lower than one it has
// seen.
func (l *Lease) FencingToken() uint64 { return l.token }

// ExpireTime returns when the lease runs out unless renewed, by Redis's
// clock, as last confirmed.
func (l *Lease) ExpireTime() time.Time {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	return l.k.lease.GetExpireTime().AsTime()
}

// Lost returns a channel closed when the lease is lost: lockd found it gone
// (expired, released by someone else, or Redis lost its data), or no
// renewal could be confirmed — through any replica — before it would run
// out, less a margin of a tenth of its ttl. It closes before lockd can
// grant the key to anyone else. It never closes for a lease released by
// Release.
func (l *Lease) Lost() <-chan struct{} { return l.k.lost }

// Err returns why the lease was lost (matching ErrLost), or nil.
func (l *Lease) Err() error {
	select {
	case <-l.k.lost:
		return l.k.err
	default:
		return nil
	}
}

// Release gives the hold back and stops keeping the lease alive. A lease
// lost meanwhile gives an error matching ErrLost; a second Release gives
// ErrReleased. Even when lockd cannot be reached the lease is no longer
// kept alive, and runs out at its ttl.
func (l *Lease) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return ErrReleased
	}
	k := l.k
	if err := l.Err(); err != nil {
		k.detach()
		return err
	}
	last := k.c.lastRef(k)
	if last {
		// The stream may end NOT_FOUND once the release lands: that
		// is not a loss.
		k.releasing.Store(true)
	}
	_, err := k.c.release(ctx, k.key, k.id)
	k.detach()
	return err
}

// keeperKey names a lease within a client.
type keeperKey struct{ key, id string }

// keeper keeps one lease alive for every Lease of it the client holds (the
// same owner re-entering shares it): a KeepAlive stream on the current
// replica, resumed on the next one when a replica fails, and a deadline
// after which the lease counts as lost unless a renewal was confirmed.
type keeper struct {
	c       *Client
	key, id string
	// releaseOnClose is set for leases of an owner the client made up:
	// the stream closing (this process dying included) releases them.
	releaseOnClose bool
	refs           int // Leases of it not yet released; under c.mu

	mu    sync.Mutex
	lease *lockdv1.Lease // as last granted or renewed
	// anchorLocal (with its monotonic reading) came before the Redis
	// clock read anchorRedis: local time minus Redis time is at least
	// anchorLocal - anchorRedis.
	anchorLocal, anchorRedis time.Time
	// loose is set until the first renewal when the grant's anchor is too
	// uncertain to set a deadline by.
	loose bool

	releasing atomic.Bool
	confirmed chan struct{} // closed at the first renewal
	confirm   sync.Once
	lost      chan struct{}
	lose      sync.Once
	err       error // set before lost closes
	stop      context.CancelFunc
	done      chan struct{}
}

// keep registers a granted lease with its keeper (a new one, or the one
// its owner's earlier holds share) and returns it. When the grant took long
// enough that its expiry is uncertain, it waits for the first renewal.
func (c *Client) keep(ctx context.Context, g granted, madeUp bool) (*Lease, error) {
	k := c.keeperOf(g, madeUp)
	l := &Lease{k: k, owner: g.lease.GetOwner(), mode: Write, token: g.lease.GetFencingToken()}
	switch g.lease.GetMode() {
	case lockdv1.LockMode_LOCK_MODE_READ:
		l.mode = Read
	case lockdv1.LockMode_LOCK_MODE_PERMIT:
		l.mode = Permit
	}
	if !k.isLoose() {
		return l, nil
	}
	// The grant came so long after the request went out (a long wait)
	// that its expiry is too uncertain to count on: the first renewal
	// tells.
	t := time.NewTimer(c.opts.callTimeout)
	defer t.Stop()
	var err error
	select {
	case <-k.confirmed:
		return l, nil
	case <-k.lost:
		l.released.Store(true)
		k.detach()
		return nil, k.err
	case <-t.C:
		err = status.Error(codes.Unavailable, "client: no replica confirmed the lease in time")
	case <-ctx.Done():
		err = ctx.Err()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.callTimeout)
	defer cancel()
	_ = l.Release(rctx)
	return nil, err
}

func (c *Client) keeperOf(g granted, madeUp bool) *keeper {
	kk := keeperKey{g.lease.GetKey(), g.lease.GetLeaseId()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.keepers[kk]; k != nil && k.alive() {
		k.refs++
		k.renewed(g.lease, g.sent, anchorIfTighter)
		return k
	}
	k := &keeper{
		c: c, key: kk.key, id: kk.id, releaseOnClose: madeUp, refs: 1,
		confirmed: make(chan struct{}), lost: make(chan struct{}), done: make(chan struct{}),
	}
	k.renewed(g.lease, g.sent, anchorIfTighter)
	// A grant that leaves less than half its ttl by this reckoning waited
	// long: it is confirmed by the first renewal before it counts.
	k.loose = time.Until(k.deadline()) < g.lease.GetTtl().AsDuration()/2
	var ctx context.Context
	ctx, k.stop = context.WithCancel(c.ctx)
	c.keepers[kk] = k
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		k.run(ctx)
	}()
	return k
}

// lastRef reports whether k has a single Lease left.
func (c *Client) lastRef(k *keeper) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return k.refs == 1
}

// detach drops one Lease of k; the last one stops it.
func (k *keeper) detach() {
	k.c.mu.Lock()
	k.refs--
	last := k.refs == 0
	if last && k.c.keepers[keeperKey{k.key, k.id}] == k {
		delete(k.c.keepers, keeperKey{k.key, k.id})
	}
	k.c.mu.Unlock()
	if last {
		k.stop()
		<-k.done
	}
}

// releaseAll gives back the holds of every Lease of k not yet released.
func (k *keeper) releaseAll(ctx context.Context) {
	k.c.mu.Lock()
	n := k.refs
	k.c.mu.Unlock()
	k.releasing.Store(true)
	for range n {
		if _, err := k.c.release(ctx, k.key, k.id); err != nil {
			return
		}
	}
}

func (k *keeper) alive() bool {
	select {
	case <-k.lost:
		return false
	case <-k.done:
		return false
	default:
		return true
	}
}

// anchoring tells renewed what a confirmed lease says about the clocks.
type anchoring int

const (
	// noAnchor: when Redis made the lease is unknown (a later renewal
	// on a stream).
	noAnchor anchoring = iota
	// anchorIfTighter: Redis made it after sent (a grant); used when it
	// bounds the clocks' offset more tightly than the anchor in use.
	anchorIfTighter
	// newAnchor: Redis made it after sent (a stream's first renewal,
	// moments after it opened); it replaces the anchor in use, so an
	// offset that drifts is measured afresh.
	newAnchor
)

// renewed records a lease confirmed by lockd, produced by Redis after
// sent when anchoring says so.
func (k *keeper) renewed(l *lockdv1.Lease, sent time.Time, a anchoring) {
	k.mu.Lock()
	defer k.mu.Unlock()
	exp := l.GetExpireTime().AsTime()
	if a != noAnchor {
		// Redis read its clock at most expire_time - ttl (a renewal sets
		// the expiry ttl from then; a re-entry never less), after sent.
		redisNow := exp.Add(-l.GetTtl().AsDuration())
		if a == newAnchor || k.anchorRedis.IsZero() || sent.Sub(redisNow) > k.anchorLocal.Sub(k.anchorRedis) {
			k.anchorLocal, k.anchorRedis = sent, redisNow
		}
		if a == newAnchor {
			k.loose = false
		}
	}
	if k.lease == nil || !exp.Before(k.lease.GetExpireTime().AsTime()) {
		k.lease = l
	}
}

func (k *keeper) isLoose() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.loose
}

// deadline is when the lease counts as lost unless a renewal is confirmed:
// its expiry on the local clock (the earliest it can be), less a tenth of
// its ttl.
func (k *keeper) deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadlineLocked()
}

func (k *keeper) deadlineLocked() time.Time {
	exp := k.lease.GetExpireTime().AsTime()
	ttl := k.lease.GetTtl().AsDuration()
	return k.anchorLocal.Add(exp.Sub(k.anchorRedis)).Add(-ttl / 10)
}

// timers returns how long until the lease counts as lost, and until a
// stream that sent no renewal is given up for the next replica: a third
// of the ttl before the deadline, more than one renewal (every ttl/3)
// late. Until a loose grant is confirmed there is no deadline yet, and a
// silent replica is given up after the call timeout.
func (k *keeper) timers() (expiry, stall time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loose {
		return time.Duration(1<<63 - 1), k.c.opts.callTimeout
	}
	left := time.Until(k.deadlineLocked())
	return left, left - k.lease.GetTtl().AsDuration()/3
}

func (k *keeper) fail(err error) {
	k.lose.Do(func() {
		k.err = err
		close(k.lost)
	})
}

var errExpired = errors.New("no renewal confirmed before the lease would run out")

// kaStream is one KeepAlive stream of a keeper.
type kaStream struct {
	r        int       // the replica
	opened   time.Time // before the stream's first renewal ran
	anchored bool      // its first renewal arrived
	cancel   context.CancelFunc
}

// kaEvent is a renewal on a stream, or its end (err set).
type kaEvent struct {
	s     *kaStream
	lease *lockdv1.Lease
	err   error
}

// run keeps the lease alive until ctx ends or the lease is lost. It relies
// on one stream (cur). When that replica falls silent, it opens a second
// stream on the next replica (next) and keeps the first until the second
// confirms a renewal, so the lease never goes without a stream that could
// release it when this process dies; when a stream fails, it resumes on the
// next replica, backing off after a round of failures.
func (k *keeper) run(ctx context.Context) {
	defer close(k.done)
	events := make(chan kaEvent)
	open := func(r int) *kaStream {
		sctx, cancel := context.WithCancel(ctx)
		s := &kaStream{r: r, opened: time.Now(), cancel: cancel}
		go k.stream(sctx, s, events)
		return s
	}
	cur := open(k.c.current())
	var next *kaStream // nil: none; cur is nil only while backing off
	defer func() {
		for _, s := range []*kaStream{cur, next} {
			if s != nil {
				s.cancel()
			}
		}
	}()

	left, silent := k.timers()
	expiry, stall := time.NewTimer(left), time.NewTimer(silent)
	defer expiry.Stop()
	defer stall.Stop()
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	var (
		last     error
		failures int
		pause    = 50 * time.Millisecond
	)
	for {
		select {
		case ev := <-events:
			if ev.s == nil || ev.s != cur && ev.s != next {
				continue // a stream already given up
			}
			if ev.err == nil {
				a := noAnchor
				if !ev.s.anchored {
					a, ev.s.anchored = newAnchor, true
				}
				k.renewed(ev.lease, ev.s.opened, a)
				k.confirm.Do(func() { close(k.confirmed) })
				if ev.s == next {
					// The replacement works: let the silent stream go.
					if cur != nil {
						cur.cancel()
					}
					cur, next = next, nil
				}
				failures, pause = 0, 50*time.Millisecond
				left, silent := k.timers()
				resetTimer(expiry, left)
				resetTimer(stall, silent)
				continue
			}
			switch err := ev.err; {
			case ctx.Err() != nil:
				return
			case status.Code(err) == codes.NotFound:
				if !k.releasing.Load() {
					k.fail(fmt.Errorf("%w: key %q: %v", ErrLost, k.key, status.Convert(err).Message()))
				}
				return
			case !retryable(ctx, err, true):
				// lockd refuses to keep it (auth, bad input): it will
				// run out.
				k.fail(fmt.Errorf("%w: key %q: KeepAlive refused: %v", ErrLost, k.key, err))
				return
			}
			last = ev.err
			k.c.moveFrom(ev.s.r)
			if ev.s == next {
				next = nil
				continue // cur goes on; the stall timer tries again
			}
			if next != nil {
				cur, next = next, nil
				continue
			}
			if failures++; failures%len(k.c.conns) != 0 {
				cur = open(k.c.current())
				continue
			}
			cur = nil
			resetTimer(retry, mrand.N(pause)+pause/2)
			pause = min(2*pause, time.Second)
		case <-retry.C:
			cur = open(k.c.current())
		case <-stall.C:
			if cur == nil {
				continue // backing off: the retry opens a stream
			}
			// The replica has sent no renewal for too long: open a
			// stream on the next one, keeping this one until it works.
			if next != nil {
				next.cancel()
			}
			k.c.moveFrom(cur.r)
			next = open(k.c.current())
			left, _ := k.timers()
			resetTimer(stall, max(left/2, time.Millisecond))
		case <-expiry.C:
			k.fail(fmt.Errorf("%w: key %q: %v (last error: %v)", ErrLost, k.key, errExpired, last))
			return
		case <-ctx.Done():
			return
		}
	}
}

// stream runs one KeepAlive stream on replica s.r and reports its renewals
// and its end to events, until ctx ends.
func (k *keeper) stream(ctx context.Context, s *kaStream, events chan<- kaEvent) {
	report := func(ev kaEvent) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	st, err := k.c.locks[s.r].KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: k.key, LeaseId: k.id, ReleaseOnClose: k.releaseOnClose})
	for err == nil {
		var msg *lockdv1.KeepAliveResponse
		if msg, err = st.Recv(); err == nil && !report(kaEvent{s: s, lease: msg.GetLease()}) {
			return
		}
	}
	report(kaEvent{s: s, err: err})
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}
