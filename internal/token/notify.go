package token

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// signal wakes the calls of this process that wait for an app's token
// when a notice arrives. Waiters take the current channel before they read
// the cache; each notice closes it and puts a fresh one in its place.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

// await returns the channel the next notice closes.
func (s *signal) await() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// fire wakes every waiter.
func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

// notifier keeps the pub/sub subscriptions to the apps' channels: one
// connection for all apps on a single Redis, one per app on Redis Cluster
// (sharded pub/sub pins a connection to the slot of its channels). A notice
// names the value (the token, or a ticket) that changed, and for a value
// stored its version ("token@<version>"), which the replica records as the
// newest it heard of. go-redis
// reconnects and resubscribes by itself; every (re)subscription wakes all
// of the app's waiters, since notices may have been lost meanwhile.
type notifier struct {
	mu     sync.Mutex
	subs   []*redis.PubSub
	closed bool
	wg     sync.WaitGroup
}

func startNotifier(rdb redis.UniversalClient, sharded bool, apps map[string]*app) *notifier {
	n := &notifier{}
	if len(apps) == 0 {
		return n
	}
	byChannel := map[string]*app{}
	var groups [][]string
	for _, a := range apps {
		byChannel[a.keys.channel] = a
		if !sharded && len(groups) > 0 {
			groups[0] = append(groups[0], a.keys.channel)
			continue
		}
		groups = append(groups, []string{a.keys.channel})
	}
	for _, channels := range groups {
		n.wg.Add(1)
		go n.run(rdb, sharded, channels, byChannel)
	}
	return n
}

func (n *notifier) run(rdb redis.UniversalClient, sharded bool, channels []string, byChannel map[string]*app) {
	defer n.wg.Done()
	// Subscribing dials: do it here rather than in New, so that a Redis
	// that is down at start-up holds nobody up. The channels are kept even
	// when the first attempt fails, and go-redis subscribes them again on
	// every reconnect.
	var ps *redis.PubSub
	if sharded {
		ps = rdb.SSubscribe(context.Background(), channels...)
	} else {
		ps = rdb.Subscribe(context.Background(), channels...)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = ps.Close()
		return
	}
	n.subs = append(n.subs, ps)
	n.mu.Unlock()

	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			// Confirmed, at start-up or after a reconnect: notices may
			// have been missed meanwhile, so wake the waiters to re-read.
			if a := byChannel[m.Channel]; a != nil {
				for _, v := range a.values() {
					v.sig.fire()
				}
			}
		case *redis.Message:
			a := byChannel[m.Channel]
			if a == nil {
				continue
			}
			// "<value>" or "<value>@<version>" for a value stored.
			payload, version, _ := strings.Cut(m.Payload, "@")
			for _, v := range a.values() {
				if v.payload == payload {
					if ver, err := strconv.ParseInt(version, 10, 64); err == nil {
						v.heard(ver)
					}
					v.sig.fire()
				}
			}
		}
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	subs := n.subs
	n.subs = nil
	n.mu.Unlock()
	for _, ps := range subs {
		_ = ps.Close()
	}
	n.wg.Wait()
}
