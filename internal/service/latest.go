package service

import (
	"sync"
	"time"
)

// latest sends messages on a server stream from a goroutine of its own,
// keeping only the newest message not yet sent: whoever offers a message
// (a lease renewal) never waits on the client reading, and a client that
// reads slowly or not at all gets the newest message when it reads, older
// unsent ones being dropped.
type latest[M any] struct {
	send func(M) error

	mu      sync.Mutex
	next    *M
	sending bool
	stopped bool

	signal chan struct{}
	done   chan struct{}
}

// sendDrain bounds how long stop waits for a send under way: a client that
// does not read can hold one back for ever.
const sendDrain = time.Second

func newLatest[M any](send func(M) error) *latest[M] {
	l := &latest[M]{send: send, signal: make(chan struct{}, 1), done: make(chan struct{})}
	go l.run()
	return l
}

// offer replaces the message waiting to be sent with m.
func (l *latest[M]) offer(m M) {
	l.mu.Lock()
	l.next = &m
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

func (l *latest[M]) run() {
	defer close(l.done)
	for range l.signal {
		l.mu.Lock()
		m := l.next
		l.next = nil
		if l.stopped || m == nil {
			stopped := l.stopped
			l.mu.Unlock()
			if stopped {
				return
			}
			continue
		}
		l.sending = true
		l.mu.Unlock()
		err := l.send(*m)
		l.mu.Lock()
		l.sending = false
		l.mu.Unlock()
		if err != nil {
			return // the stream is broken; its handler ends with it
		}
	}
}

// stop ends the sender: no send starts after it returns. A send under way
// is given sendDrain to finish.
func (l *latest[M]) stop() {
	l.mu.Lock()
	l.stopped = true
	busy := l.sending
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
	if !busy {
		return
	}
	select {
	case <-l.done:
	case <-time.After(sendDrain):
	}
}
