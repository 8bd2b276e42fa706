package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

var (
	// ErrNoLeader is returned by Leader when the election has no leader.
	ErrNoLeader = errors.New("client: the election has no leader")
	// ErrResigned is returned by Resign of a leadership already resigned,
	// and by Proclaim after Resign.
	ErrResigned = errors.New("client: leadership already resigned")
)

// Election is one election: its candidates campaign (Campaign, or Run for
// a candidate that takes part again and again, in the manner of Curator's
// LeaderLatch), anyone can ask for its leader or observe it.
type Election struct {
	c    *Client
	name string
	opts leaseOptions
}

// NewElection returns the election name; opts (WithTTL, WithOwner) apply to
// each of its campaigns.
func (c *Client) NewElection(name string, opts ...CampaignOption) *Election {
	return &Election{c: c, name: name, opts: campaignOptions(opts)}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Leader describes an election's leader.
type Leader struct {
	// Name is the election's name.
	Name string
	// Value is what the leader proclaims (for example its address).
	Value string
	// Owner names the leader, as it named itself when campaigning.
	Owner string
	// Term is the leadership's fencing token: greater than every term of
	// the election before it.
	Term uint64
	// ExpireTime is when the leadership ends unless renewed, by Redis's
	// clock.
	ExpireTime time.Time
}

func leaderOf(l *lockdv1.Leader) Leader {
	return Leader{Name: l.GetName(), Value: l.GetValue(), Owner: l.GetOwner(), Term: l.GetTerm(), ExpireTime: l.GetExpireTime().AsTime()}
}

// Leadership is a candidate's leadership of an election, won by
// Election.Campaign and kept alive by the client until Resign. Its methods are safe for
// concurrent use.
type Leadership struct {
	c       *Client
	name    string
	owner   string
	leaseID string
	term    uint64

	mu     sync.Mutex
	value  string
	expire time.Time // by Redis's clock, as last confirmed
	// anchorLocal came before Redis's clock read anchorRedis (see keeper).
	anchorLocal, anchorRedis time.Time
	ttl                      time.Duration

	resigned atomic.Bool
	lost     chan struct{}
	lose     sync.Once
	err      error
	stop     context.CancelFunc // ends the Campaign stream
	done     chan struct{}
}

// Name returns the election's name.
func (l *Leadership) Name() string { return l.name }

// Owner returns the leader's owner name.
func (l *Leadership) Owner() string { return l.owner }

// Term returns the leadership's term, a fencing token greater than every
// term of the election before it. Pass it with every write the leader makes,
// and have the resources reject terms lower than one they have seen.
func (l *Leadership) Term() uint64 { return l.term }

// LeaseID returns the leadership's lease.
func (l *Leadership) LeaseID() string { return l.leaseID }

// Value returns the value the leader proclaims.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// ExpireTime returns when the leadership ends unless renewed, by Redis's
// clock, as last confirmed.
func (l *Leadership) ExpireTime() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expire
}

// Lost returns a channel closed when the leadership is lost: its Campaign
// stream ended (lockd found the leadership gone, or the replica went away),
// or no renewal was confirmed before it would run out, less a tenth of its
// ttl. It closes before lockd can elect another candidate; the client never
// resumes a leadership it reported lost. It never closes after Resign.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Err returns why the leadership was lost (matching ErrLost), or nil.
func (l *Leadership) Err() error {
	select {
	case <-l.lost:
		return l.err
	default:
		return nil
	}
}

// Proclaim sets the leader's value, for observers to see. A leadership
// lost meanwhile gives an error matching ErrLost.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if l.resigned.Load() {
		return ErrResigned
	}
	if err := l.Err(); err != nil {
		return err
	}
	var res *lockdv1.ProclaimResponse
	err := l.c.retry(ctx, false, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, l.c.opts.callTimeout)
		defer cancel()
		var err error
		res, err = l.c.elects[r].Proclaim(actx, &lockdv1.ProclaimRequest{Name: l.name, LeaseId: l.leaseID, Value: value})
		return err
	})
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: election %q: %v", ErrLost, l.name, status.Convert(err).Message())
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.value = res.GetLeader().GetValue()
	l.mu.Unlock()
	return nil
}

