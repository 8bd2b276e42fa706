package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
)

// tokenBroker is what TokenService's handlers need of a token broker.
type tokenBroker interface {
	Get(ctx context.Context, app string, caller token.Caller) (token.Token, error)
	Refresh(ctx context.Context, app, invalidToken string, caller token.Caller) (token.Token, error)
	Ticket(ctx context.Context, app string, kind wechat.TicketType, caller token.Caller) (token.Token, error)
	Watch(ctx context.Context, app string, caller token.Caller, send func(token.Token) error) error
}

// swapBroker is a tokenBroker whose broker a configuration reload replaces
// while calls go on: each call runs to its end on the broker it started
// on, and the replaced broker is reported idle once its last call ended.
type swapBroker struct {
	cur atomic.Pointer[generation]
}

// generation is one broker and the calls under way on it.
type generation struct {
	b       *token.Broker // nil serves no apps
	mu      sync.Mutex
	calls   int
	retired bool
	idle    chan struct{}   // closed once retired with no call under way
	gone    context.Context // canceled once retired
	retire  context.CancelFunc
}

func newGeneration(b *token.Broker) *generation {
	gone, retire := context.WithCancel(context.Background())
	return &generation{b: b, idle: make(chan struct{}), gone: gone, retire: retire}
}

func newSwapBroker(b *token.Broker) *swapBroker {
	s := &swapBroker{}
	s.cur.Store(newGeneration(b))
	return s
}

// use returns the broker in force, counted as busy until done is called.
func (s *swapBroker) use() (*token.Broker, func()) {
	g := s.generation()
	return g.b, g.done
}

// generation returns the generation in force, counted as busy until its
// done is called.
func (s *swapBroker) generation() *generation {
	for {
		g := s.cur.Load()
		g.mu.Lock()
		if !g.retired {
			g.calls++
			g.mu.Unlock()
			return g
		}
		g.mu.Unlock() // replaced since loaded: take the new one
	}
}

func (g *generation) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls--
	if g.retired && g.calls == 0 {
		close(g.idle)
	}
}

// swap puts b in force and returns the broker it replaces, with a channel
// closed once no call runs on that one any more.
func (s *swapBroker) swap(b *token.Broker) (*token.Broker, <-chan struct{}) {
	old := s.cur.Swap(newGeneration(b))
	old.mu.Lock()
	defer old.mu.Unlock()
	old.retired = true
	old.retire()
	if old.calls == 0 {
		close(old.idle)
	}
	return old.b, old.idle
}

func (s *swapBroker) Get(ctx context.Context, app string, caller token.Caller) (token.Token, error) {
	b, done := s.use()
	defer done()
	if b == nil {
		return token.Token{}, fmt.Errorf("%w: %q", token.ErrUnknownApp, app)
	}
	return b.Get(ctx, app, caller)
}

func (s *swapBroker) Refresh(ctx context.Context, app, invalidToken string, caller token.Caller) (token.Token, error) {
	b, done := s.use()
	defer done()
	if b == nil {
		return token.Token{}, fmt.Errorf("%w: %q", token.ErrUnknownApp, app)
	}
	return b.Refresh(ctx, app, invalidToken, caller)
}

func (s *swapBroker) Ticket(ctx context.Context, app string, kind wechat.TicketType, caller token.Caller) (token.Token, error) {
	b, done := s.use()
	defer done()
	if b == nil {
		return token.Token{}, fmt.Errorf("%w: %q", token.ErrUnknownApp, app)
	}
	return b.Ticket(ctx, app, kind, caller)
}

// Watch watches on the broker in force, and moves to the next one when a
// reload replaces it, sending only tokens the watcher has not had.
func (s *swapBroker) Watch(ctx context.Context, app string, caller token.Caller, send func(token.Token) error) error {
	var last string
	for {
		g := s.generation()
		if g.b == nil {
			g.done()
			return fmt.Errorf("%w: %q", token.ErrUnknownApp, app)
		}
		// Watches are many and long-lived: the move to the next broker is
		// a callback, not a goroutine per watch.
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(g.gone, cancel)
		err := g.b.Watch(wctx, app, caller, func(tok token.Token) error {
			if tok.AccessToken == last {
				return nil
			}
			last = tok.AccessToken
			return send(tok)
		})
		stop()
		cancel()
		g.done()
		select {
		case <-g.gone.Done():
			if ctx.Err() == nil {
				continue // replaced: go on with the new broker
			}
		default:
		}
		return err
	}
}

// SetBroker puts b in force for every later call and returns the broker it
// replaces, with a channel closed once the calls still running on that one
// have ended; close it then (or when waiting is no longer worth it).
func (s *TokenServer) SetBroker(b *token.Broker) (*token.Broker, <-chan struct{}) {
	return s.brokers.swap(b)
}
