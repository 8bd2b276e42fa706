package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"
)

// Elections. An election is the write lock of its name: candidates wait for
// it as writers do (Acquire, however the grant reaches them), the one
// granted it leads, and its fencing token is the leadership's term, so
// resources fence off a deposed leader as they fence off a lock holder. The
// winner records its value at once (proclaim.lua), and only then is it seen
// as the leader: the record names the leader's lease with its value in its
// ev field (see common.lua), so the leader is never seen without its value.
// A winner that cannot record its value gives the lock back.
//
// Leadership changes are published on the election's own channel; a
// leader whose lease simply runs out publishes nothing, so observers also
// re-check at the leader's expiry and every MaxRecheck. Every state an
// observer gets is read from Redis at that moment, judged by Redis's clock,
// never derived from a message, and a term lower than one already reported
// is never reported: an observer never sees a stale or a deposed leader.

var (
	// ErrNoLeader is returned by Leader when the election has no leader.
	ErrNoLeader = errors.New("redislock: election has no leader")
	// ErrNotLeader is returned for a lease that is held but does not lead
	// the election (it does not hold the name's lock for writing).
	ErrNotLeader = errors.New("redislock: lease does not lead the election")
	// ErrInvalidValue is returned for a leader's value longer than
	// MaxValueBytes or not valid UTF-8.
	ErrInvalidValue = errors.New("redislock: invalid value")
)

// MaxValueBytes bounds a leader's value.
const MaxValueBytes = 4096

// Leader is an election's leader.
type Leader struct {
	// Name is the election's name.
	Name string
	// Value is what the leader proclaims.
	Value string
	// Owner names the leader.
	Owner string
	// Term is the leadership's fencing token: strictly greater than every
	// term and fencing token of the name before it.
	Term uint64
	// TTL is the span the leadership was last granted or renewed for.
	TTL time.Duration
	// ExpireTime is when the leadership ends unless renewed, by Redis's
	// clock.
	ExpireTime time.Time
}

// Observation is one state of an election.
type Observation struct {
	// Elected is true when the election has a leader.
	Elected bool
	// Leader is the leader; zero unless Elected.
	Leader Leader
}

// CampaignRequest enters a candidate in an election.
type CampaignRequest struct {
	// Name is the election's name; see ValidateKey.
	Name string
	// Value is the leader's value once elected, at most MaxValueBytes.
	Value string
	// Owner names the candidate. A candidate campaigning with the owner of
	// the current leader resumes that leadership: the same lease and term.
	// Empty means a fresh, unique owner.
	Owner string
	// NewLeaseID is as in Request: it makes the ids of the leases the
	// campaign asks for; nil means random bits.
	NewLeaseID func() string
	// TTL is the leadership's lease; it must be at least 1ms.
	TTL time.Duration
	// BeforeWait is as in Request: called once per wait, when the
	// candidate is about to wait for the leader to go.
	BeforeWait func() (done func(), err error)
}

// campaignWait is how long one Acquire of a campaign waits; the campaign
// waits again until ctx ends.
const campaignWait = time.Hour

// Campaign waits until the candidate leads the election, until ctx ends,
// and returns its Leadership, with its value recorded and the Leadership's
// Keep the lease's newest keeper.
func (c *Client) Campaign(ctx context.Context, req CampaignRequest) (*Leadership, error) {
	if err := ValidateName(req.Name); err != nil {
		return nil, err
	}
	if err := validValue(req.Value); err != nil {
		return nil, err
	}
	ks := c.keys(req.Name)
	for {
		res, err := c.Acquire(ctx, Request{
			Key: req.Name, Mode: Write, Owner: req.Owner, NewLeaseID: req.NewLeaseID, TTL: req.TTL, Wait: campaignWait, BeforeWait: req.BeforeWait,
		})
		if err != nil {
			return nil, err
		}
		if !res.Acquired {
			continue // the wait ran out: wait again
		}
		l := res.Lease
		k := &Keeper{c: c, key: req.Name, leaseID: l.ID, id: newAttemptID(), expiry: l.sent.Add(l.remaining)}
		leader, err := c.proclaim(ctx, ks, req.Name, l.ID, req.Value, k.id)
		if err != nil {
			// Give back the hold this campaign took (a re-entry's, or the
			// whole lease), so the election does not sit without a leader
			// until the lease runs out.
			c.cleanUp(func(ctx context.Context) error {
				_, err := c.Release(ctx, req.Name, l.ID, "")
				if errors.Is(err, ErrNotHeld) {
					return nil
				}
				return err
			}, k.expiry)
			if errors.Is(err, ErrNotHeld) && ctx.Err() == nil {
				continue // the lease ran out at once: campaign again
			}
			return nil, err
		}
		return &Leadership{c: c, ks: ks, keeper: k, leader: leader}, nil
	}
}

