package redislock

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
