package redislock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// idleAfter is how long a channel nobody waits on stays subscribed, so a
// busy key is not unsubscribed and subscribed again for every waiter.
const idleAfter = time.Second

// unconfirmedAfter is how long a subscription may go unconfirmed before
// the sweep may drop it.
const unconfirmedAfter = 10 * time.Second

// subscriber shares pub/sub connections among all waiters of a Client: one
// connection for a single Redis, one per master node on Redis Cluster. Each
// channel is subscribed once however many waiters it has. A message wakes
// only the waiters it names (see common.lua): the attempt at the head of
// the lock's queue, or every reader; any other message wakes them all, as
// does a subscription lost and made again (messages may have been lost).
type subscriber struct {
	rdb     redis.UniversalClient
	sharded bool

	mu     sync.Mutex
	idle   time.Duration // idleAfter; tests shorten it
	shards map[string]*shard
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

type shard struct {
	ps     *redis.PubSub
	topics map[string]*topic
	// expect lists, per channel and in the order sent, the SUBSCRIBE and
	// UNSUBSCRIBE replies lockd asked for and has not had yet. Redis
	// answers in order, so each reply is matched with what was asked: an
	// UNSUBSCRIBE reply lockd asked for is never taken for Redis dropping
	// the channel, and a SUBSCRIBE reply confirms the topic it was sent
	// for, not an older or newer one of the same channel.
	expect map[string][]*expectation
	// queue holds SUBSCRIBE and UNSUBSCRIBE commands, sent in order by one
	// goroutine so an unsubscribe never overtakes a later subscribe.
	queue  []command
	signal chan struct{}
	closed bool
}

type command struct {
	subscribe bool
	channels  []string
	topic     *topic
}

// expectation is one reply lockd waits for on a channel.
type expectation struct {
	subscribe bool
	topic     *topic // the topic a SUBSCRIBE was sent for
}

// enqueue adds a command for the shard's sender. s.mu is held.
func (sh *shard) enqueue(c command) {
	sh.queue = append(sh.queue, c)
	select {
	case sh.signal <- struct{}{}:
	default:
	}
}

type topic struct {
	refs      int
	created   time.Time
	idleSince time.Time
	// ready is closed when the subscription is confirmed; made only for
	// a waiter that waits for it (see subscribe).
	ready     chan struct{}
	confirmed bool
	err       error
	// first is a waiter kept out of the maps, which are made only for
	// more (see waiters.go): most channels have one waiter, a kept-alive
	// lease's listening for its revocation, and a map costs hundreds of
	// bytes.
	first   waiter
	waiters map[chan struct{}]interest
	byID    map[string]chan struct{} // waiters in waiters with an id, by id
}

// interest says which messages on a channel wake a waiter.
type interest struct {
	// id is the waiter's attempt id: a message naming it wakes it.
	id string
	// watch, if set, receives how long the head of the queue keeps its
	// place (ms) from a message telling the waiter it is next in line: it
	// watches the head rather than asking Redis at once. It receives
	// headBusy from a message telling the waiter it is the head of the
	// queue while the key is held: it keeps its place, and is woken again
	// when the key is released.
	watch *atomic.Int64
	// reader is woken by a message for every waiting reader.
	reader bool
	// all is woken by every message (an election's observers).
	all bool
}

// readersWake is the message that wakes every waiting reader; wakeAll (or
// any message naming nobody known) wakes every waiter.
const (
	readersWake = "r"
	wakeAll     = "released"
)

// revokedPrefix starts the message that tells a lease's KeepAlive the
// lease was revoked (force_release.lua): "x:<lease_id>".
const revokedPrefix = "x:"

// headPrefix starts the message sent when the head of the queue moves on
// (common.lua's queue_head): "h:<head>|<take>|<next>|<ms>". The new head
// may take the key now when take is 1; next, if not empty, is next in line
// and watches the head's place, which runs ms more.
const headPrefix = "h:"

// headBusy is what interest.watch receives when the waiter is told it is
// the head of the queue but may not take the key yet.
const headBusy = -1

func newSubscriber(rdb redis.UniversalClient, sharded bool) *subscriber {
	s := &subscriber{rdb: rdb, sharded: sharded, idle: idleAfter, shards: map[string]*shard{}, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.sweep()
	return s
}

// subscribe registers a waiter on channel and returns once the subscription
// is confirmed by Redis, so no message published after that is missed, or
// after confirmWait at most: a subscription Redis does not confirm (no
// permission on the channel, a slot that moved) leaves the waiter to its
// re-checks rather than stranding it. wake receives a value after each
// message meant for the waiter (see interest); done must be called when the
// waiter stops waiting.
func (s *subscriber) subscribe(ctx context.Context, channel string, in interest, deadline time.Time, confirmWait time.Duration) (wake <-chan struct{}, done func(), err error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tp, ready, w, done, err := s.register(ctx, channel, in, true)
	if err != nil {
		return nil, nil, err
	}
	unconfirmed := time.NewTimer(confirmWait)
	defer unconfirmed.Stop()
	select {
	case <-ready:
		if tp.err != nil {
			done()
			return nil, nil, tp.err
		}
		return w, done, nil
	case <-unconfirmed.C:
		return w, done, nil
	case <-ctx.Done():
		done()
		return nil, nil, ctx.Err()
	}
}

// listen registers a waiter on channel as subscribe does, but returns at
// once, before Redis confirms the subscription: for a waiter that has no
// use for the wait, as a message missed meanwhile costs it only time. A
// subscription Redis refuses leaves the waiter registered on a channel no
// message arrives on.
func (s *subscriber) listen(ctx context.Context, channel string, in interest) (wake <-chan struct{}, done func(), err error) {
	_, _, w, done, err := s.register(ctx, channel, in, false)
	if err != nil {
		return nil, nil, err
	}
	return w, done, nil
}

// register joins a waiter to channel's topic, subscribing the channel if
// it is not yet, and returns the topic with what join returns. With
// confirm, it returns too the topic's ready channel, closed once the
// subscription is confirmed.
func (s *subscriber) register(ctx context.Context, channel string, in interest, confirm bool) (tp *topic, ready <-chan struct{}, w chan struct{}, done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, nil, nil, ErrClosed
	}
	key, err := s.shardKey(ctx, channel)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	sh := s.shards[key]
	if sh == nil {
		sh = s.openShard(ctx, key, channel)
	}
	tp = sh.topics[channel]
	fresh := tp == nil
	if fresh {
		tp = &topic{created: time.Now()}
		sh.topics[channel] = tp
	}
	if confirm {
		switch {
		case tp.ready != nil:
		case tp.confirmed:
			tp.ready = closedChan
		default:
			tp.ready = make(chan struct{})
		}
		ready = tp.ready
	}
	w, done = s.join(tp, in)
	if fresh {
		sh.enqueue(command{subscribe: true, channels: []string{channel}, topic: tp})
	}
	return tp, ready, w, done, nil
}

// listening registers a waiter on channel if the channel is subscribed
// and confirmed already (another waiter of this process uses it, or did a
// moment ago), so that a waiter registered before its first try misses no
// message sent after it. It returns nil, nil otherwise: then the waiter
// subscribes after its try and re-checks.
func (s *subscriber) listening(ctx context.Context, channel string, in interest) (wake <-chan struct{}, done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	key, err := s.shardKey(ctx, channel)
	if err != nil {
		return nil, nil
	}
	sh := s.shards[key]
	if sh == nil {
		return nil, nil
	}
	tp := sh.topics[channel]
	if tp == nil || !tp.confirmed || tp.err != nil {
		return nil, nil
	}
	return s.join(tp, in)
}

// join adds a waiter to a topic and returns its wake-up channel and the
// function that takes it out again. s.mu is held.
func (s *subscriber) join(tp *topic, in interest) (chan struct{}, func()) {
	tp.refs++
	w := make(chan struct{}, 1)
	tp.add(w, in)
	return w, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		tp.remove(w, in)
		tp.refs--
		if tp.refs == 0 {
			tp.idleSince = time.Now()
		}
	}
}

