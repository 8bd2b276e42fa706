// Package faults is lockd's fault-injection suite: it runs lockd processes on
// real Redis servers, has many clients contend for a few keys while faults
// are injected, records every call in a [History], and checks the history
// against the lock contract with [Check].
//
// Every hold writes to a [Fenced] resource, which rejects writes carrying a
// lower fencing token than one it has accepted, and to a [Plain] resource,
// which records overlapping writers. The checker counts violations; it never
// judges how fast something happened, so a loaded machine makes runs slower,
// not red.
package faults

import (
	"sort"
	"sync"
	"time"
)

// Op is the kind of a recorded event.
type Op uint8

const (
	// OpAcquire is an Acquire call: granted (OK) or not, or failed (Err).
	OpAcquire Op = iota + 1
	// OpRelease is a Release call. Final marks the release the holder meant
	// as its last: from its call on, the holder no longer claims the lease.
	OpRelease
	// OpRenew is a renewal the holder heard of (a KeepAlive message or a
	// Renew reply), with the lease's new expiry.
	OpRenew
	// OpLost is lockd telling the holder that its lease is lost
	// (NOT_FOUND from KeepAlive or Renew).
	OpLost
	// OpWatch is the holder starting to read a KeepAlive stream: from its
	// return on, lockd can tell the holder of a loss.
	OpWatch
	// OpUnwatch is the holder's KeepAlive stream ending without news of a
	// loss (the connection broke, the replica went away).
	OpUnwatch
	// OpAbandon is the holder giving the lease up without a release: its
	// stream is closed, or its known expiry passed while lockd could not be
	// reached.
	OpAbandon
	// OpWrite is a write to the fenced resource; OK when it was accepted.
	OpWrite
)

var opNames = map[Op]string{
	OpAcquire: "acquire", OpRelease: "release", OpRenew: "renew", OpLost: "lost",
	OpWatch: "watch", OpUnwatch: "unwatch", OpAbandon: "abandon", OpWrite: "write",
}

// String names the op.
func (o Op) String() string { return opNames[o] }

// Event is one recorded call or observation, stamped by the local clock.
// Redis runs on the same host, so its clock (expiry times) and the local
// one are the same clock.
type Event struct {
	Op     Op
	Client int    // which client made the call
	Key    string // the lock's key
	Lease  string // lease id, when known
	Token  uint64 // fencing token of the lease (or of the write)
	Write  bool   // the lease is a write hold (Acquire/WLock), not a read hold
	Call   time.Time
	Return time.Time
	Expire time.Time // the lease's expiry as the reply reported it
	OK     bool      // granted; write accepted
	Final  bool      // OpRelease: the holder meant to end the lease
	Err    string    // the call failed: its gRPC code
	// HoldCount is the lease's hold_count as a grant or a Release answered
	// it; 0 when unknown.
	HoldCount uint32
	// TTL is the lease's ttl as a grant or renewal answered it: Redis made
	// a new lease or renewal at Expire - TTL by its clock. 0 when unknown.
	TTL time.Duration
	// Async marks an OpRelease that lockd carries out later, at a time the
	// history does not show: the holder closed a stream that releases on
	// close (a Campaign resigning).
	Async bool
	// Since is, for an OpRelease retried with the same request_id after a
	// try failed, when the first try was made: the answer is that of
	// whichever try ended the hold, so it may have acted from then on.
	// Zero for a first try.
	Since time.Time
}

// History records events from many goroutines.
type History struct {
	mu     sync.Mutex
	events []Event
}

// Add records an event.
func (h *History) Add(e Event) {
	if e.Return.IsZero() {
		e.Return = e.Call
	}
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// Events returns the events recorded so far, by call time.
func (h *History) Events() []Event {
	h.mu.Lock()
	out := append([]Event(nil), h.events...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call.Before(out[j].Call) })
	return out
}
