// Package clocktest is a manual clock for tests: Now stands still until
// Advance moves it. It is safe for concurrent use.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a manual clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's reading; pass it where a func() time.Time is
// wanted.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