func validValue(v string) error {
	switch {
	case len(v) > MaxValueBytes:
		return fmt.Errorf("%w: value is %d bytes, longer than %d", ErrInvalidValue, len(v), MaxValueBytes)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: value must be valid UTF-8", ErrInvalidValue)
	}
	return nil
}

func leaderOf(name, value string, l Lease) Leader {
	return Leader{Name: name, Value: value, Owner: l.Owner, Term: l.FencingToken, TTL: l.TTL, ExpireTime: l.ExpireTime}
}

// Leadership is a candidate's leadership of an election, won by Campaign.
type Leadership struct {
	c      *Client
	ks     keySet
	keeper *Keeper

	mu     sync.Mutex
	leader Leader
	kept   bool // Keep has returned: changed is not called any more
}

// LeaseID is the leadership's lease: for Proclaim and Resign.
func (l *Leadership) LeaseID() string { return l.keeper.leaseID }

// Leader is the leadership as last granted, renewed or proclaimed.
func (l *Leadership) Leader() Leader {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader
}

// Keep renews the leadership about every ttl/3 as KeepAlive does, and calls
// changed after each renewal and each change of its value, until ctx ends
// or the leadership is lost. It returns an error wrapping ErrNotHeld when
// the leadership is lost, before anyone else can be elected: its lease ran
// out or failed to renew in time, or it ended (Resign, Release) or another
// leader was seen. changed is called with the Leadership's lock held: it
// must hand the leader on and return.
func (l *Leadership) Keep(ctx context.Context, changed func(Leader)) error {
	kctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// The watch may be stuck in a read of a Redis that does not answer;
	// Keep returns without waiting for it, never later than the keeper.
	defer func() {
		l.mu.Lock()
		l.kept = true
		l.mu.Unlock()
	}()
	cur := l.Leader()
	go func() {
		err := l.c.follow(kctx, l.ks, cur.Name, false, func(o Observation) error {
			if !o.Elected || o.Leader.Term != cur.Term {
				return fmt.Errorf("%w: election %q: this leadership has ended", ErrNotHeld, cur.Name)
			}
			l.update(changed, func(cur *Leader) bool {
				if cur.Value == o.Leader.Value {
					return false
				}
				cur.Value = o.Leader.Value
				return true
			})
			return nil
		})
		if errors.Is(err, ErrNotHeld) {
			stop(err)
		}
	}()

	// The lease was just granted: renewals start a third of its ttl on.
	first := time.NewTimer(cur.TTL / 3)
	defer first.Stop()
	select {
	case <-first.C:
	case <-kctx.Done():
		return l.letGo(ctx, l.ended(ctx, kctx))
	}
	err := l.keeper.KeepAlive(kctx, 0, func(lease Lease) error {
		l.update(changed, func(cur *Leader) bool {
			cur.TTL, cur.ExpireTime = lease.TTL, lease.ExpireTime
			return true
		})
		return nil
	})
	if kctx.Err() != nil {
		err = l.ended(ctx, kctx)
	}
	return l.letGo(ctx, err)
}

// letGo passes on Keep's error. When the election's state said the
// leadership ended, the lease may be one an administrator revoked, which
// this keeper lets go of, in the background: it gives up the whole lease as
// its newest keeper (a revoked lease then runs out a moment later, any
// other goes now).
func (l *Leadership) letGo(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, ErrNotHeld) {
		k := l.keeper
		l.c.cleanUp(func(ctx context.Context) error {
			_, err := l.c.release(ctx, l.ks, k.key, k.leaseID, "", k.id)
			if errors.Is(err, ErrNotHeld) || errors.Is(err, errNotKeeper) {
				return nil
			}
			return err
		}, time.Now().Add(undoTry))
	}
	return err
}

