package client

import "context"

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
