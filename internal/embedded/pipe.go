package embedded

import (
	"net"
	"sync"
)

// connPair returns the two ends of an in-memory connection (net.Pipe) for
// a client and the store. The store's writes to its end never block: they
// queue in memory and a goroutine hands them to the client as it reads.
// Without that, a client writing a long pipeline (it reads no reply until
// it has written every command) and the store answering each command as
// it reads it would wait on each other for ever.
func connPair() (client, store net.Conn) {
	c, s := net.Pipe()
	q := &queuedWriter{Conn: s}
	q.cond = sync.NewCond(&q.mu)
	go q.drain()
	return c, q
}

// queuedWriter is a net.Conn whose Write queues the bytes for a goroutine
// to write.
type queuedWriter struct {
	net.Conn
	mu      sync.Mutex
	cond    *sync.Cond
	pending []byte
	closed  bool
	err     error
}

func (q *queuedWriter) Write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return 0, q.err
	}
	q.pending = append(q.pending, p...)
	q.cond.Signal()
	return len(p), nil
}

func (q *queuedWriter) Close() error {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
	return q.Conn.Close()
}

// drain writes what is queued until the connection closes or fails.
func (q *queuedWriter) drain() {
	var out []byte
	for {
		q.mu.Lock()
		for len(q.pending) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		out, q.pending = q.pending, out[:0]
		q.mu.Unlock()
		if _, err := q.Conn.Write(out); err != nil {
			q.mu.Lock()
			q.err = err
			q.mu.Unlock()
			return
		}
	}
}