// Resign ends the leadership at once, so the next candidate is elected, and
// stops keeping it alive. A leadership lost meanwhile gives an error
// matching ErrLost; a second Resign gives ErrResigned. Even when lockd
// cannot be reached the leadership is no longer kept alive, and ends at its
// ttl.
func (l *Leadership) Resign(ctx context.Context) error {
	if !l.resigned.CompareAndSwap(false, true) {
		return ErrResigned
	}
	if err := l.Err(); err != nil {
		l.stop()
		<-l.done
		return err
	}
	err := l.c.resign(ctx, l.name, l.leaseID)
	l.stop()
	<-l.done
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: election %q: %v", ErrLost, l.name, status.Convert(err).Message())
	}
	return err
}

func (l *Leadership) fail(err error) {
	l.lose.Do(func() {
		l.err = err
		close(l.lost)
	})
}

// renewed records a confirmed leadership.
func (l *Leadership) renewed(m *lockdv1.Leader) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.value = m.GetValue()
	if exp := m.GetExpireTime().AsTime(); exp.After(l.expire) {
		l.expire = exp
	}
}

// deadline is when the leadership counts as lost unless a renewal is
// confirmed: its expiry on the local clock (the earliest it can be), less a
// tenth of its ttl.
func (l *Leadership) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.anchorLocal.Add(l.expire.Sub(l.anchorRedis)).Add(-l.ttl / 10)
}

// Campaign enters the election with value, waits until elected (or ctx
// ends), and returns the leadership, kept alive until Resign. While it
// waits, a replica that goes away is left for the next; once elected, the
// leadership lives and dies with its Campaign stream (see
// Leadership.Lost).
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	c, name := e.c, e.name
	owner := e.opts.owner
	if owner == "" {
		owner = c.newOwner()
	}
	req := &lockdv1.CampaignRequest{Name: name, Value: value, Owner: owner}
	if e.opts.ttl > 0 {
		req.Ttl = durationpb.New(e.opts.ttl)
	}
	var (
		first  *lockdv1.Leader
		msgs   lockdv1.ElectionService_CampaignClient
		stop   context.CancelFunc
		giveUp time.Time
	)
	for {
		// The stream outlives ctx once elected: it ends with the client.
		sctx, cancel := context.WithCancel(c.ctx)
		unhook := context.AfterFunc(ctx, cancel)
		r := c.current()
		st, err := c.elects[r].Campaign(sctx, req)
		var m *lockdv1.CampaignResponse
		if err == nil {
			m, err = st.Recv()
		}
		hooked := unhook()
		if err == nil && hooked {
			first, msgs, stop = m.GetLeader(), st, cancel
			break
		}
		// Closing the stream resigns a leadership won as ctx ended.
		cancel()
		if c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		if err == nil || ctx.Err() != nil {
			return nil, ctxErr(ctx, ctx.Err())
		}
		if !retryable(ctx, err, true) {
			return nil, err
		}
		// The replica went away while the candidate waited: wait on the
		// next one, under the same owner, so a leadership won on the
		// first but not reported is taken up rather than waited out.
		c.moveFrom(r)
		if giveUp.IsZero() {
			giveUp = time.Now().Add(c.opts.retryFor)
		} else if time.Now().After(giveUp) {
			return nil, err
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	l := &Leadership{
		c: c, name: name, owner: first.GetOwner(), leaseID: first.GetLeaseId(), term: first.GetTerm(),
		value: first.GetValue(), expire: first.GetExpireTime().AsTime(),
		lost: make(chan struct{}), stop: stop, done: make(chan struct{}),
	}
	// The election may have come long after the stream opened: one Renew
	// tells when Redis last renewed it, by a clock read after it was sent.
	if err := l.anchor(ctx); err != nil {
		stop()
		if status.Code(err) == codes.NotFound {
			err = fmt.Errorf("%w: election %q: %v", ErrLost, name, status.Convert(err).Message())
		}
		return nil, err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		l.run(msgs)
	}()
	return l, nil
}

// anchor renews the leadership once, to learn its ttl and to relate its
// expiry to the local clock.
func (l *Leadership) anchor(ctx context.Context) error {
	var (
		sent time.Time
		res  *lockdv1.RenewResponse
	)
	err := l.c.retry(ctx, true, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, l.c.opts.callTimeout)
		defer cancel()
		sent = time.Now()
		var err error
		res, err = l.c.locks[r].Renew(actx, &lockdv1.RenewRequest{Key: l.name, LeaseId: l.leaseID})
		return err
	})
	if err != nil {
		return err
	}
	ls := res.GetLease()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ttl = ls.GetTtl().AsDuration()
	exp := ls.GetExpireTime().AsTime()
	l.anchorLocal, l.anchorRedis = sent, exp.Add(-l.ttl)
	if exp.After(l.expire) {
		l.expire = exp
	}
	return nil
}

