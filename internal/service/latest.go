package service

import (
	"sync"
	"time"
)

// latest sends messages on a server stream, keeping only the newest message
// not yet sent: whoever offers a message (a lease renewal) never waits on
// the client reading, and a client that reads slowly or not at all gets the
// newest message when it reads, older unsent ones being dropped.
//
// A goroutine runs only while there is something to send: it is started by
// the offer that finds none running and ends when nothing is left, so an
// open stream between renewals costs no goroutine of its own.
type latest[M any] struct {
	send func(M) error

	mu      sync.Mutex
	next    M
	pending bool          // next is waiting to be sent
	sending bool          // a sender goroutine runs
	stopped bool          // no send starts any more
	done    chan struct{} // closed when the running sender ends
}

// sendDrain bounds how long stop waits for a send under way: a client that
// does not read can hold one back for ever.
const sendDrain = time.Second

func newLatest[M any](send func(M) error) *latest[M] {
	return &latest[M]{send: send}
}

// offer replaces the message waiting to be sent with m, and starts a
// sender unless one runs.
func (l *latest[M]) offer(m M) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.next, l.pending = m, true
	if l.sending {
		return
	}
	l.sending = true
	l.done = make(chan struct{})
	go l.run(l.done)
}

// run sends until no message waits, the sender is stopped, or a send
// fails.
func (l *latest[M]) run(done chan struct{}) {
	defer close(done)
	for {
		l.mu.Lock()
		if !l.pending || l.stopped {
			l.sending = false
			l.mu.Unlock()
			return
		}
		m := l.next
		var zero M
		l.next, l.pending = zero, false
		l.mu.Unlock()
		if err := l.send(m); err != nil {
			// The stream is broken; its handler ends with it.
			l.mu.Lock()
			l.stopped, l.sending = true, false
			l.mu.Unlock()
			return
		}
	}
}

// stop ends the sender: no send starts after it returns. A send under way
// is given sendDrain to finish.
func (l *latest[M]) stop() {
	l.mu.Lock()
	l.stopped = true
	busy, done := l.sending, l.done
	l.mu.Unlock()
	if !busy {
		return
	}
	t := time.NewTimer(sendDrain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
