// Package misuse holds calls of the client that must not compile, each
// marked with the compiler error it gets (a regular expression), beside
// well-formed calls that must; TestMisuseDoesNotCompile builds it.
package misuse

import (
	"context"
	"time"

	"github.com/lockd/lockd/client"
)

func misuse(ctx context.Context, c *client.Client) {
	c.NewMutex("k", client.WithMode(client.Read))       // want "undefined: client.WithMode"
	c.NewMutex("k", client.WithWait(time.Second))       // want "does not implement client.MutexOption"
	c.NewMutex("k", client.WithOwner("worker-1"))       // want "does not implement client.MutexOption"
	c.NewRWMutex("k", client.WithWait(0))               // want "does not implement client.MutexOption"
	c.Acquire(ctx, "k", client.WithMode(client.Permit)) // want "undefined: client.WithMode"
	c.NewElection("e", client.WithWait(time.Second))    // want "does not implement client.CampaignOption"
	c.Campaign(ctx, "e", "v")                           // want "c.Campaign undefined"
	c.Leader(ctx, "e")                                  // want "c.Leader undefined"
	c.Observe(ctx, "e")                                 // want "c.Observe undefined"
	c.Acquire(ctx, "k", client.WithCost(2))             // want "does not implement client.AcquireOption"
	c.Take(ctx, "k", client.Rate{}, client.WithWait(0)) // want "does not implement client.TakeOption"
}

func wellFormed(ctx context.Context, c *client.Client) {
	c.NewMutex("k", client.WithTTL(time.Second))
	c.NewRWMutex("k", client.WithTTL(time.Second))
	c.Acquire(ctx, "k", client.WithTTL(time.Second), client.WithWait(0), client.WithOwner("worker-1"))
	c.AcquireRead(ctx, "k", client.WithWait(0))
	c.AcquirePermit(ctx, "k", 2, client.WithOwner("worker-1"))
	e := c.NewElection("e", client.WithTTL(time.Second), client.WithOwner("worker-1"))
	e.Campaign(ctx, "v")
	e.Leader(ctx)
	e.Observe(ctx)
	c.Take(ctx, "k", client.Rate{Limit: 1, Period: time.Second}, client.WithCost(1))
	c.Wait(ctx, "k", client.Rate{Limit: 1, Period: time.Second})
}