// ended tells why Keep's context ended: the caller's, or the leadership
// seen lost.
func (l *Leadership) ended(ctx, kctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return context.Cause(kctx)
}

// update changes the leadership under its lock and, if change says it
// changed, calls changed with it.
func (l *Leadership) update(changed func(Leader), change func(*Leader) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if change(&l.leader) && !l.kept {
		changed(l.leader)
	}
}

// Resign ends the leadership, if Keep (this campaign) is still the lease's
// newest keeper: a campaign by the same owner since (here or on another
// replica) resumed it, and then Resign leaves it and reports false. It
// retries until the resignation lands, ctx ends or the lease has run out. A
// leadership already over gives ErrNotHeld.
func (l *Leadership) Resign(ctx context.Context) (bool, error) {
	k := l.keeper
	return k.retry(ctx, func(ctx context.Context) error {
		return l.c.resign(ctx, l.ks, k.key, k.leaseID, k.id)
	})
}

// Resign ends the leadership whose lease is leaseID, however many holds it
// has and whoever keeps it alive. A lease that is not held gives
// ErrNotHeld; one that does not lead the election, ErrNotLeader.
func (c *Client) Resign(ctx context.Context, name, leaseID string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return c.resign(ctx, c.keys(name), name, leaseID, "")
}

func (c *Client) resign(ctx context.Context, ks keySet, name, leaseID, keeper string) error {
	reply, err := c.run(ctx, resignScript, ks, ks.scriptKeys(false), leaseID, keeper, ks.channel, ks.leader, c.publish)
	if err != nil {
		return err
	}
	switch status(reply) {
	case 1:
		c.obs.Released(Write, time.Duration(intAt(reply, 1))*time.Millisecond)
		return nil
	case -3:
		return errNotKeeper
	case -6:
		return fmt.Errorf("%w: election %q", ErrNotLeader, name)
	}
	return notHeld(name)
}

// Proclaim sets the value of the leader whose lease is leaseID and returns
// the leadership. A lease that is not held gives ErrNotHeld; one that does
// not lead the election, ErrNotLeader.
func (c *Client) Proclaim(ctx context.Context, name, leaseID, value string) (Leader, error) {
	if err := ValidateName(name); err != nil {
		return Leader{}, err
	}
	if err := validValue(value); err != nil {
		return Leader{}, err
	}
	return c.proclaim(ctx, c.keys(name), name, leaseID, value, "")
}

// proclaim runs proclaim.lua; keeper, if set, becomes the lease's newest.
func (c *Client) proclaim(ctx context.Context, ks keySet, name, leaseID, value, keeper string) (Leader, error) {
	reply, err := c.run(ctx, proclaimScript, ks, ks.scriptKeys(false), leaseID, value, ks.leader, c.publish, keeper)
	if err != nil {
		return Leader{}, err
	}
	switch status(reply) {
	case 1:
		l, err := parseLease(name, reply)
		return leaderOf(name, value, l), err
	case -6:
		return Leader{}, fmt.Errorf("%w: election %q", ErrNotLeader, name)
	}
	return Leader{}, notHeld(name)
}

// Leader returns the election's current leader, or ErrNoLeader.
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	if err := ValidateName(name); err != nil {
		return Leader{}, err
	}
	o, _, err := c.readLeader(ctx, c.keys(name), name)
	if err != nil {
		return Leader{}, err
	}
	if !o.Elected {
		return Leader{}, fmt.Errorf("%w: election %q", ErrNoLeader, name)
	}
	return o.Leader, nil
}

