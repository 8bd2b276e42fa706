package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNotLocked is returned by Unlock and RUnlock of a lock not held.
var ErrNotLocked = errors.New("client: not locked")

// Mutex is a distributed mutual exclusion lock on one key, in the manner of
// sync.Mutex: Lock waits, TryLock does not, Unlock releases. It is not
// reentrant (a second Lock waits for the first Unlock, from any goroutine
// or process): each lock has an owner of its own. While locked, Lease
// reports the lease: its fencing token, and its Lost channel.
type Mutex struct {
	c    *Client
	key  string
	opts leaseOptions

	mu    sync.Mutex
	lease *Lease
}

// NewMutex returns a Mutex on key; opts (WithTTL) apply to each lock.
func (c *Client) NewMutex(key string, opts ...MutexOption) *Mutex {
	return &Mutex{c: c, key: key, opts: mutexOptions(opts)}
}

// Lock waits until the key is locked, or ctx ends.
func (m *Mutex) Lock(ctx context.Context) error {
	return m.lock(ctx, -1)
}

// TryLock locks the key if nobody holds it, else returns an error matching
// ErrLocked (a *LockedError: who holds the key, and for how long).
func (m *Mutex) TryLock(ctx context.Context) error {
	return m.lock(ctx, 0)
}

// lock takes the key, waiting for at most wait (< 0: until ctx ends).
func (m *Mutex) lock(ctx context.Context, wait time.Duration) error {
	o := m.opts
	o.wait = wait
	l, err := m.c.acquire(ctx, m.key, Write, 0, o)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.lease = l
	m.mu.Unlock()
	return nil
}

// Unlock releases the lock. A lease lost meanwhile gives an error matching
// ErrLost; a Mutex not locked gives ErrNotLocked.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	l := m.lease
	m.lease = nil
	m.mu.Unlock()
	if l == nil {
		return ErrNotLocked
	}
	return l.Release(ctx)
}

// Lease returns the lease of the lock while it is held, else nil.
func (m *Mutex) Lease() *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// RWMutex is a distributed reader/writer lock on one key, in the manner of
// sync.RWMutex: any number of readers (in any processes), or one writer.
// While a writer waits, new readers wait too, so writers do not starve.
type RWMutex struct {
	c    *Client
	key  string
	opts leaseOptions

	mu      sync.Mutex
	writer  *Lease
	readers []*Lease
}

// NewRWMutex returns an RWMutex on key; opts (WithTTL) apply to each lock.
func (c *Client) NewRWMutex(key string, opts ...MutexOption) *RWMutex {
	return &RWMutex{c: c, key: key, opts: mutexOptions(opts)}
}

// Lock waits until the key is locked for writing, or ctx ends.
func (rw *RWMutex) Lock(ctx context.Context) error {
	return rw.lock(ctx, Write, -1)
}

// TryLock locks the key for writing if nobody holds it, else returns an
// error matching ErrLocked (a *LockedError).
func (rw *RWMutex) TryLock(ctx context.Context) error {
	return rw.lock(ctx, Write, 0)
}

// RLock waits until the key is locked for reading, or ctx ends.
func (rw *RWMutex) RLock(ctx context.Context) error {
	return rw.lock(ctx, Read, -1)
}

// TryRLock locks the key for reading if no writer holds or waits for it,
// else returns an error matching ErrLocked (a *LockedError).
func (rw *RWMutex) TryRLock(ctx context.Context) error {
	return rw.lock(ctx, Read, 0)
}

// lock takes the key in mode, waiting for at most wait (< 0: until ctx
// ends).
func (rw *RWMutex) lock(ctx context.Context, mode Mode, wait time.Duration) error {
	o := rw.opts
	o.wait = wait
	l, err := rw.c.acquire(ctx, rw.key, mode, 0, o)
	if err != nil {
		return err
	}
	rw.mu.Lock()
	if mode == Write {
		rw.writer = l
	} else {
		rw.readers = append(rw.readers, l)
	}
	rw.mu.Unlock()
	return nil
}

// Unlock releases the write lock.
func (rw *RWMutex) Unlock(ctx context.Context) error {
	rw.mu.Lock()
	l := rw.writer
	rw.writer = nil
	rw.mu.Unlock()
	if l == nil {
		return ErrNotLocked
	}
	return l.Release(ctx)
}

// RUnlock releases one read lock taken through this RWMutex.
func (rw *RWMutex) RUnlock(ctx context.Context) error {
	rw.mu.Lock()
	var l *Lease
	if n := len(rw.readers); n > 0 {
		l = rw.readers[n-1]
		rw.readers = rw.readers[:n-1]
	}
	rw.mu.Unlock()
	if l == nil {
		return ErrNotLocked
	}
	return l.Release(ctx)
}

// Lease returns the write lease while the write lock is held, else nil.
func (rw *RWMutex) Lease() *Lease {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.writer
}