// shardKey names the connection a channel's messages arrive on: the master
// node that owns the channel's slot on Cluster, else the one connection.
func (s *subscriber) shardKey(ctx context.Context, channel string) (string, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return "", nil
	}
	node, err := cc.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// openShard starts a pub/sub connection and its dispatcher. s.mu is held.
func (s *subscriber) openShard(ctx context.Context, key, channel string) *shard {
	var ps *redis.PubSub
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, channel)
		if err == nil {
			ps = node.SSubscribe(context.WithoutCancel(ctx))
		} else {
			ps = cc.SSubscribe(context.WithoutCancel(ctx))
		}
	} else if s.sharded {
		ps = s.rdb.SSubscribe(context.WithoutCancel(ctx))
	} else {
		ps = s.rdb.Subscribe(context.WithoutCancel(ctx))
	}
	sh := &shard{ps: ps, topics: map[string]*topic{}, expect: map[string][]*expectation{}, signal: make(chan struct{}, 1)}
	s.shards[key] = sh
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	s.wg.Add(2)
	go s.dispatch(sh, msgs)
	go s.send(sh)
	return sh
}

// send writes the shard's queued commands in order until the shard closes.
func (s *subscriber) send(sh *shard) {
	defer s.wg.Done()
	for range sh.signal {
		for {
			s.mu.Lock()
			if sh.closed || len(sh.queue) == 0 {
				closed := sh.closed
				s.mu.Unlock()
				if closed {
					return
				}
				break
			}
			c := sh.queue[0]
			sh.queue = sh.queue[1:]
			sent := make([]*expectation, len(c.channels))
			for i, ch := range c.channels {
				sent[i] = &expectation{subscribe: c.subscribe, topic: c.topic}
				sh.expect[ch] = append(sh.expect[ch], sent[i])
			}
			s.mu.Unlock()

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			switch {
			case c.subscribe && s.sharded:
				err = sh.ps.SSubscribe(ctx, c.channels...)
			case c.subscribe:
				err = sh.ps.Subscribe(ctx, c.channels...)
			case s.sharded:
				err = sh.ps.SUnsubscribe(ctx, c.channels...)
			default:
				err = sh.ps.Unsubscribe(ctx, c.channels...)
			}
			cancel()
			if err != nil {
				// Not sent: no reply will come for it.
				s.mu.Lock()
				for i, ch := range c.channels {
					sh.forget(ch, sent[i])
				}
				s.mu.Unlock()
			}
			if err != nil && c.topic != nil {
				s.mu.Lock()
				if tp := c.topic; !tp.confirmed {
					tp.err, tp.confirmed = err, true
					tp.readyNow()
					if sh.topics[c.channels[0]] == tp {
						delete(sh.topics, c.channels[0])
					}
				}
				s.mu.Unlock()
			}
		}
	}
}

