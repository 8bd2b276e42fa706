package redislock

import (
	"strconv"
	"strings"
)

// waiter is one waiter of a topic: its wake-up channel and what wakes it.
type waiter struct {
	w  chan struct{}
	in interest
}

// add makes w a waiter of the topic: its first, or one in the maps, made
// on need. s.mu is held.
func (tp *topic) add(w chan struct{}, in interest) {
	if tp.first.w == nil {
		tp.first = waiter{w: w, in: in}
		return
	}
	if tp.waiters == nil {
		tp.waiters = map[chan struct{}]interest{}
	}
	tp.waiters[w] = in
	if in.id != "" {
		if tp.byID == nil {
			tp.byID = map[string]chan struct{}{}
		}
		tp.byID[in.id] = w
	}
}

// remove takes waiter w, joined with in, out of the topic. s.mu is held.
func (tp *topic) remove(w chan struct{}, in interest) {
	if tp.first.w == w {
		tp.first = waiter{}
		return
	}
	delete(tp.waiters, w)
	if in.id != "" && tp.byID[in.id] == w {
		delete(tp.byID, in.id)
	}
}

// interest returns what wakes waiter w. s.mu is held.
func (tp *topic) interest(w chan struct{}) interest {
	if tp.first.w == w {
		return tp.first.in
	}
	return tp.waiters[w]
}

// named returns the waiter whose id is id, nil if none. s.mu is held.
func (tp *topic) named(id string) chan struct{} {
	if w, ok := tp.byID[id]; ok {
		return w
	}
	if tp.first.w != nil && tp.first.in.id == id {
		return tp.first.w
	}
	return nil
}

// each calls f for every waiter of the topic. s.mu is held.
func (tp *topic) each(f func(w chan struct{}, in interest)) {
	if tp.first.w != nil {
		f(tp.first.w, tp.first.in)
	}
	for w, in := range tp.waiters {
		f(w, in)
	}
}

// closedChan is the ready channel of a topic confirmed before anyone
// waited for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// readyNow closes the topic's ready channel, if a waiter made one: the
// subscription is confirmed, or refused. s.mu is held.
func (tp *topic) readyNow() {
	if tp.ready != nil && tp.ready != closedChan {
		close(tp.ready)
	}
}

// wake makes every waiter of the topic re-check. s.mu is held.
func (tp *topic) wake() {
	tp.each(func(w chan struct{}, _ interest) { tp.rouse(w) })
}

// rouse wakes waiter w to re-check on Redis: what a message had told it
// to watch no longer stands in for a re-check. s.mu is held.
func (tp *topic) rouse(w chan struct{}) {
	if in := tp.interest(w); in.watch != nil {
		in.watch.Store(0)
	}
	poke(w)
}

// deliver wakes the waiters a message names: one attempt by its id (the
// head of the queue, which may take the key), the new head and the one
// next in line when the head moved on (headPrefix), a revoked lease's
// KeepAlive, every reader, or, for any other message, everyone.
// Waiters that follow every message are woken each time. s.mu is held.
func (tp *topic) deliver(payload string) {
	if strings.HasPrefix(payload, revokedPrefix) {
		// A lease revoked by an administrator: for its KeepAlive alone.
		if w := tp.named(payload); w != nil {
			poke(w)
		}
		return
	}
	if rest, ok := strings.CutPrefix(payload, headPrefix); ok {
		tp.headMoved(rest)
		return
	}
	if w := tp.named(payload); w != nil {
		tp.rouse(w)
	} else if payload != readersWake {
		// Not meant for a waiter of this process, or a message naming
		// nobody: an attempt id from another process is not for us, any
		// other message is for everyone.
		if !isAttemptID(payload) {
			tp.wake()
			return
		}
	}
	tp.each(func(w chan struct{}, in interest) {
		if in.all || (in.reader && payload == readersWake) {
			tp.rouse(w)
		}
	})
}

// headMoved delivers "<head>|<take>|<next>|<ms>" (see headPrefix): to the
// new head, woken to re-check or, when it may not take the key yet, told
// it only keeps its place; to the one next in line, told how long to
// watch the head; and to the waiters that follow every message. A message
// that does not parse wakes everyone. s.mu is held.
func (tp *topic) headMoved(rest string) {
	parts := strings.SplitN(rest, "|", 4)
	ms, err := int64(0), error(nil)
	if len(parts) == 4 {
		ms, err = strconv.ParseInt(parts[3], 10, 64)
	}
	if len(parts) != 4 || err != nil {
		tp.wake()
		return
	}
	head, take, next := parts[0], parts[1], parts[2]
	if w := tp.named(head); w != nil {
		if in := tp.interest(w); take == "0" && in.watch != nil {
			in.watch.Store(headBusy)
			poke(w)
		} else {
			tp.rouse(w)
		}
	}
	if next != "" {
		if w := tp.named(next); w != nil {
			if in := tp.interest(w); in.watch != nil && ms > 0 {
				in.watch.Store(ms)
			}
			poke(w)
		}
	}
	tp.each(func(w chan struct{}, in interest) {
		if in.all {
			tp.rouse(w)
		}
	})
}

// isAttemptID reports whether a message looks like an attempt id (see
// newAttemptID): 11 URL-safe base64 characters.
func isAttemptID(s string) bool {
	if len(s) != attemptIDLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// poke wakes one waiter, unless a wake-up is pending already.
func poke(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}
