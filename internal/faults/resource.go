package faults

import (
	"sync"
	"time"
)

// Fenced is a resource protected by fencing tokens: per key, it rejects a
// write whose token is lower than one it has accepted. With Ignore set it
// accepts every write, as a resource that does not check tokens would.
type Fenced struct {
	// Ignore makes the resource accept writes whatever their token.
	Ignore bool

	mu      sync.Mutex
	highest map[string]uint64
	log     map[string][]FencedWrite
	notify  map[string][]chan struct{}
}

// FencedWrite is one write as the resource saw it, in the resource's order.
type FencedWrite struct {
	Lease    string
	Token    uint64
	Accepted bool
}

// Write offers a write by lease with token to key's resource and reports
// whether it was accepted.
func (f *Fenced) Write(key, lease string, token uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.highest == nil {
		f.highest, f.log, f.notify = map[string]uint64{}, map[string][]FencedWrite{}, map[string][]chan struct{}{}
	}
	ok := f.Ignore || token >= f.highest[key]
	if ok && token > f.highest[key] {
		f.highest[key] = token
	}
	f.log[key] = append(f.log[key], FencedWrite{Lease: lease, Token: token, Accepted: ok})
	if ok {
		for _, c := range f.notify[key] {
			close(c)
		}
		f.notify[key] = nil
	}
	return ok
}

// Highest returns the highest token key's resource has accepted.
func (f *Fenced) Highest(key string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest[key]
}

// AcceptedAbove returns a channel closed once key's resource has accepted a
// write with a token above token.
func (f *Fenced) AcceptedAbove(key string, token uint64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan struct{})
	if f.highest == nil {
		f.highest, f.log, f.notify = map[string]uint64{}, map[string][]FencedWrite{}, map[string][]chan struct{}{}
	}
	if f.highest[key] > token {
		close(c)
		return c
	}
	// Woken on every accepted write; the waiter checks again.
	f.notify[key] = append(f.notify[key], c)
	return c
}

// Log returns every write offered to key's resource, in its order.
func (f *Fenced) Log() map[string][]FencedWrite {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]FencedWrite, len(f.log))
	for k, l := range f.log {
		out[k] = append([]FencedWrite(nil), l...)
	}
	return out
}

// Plain is a resource without protection: it records every time a writer
// enters while another one is inside.
type Plain struct {
	mu       sync.Mutex
	inside   map[string]map[string]bool // key -> leases writing now
	overlaps []Overlap
}

// Overlap is one writer entering key's plain resource while another was
// inside.
type Overlap struct {
	Key      string
	Inside   string // lease already writing
	Entering string // lease that entered
	At       time.Time
}

// Enter starts a write by lease; Exit ends it.
func (p *Plain) Enter(key, lease string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inside == nil {
		p.inside = map[string]map[string]bool{}
	}
	if p.inside[key] == nil {
		p.inside[key] = map[string]bool{}
	}
	for other := range p.inside[key] {
		p.overlaps = append(p.overlaps, Overlap{Key: key, Inside: other, Entering: lease, At: now})
	}
	p.inside[key][lease] = true
}

// Exit ends a write started by Enter.
func (p *Plain) Exit(key, lease string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inside[key], lease)
}

// Overlaps returns the overlaps recorded so far.
func (p *Plain) Overlaps() []Overlap {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Overlap(nil), p.overlaps...)
}