// shutdown stops the shard's goroutines. s.mu is held.
func (sh *shard) shutdown() {
	if sh.closed {
		return
	}
	sh.closed = true
	close(sh.signal)
	go sh.ps.Close()
}

func (s *subscriber) dispatch(sh *shard, msgs <-chan any) {
	defer s.wg.Done()
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				s.subscribed(sh, m.Channel)
			case "unsubscribe", "sunsubscribe":
				s.unsubscribed(sh, m.Channel)
			}
		case *redis.Message:
			s.mu.Lock()
			if tp := sh.topics[m.Channel]; tp != nil {
				tp.deliver(m.Payload)
			}
			s.mu.Unlock()
		}
	}
}

// subscribed handles a SUBSCRIBE reply: it confirms the topic it was asked
// for, or, unasked (go-redis subscribing again after a reconnect, when
// messages may have been lost), makes the channel's waiters re-check.
func (s *subscriber) subscribed(sh *shard, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := sh.expect[channel]
	// UNSUBSCRIBE replies still expected before this one were lost with a
	// connection: none will come.
	for len(q) > 0 && !q[0].subscribe {
		q = q[1:]
	}
	var asked *expectation
	if len(q) > 0 {
		asked, q = q[0], q[1:]
	}
	sh.setExpect(channel, q)
	tp := sh.topics[channel]
	if asked != nil && asked.topic != nil {
		if tp == asked.topic && !tp.confirmed {
			tp.confirmed = true
			tp.readyNow()
		}
		return
	}
	if tp != nil {
		tp.wake()
	}
}

// unsubscribed handles an UNSUBSCRIBE reply. One lockd asked for is
// expected and changes nothing; an unasked one means Redis dropped the
// channel (its slot moved to another node): the topic is forgotten, so the
// next waiter subscribes where the slot lives now, and its waiters
// re-check.
func (s *subscriber) unsubscribed(sh *shard, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := sh.expect[channel]
	for i, e := range q {
		if !e.subscribe {
			// Replies before it that did not come were lost with a
			// connection.
			sh.setExpect(channel, q[i+1:])
			return
		}
	}
	if tp := sh.topics[channel]; tp != nil {
		delete(sh.topics, channel)
		tp.wake()
	}
}

// setExpect stores the replies still expected on channel. s.mu is held.
func (sh *shard) setExpect(channel string, q []*expectation) {
	if len(q) == 0 {
		delete(sh.expect, channel)
		return
	}
	sh.expect[channel] = q
}

// forget drops one expected reply. s.mu is held.
func (sh *shard) forget(channel string, e *expectation) {
	q := sh.expect[channel]
	for i, x := range q {
		if x == e {
			sh.setExpect(channel, append(q[:i:i], q[i+1:]...))
			return
		}
	}
}

// sweep unsubscribes channels nobody has waited on for a while, and closes
// connections left with no channel.
func (s *subscriber) sweep() {
	defer s.wg.Done()
	tick := time.NewTimer(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		idleAfter := s.idle
		tick.Reset(idleAfter)
		for key, sh := range s.shards {
			var idle []string
			for ch, tp := range sh.topics {
				// A subscription never confirmed (its reply lost or
				// refused) is dropped too once nobody waits on it, so the
				// next waiter subscribes afresh.
				stale := !tp.confirmed && time.Since(tp.created) >= unconfirmedAfter
				if tp.refs == 0 && (tp.confirmed || stale) && time.Since(tp.idleSince) >= idleAfter {
					idle = append(idle, ch)
					delete(sh.topics, ch)
				}
			}
			if len(sh.topics) == 0 {
				delete(s.shards, key)
				sh.shutdown()
				continue
			}
			if len(idle) > 0 {
				sh.enqueue(command{channels: idle})
			}
		}
		s.mu.Unlock()
	}
}

// active reports how many channels are subscribed, for tests.
func (s *subscriber) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sh := range s.shards {
		n += len(sh.topics)
	}
	return n
}

func (s *subscriber) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	for key, sh := range s.shards {
		sh.shutdown()
		delete(s.shards, key)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