// readLeader reads the election's state, and how long its leader's lease
// still runs by Redis's clock.
func (c *Client) readLeader(ctx context.Context, ks keySet, name string) (Observation, time.Duration, error) {
	reply, err := leaderScript.Run(ctx, c.rdb, ks.scriptKeys(false)).Slice()
	if err != nil {
		return Observation{}, 0, err
	}
	if status(reply) != 1 || len(reply) != 7 {
		return Observation{}, 0, nil
	}
	now, expire := intAt(reply, 1), intAt(reply, 6)
	return Observation{Elected: true, Leader: Leader{
		Name:       name,
		Term:       uint64(intAt(reply, 2)),
		Owner:      strAt(reply, 3),
		Value:      strAt(reply, 4),
		TTL:        time.Duration(intAt(reply, 5)) * time.Millisecond,
		ExpireTime: time.UnixMilli(expire),
	}}, time.Duration(expire-now) * time.Millisecond, nil
}

// Observe calls seen with the election's state at once, then with every
// change (a new leader, a new value, no leader), until ctx ends, seen
// returns an error, or Redis cannot be read (the error: the state can no
// longer be vouched for). Renewals of the same leadership are not changes.
// A leader whose term is lower than one already reported is reported as
// no leader.
func (c *Client) Observe(ctx context.Context, name string, seen func(Observation) error) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return c.follow(ctx, c.keys(name), name, true, seen)
}

// follow reads the election's state at once and whenever its channel or
// the lock's says something changed, and, with recheck, at the leader's
// expiry and at least every MaxRecheck (messages may be lost); it calls
// seen with each state that differs from the last one, terms never going
// back.
func (c *Client) follow(ctx context.Context, ks keySet, name string, recheck bool, seen func(Observation) error) error {
	// Subscribe first, so no change after the first read goes unnoticed.
	forever := time.Now().Add(100 * 365 * 24 * time.Hour)
	elected, doneElected, err := c.subs.subscribe(ctx, ks.leader, interest{all: true}, forever, c.maxRecheck)
	if err != nil {
		return err
	}
	defer doneElected()
	released, doneReleased, err := c.subs.subscribe(ctx, ks.channel, interest{all: true}, forever, c.maxRecheck)
	if err != nil {
		return err
	}
	defer doneReleased()

	var (
		last     Observation
		reported bool
		term     uint64
		until    time.Time // the reported leader's lease, by the local clock
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// A read that Redis does not answer in time, or before the
		// leader last reported is known to lose its lease, ends the
		// watch: its state can no longer be vouched for.
		sent := time.Now()
		deadline := sent.Add(readTimeout)
		if last.Elected && until.Before(deadline) {
			deadline = until
		}
		if least := sent.Add(minReadTimeout); deadline.Before(least) {
			deadline = least
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		o, left, err := c.readLeader(rctx, ks, name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("redislock: election %q could not be read: %w", name, err)
		}
		if o.Elected {
			until = sent.Add(left)
		}
		if o.Elected && o.Leader.Term < term {
			// Redis lost writes (a failover to a lagging replica): this
			// leadership was over before one already reported began.
			o = Observation{}
		}
		if !reported || changed(last, o) {
			if err := seen(o); err != nil {
				return err
			}
			last, reported = o, true
			if o.Elected {
				term = o.Leader.Term
			}
		}
		var tick <-chan time.Time
		if recheck {
			next := c.maxRecheck
			if o.Elected {
				// Before the lease as read runs out, so a renewal is seen
				// in time; near its end, just past it (measured from
				// before the read).
				left := time.Until(sent.Add(left))
				if left > earlyRecheck {
					next = min(next, left*3/4)
				} else {
					next = min(next, left+time.Millisecond)
				}
			}
			timer.Reset(max(next, time.Millisecond))
			tick = timer.C
		}
		select {
		case <-elected:
		case <-released:
		case <-tick:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

const (
	// readTimeout bounds each read of an election's state by a watch.
	readTimeout = 2 * time.Second
	// minReadTimeout is the least time a read is given, however close the
	// reported leader's expiry.
	minReadTimeout = 250 * time.Millisecond
	// earlyRecheck: a leader's lease with more than this left is re-read
	// at three quarters of what is left, one with less just past its end.
	earlyRecheck = time.Second
)

// changed reports whether an observer who saw a is told b: a new leader or
// value, or no leader any more.
func changed(a, b Observation) bool {
	return a.Elected != b.Elected || a.Leader.Term != b.Leader.Term || a.Leader.Value != b.Leader.Value || a.Leader.Owner != b.Leader.Owner
}
