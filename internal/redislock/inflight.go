package redislock

import "sync"

// inFlight counts work under way; unlike a sync.WaitGroup it may be waited
// for while work is still being added.
type inFlight struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed while n is 0; nil until the first add
}

func (f *inFlight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.none = make(chan struct{})
	}
	f.n++
}

func (f *inFlight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.none)
	}
}

// idle returns a channel closed once nothing is under way.
func (f *inFlight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return f.none
}