// run follows the Campaign stream until the leadership ends.
func (l *Leadership) run(st lockdv1.ElectionService_CampaignClient) {
	defer close(l.done)
	defer l.stop()
	type event struct {
		m   *lockdv1.Leader
		err error
	}
	events := make(chan event, 1)
	go func() {
		for {
			m, err := st.Recv()
			select {
			case events <- event{m.GetLeader(), err}:
			case <-l.c.ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	expiry := time.NewTimer(time.Until(l.deadline()))
	defer expiry.Stop()
	for {
		select {
		case ev := <-events:
			if ev.err == nil {
				l.renewed(ev.m)
				resetTimer(expiry, time.Until(l.deadline()))
				continue
			}
			if l.resigned.Load() || l.c.ctx.Err() != nil {
				return
			}
			if status.Code(ev.err) == codes.NotFound {
				l.fail(fmt.Errorf("%w: election %q: %v", ErrLost, l.name, status.Convert(ev.err).Message()))
				return
			}
			// The replica went away, or refused to go on: the leadership
			// is over for this candidate, whatever Redis still holds.
			l.fail(fmt.Errorf("%w: election %q: the campaign stream ended: %v", ErrLost, l.name, ev.err))
			l.c.goResign(l.name, l.leaseID)
			return
		case <-expiry.C:
			if l.resigned.Load() {
				return
			}
			l.fail(fmt.Errorf("%w: election %q: %v", ErrLost, l.name, errExpired))
			l.c.goResign(l.name, l.leaseID)
			return
		case <-l.c.ctx.Done():
			return
		}
	}
}

// resign ends the leadership lease_id of name.
func (c *Client) resign(ctx context.Context, name, leaseID string) error {
	return c.retry(ctx, false, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		defer cancel()
		_, err := c.elects[r].Resign(actx, &lockdv1.ResignRequest{Name: name, LeaseId: leaseID})
		return err
	})
}

// goResign ends, in the background, a leadership reported lost whose lease
// may still be held in Redis, so the next candidate need not wait it out.
func (c *Client) goResign(name, leaseID string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.callTimeout)
		defer cancel()
		_ = c.resign(ctx, name, leaseID)
	}()
}

// Leader returns the election's current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	c := e.c
	var res *lockdv1.LeaderResponse
	err := c.retry(ctx, false, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		defer cancel()
		var err error
		res, err = c.elects[r].Leader(actx, &lockdv1.LeaderRequest{Name: e.name})
		return err
	})
	if status.Code(err) == codes.NotFound {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, err
	}
	return leaderOf(res.GetLeader()), nil
}
