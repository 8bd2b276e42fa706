package client

import (
	"context"
	mrand "math/rand/v2"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Observation is one state of an election: its leader, or that it has
// none.
type Observation struct {
	// HasLeader is false when the election has no leader.
	HasLeader bool
	// Leader is the leader; set only when HasLeader.
	Leader Leader
}

// Observe follows the election: the channel it returns gets the
// current state at once (its leader, or that it has none), then each
// change (a new leader, a new value, no leader). A reader that falls behind
// gets the newest state, not every one in between. Terms never go back on
// the channel, across replicas too: when a replica goes away the client
// follows the election through the next one. The channel is closed when
// ctx ends, when lockd refuses to go on (no permission), or when no replica
// answers for the client's retry bound; Observe returns the error of a
// first state it could not get (a bad name, say).
func (e *Election) Observe(ctx context.Context) (<-chan Observation, error) {
	c, name := e.c, e.name
	// The observer ends with the client too.
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(c.ctx, cancel)
	st, first, err := c.observe(ctx, name)
	if err != nil {
		unhook()
		cancel()
		return nil, err
	}
	out := make(chan Observation, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(out)
		defer unhook()
		defer cancel()
		o := &observer{out: out}
		o.offer(first)
		pause := 50 * time.Millisecond
		for {
			for {
				m, err := st.Recv()
				if err != nil {
					break
				}
				o.offer(m)
				pause = 50 * time.Millisecond
			}
			if ctx.Err() != nil {
				return
			}
			// The stream broke (a replica went away): follow on the next
			// one, after a pause.
			c.moveFrom(c.current())
			if sleep(ctx, mrand.N(pause)+pause/2) != nil {
				return
			}
			pause = min(2*pause, time.Second)
			var m *lockdv1.ObserveResponse
			if st, m, err = c.observe(ctx, name); err != nil {
				return
			}
			o.offer(m)
		}
	}()
	return out, nil
}

// observe opens an Observe stream and reads the election's first state.
func (c *Client) observe(ctx context.Context, name string) (lockdv1.ElectionService_ObserveClient, *lockdv1.ObserveResponse, error) {
	var (
		st    lockdv1.ElectionService_ObserveClient
		first *lockdv1.ObserveResponse
	)
	err := c.retry(ctx, true, func(ctx context.Context, r int) error {
		// The stream lives as long as ctx; only its first state is
		// bounded by the call timeout.
		sctx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(c.opts.callTimeout, cancel)
		s, err := c.elects[r].Observe(sctx, &lockdv1.ObserveRequest{Name: name})
		if err == nil {
			first, err = s.Recv()
		}
		if !t.Stop() && err == nil {
			err = context.DeadlineExceeded
		}
		if err != nil {
			cancel()
			return err
		}
		st = s
		return nil
	})
	return st, first, err
}

// observer passes states on, newest first, terms never going back.
type observer struct {
	out  chan Observation
	last *Observation
	term uint64 // the highest term passed on
}

func (o *observer) offer(m *lockdv1.ObserveResponse) {
	ob := Observation{HasLeader: m.GetHasLeader()}
	if ob.HasLeader {
		ob.Leader = leaderOf(m.GetLeader())
	}
	if ob.HasLeader && ob.Leader.Term < o.term {
		return // an older state, from a replica that lags
	}
	if l := o.last; l != nil && ob.HasLeader == l.HasLeader &&
		ob.Leader.Term == l.Leader.Term && ob.Leader.Value == l.Leader.Value && ob.Leader.Owner == l.Leader.Owner {
		return // the same state again, as a new stream starts
	}
	o.last = &ob
	o.term = max(o.term, ob.Leader.Term)
	for {
		select {
		case o.out <- ob:
			return
		default:
		}
		select {
		case <-o.out: // the reader has not taken the older state: drop it
		default:
		}
	}
}
