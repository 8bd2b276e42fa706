package client

import "context"

// Election is one election of a Client, for a candidate that takes part in
// it again and again, in the manner of Curator's LeaderLatch.
type Election struct {
	c    *Client
	name string
	opts []LockOption
}

// NewElection returns the election name; opts (WithTTL, WithOwner) apply to
// each Campaign.
func (c *Client) NewElection(name string, opts ...LockOption) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits until elected with value, or ctx ends; see
// Client.Campaign.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	return e.c.Campaign(ctx, e.name, value, e.opts...)
}

// Leader returns the current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	return e.c.Leader(ctx, e.name)
}

// Observe follows the election's states; see Client.Observe.
func (e *Election) Observe(ctx context.Context) (<-chan Observation, error) {
	return e.c.Observe(ctx, e.name)
}

// Run takes part in the election until ctx ends: it campaigns with value,
// and once elected calls lead with a context that ends as soon as the
// leadership is lost (or ctx ends). When leadership is lost, Run waits for
// lead to return and campaigns again, for a new term. When lead returns
// while still leader, Run resigns and returns lead's error (nil: the work
// is done). Run returns ctx's error when ctx ends, and Campaign's when it
// fails otherwise.
func (e *Election) Run(ctx context.Context, value string, lead func(ctx context.Context, l *Leadership) error) error {
	for {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			return err
		}
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.Lost():
				cancel()
			case <-lctx.Done():
			}
		}()
		err = lead(lctx, l)
		cancel()
		if l.Err() != nil && ctx.Err() == nil {
			continue // lost: campaign again
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.opts.callTimeout)
		_ = l.Resign(rctx)
		rcancel()
		if err != nil {
			return err
		}
		return ctx.Err()
	}
}
