package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/telemetry"
	"github.com/lockd/lockd/internal/token"
)

// retireWait bounds how long a replaced token broker may finish the calls
// still running on it before it is closed (those still waiting then end
// UNAVAILABLE, and their callers retry on the new one).
const retireWait = time.Minute

// authClients converts the auth section of file; nil when there is none.
func authClients(file *config.Config) []auth.Client {
	if file == nil || file.Auth == nil {
		return nil
	}
	clients := make([]auth.Client, 0, len(file.Auth.Clients))
	for _, c := range file.Auth.Clients {
		clients = append(clients, auth.Client{
			Name: c.Name, Token: string(c.Token), Locks: c.Locks, Apps: c.Apps, Admin: c.Admin,
			Limits: auth.Limits{Waiters: c.Limits.Waiters, KeepAlives: c.Limits.KeepAlives, RefreshesPerHour: c.Limits.RefreshesPerHour},
		})
	}
	return clients
}

// brokers runs the token broker in force and its refresher, and retires
// the brokers a reload replaces.
type brokers struct {
	ctx    context.Context // ends when lockd stops
	log    *slog.Logger
	tokens *service.TokenServer
	quit   chan struct{} // closed by close

	mu      sync.Mutex
	current *token.Broker
	stop    func() // stops the current broker's refresher
	closed  bool
	retired sync.WaitGroup
}

func newBrokers(ctx context.Context, log *slog.Logger, b *token.Broker, maxWatches int) *brokers {
	bs := &brokers{ctx: ctx, log: log, tokens: service.NewTokenServer(b, log, service.WithMaxWatches(maxWatches)), quit: make(chan struct{})}
	bs.current, bs.stop = b, bs.refresh(b)
	return bs
}

// refresh runs b's refresher until the returned function is called.
func (bs *brokers) refresh(b *token.Broker) func() {
	ctx, cancel := context.WithCancel(bs.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.RunRefresher(ctx)
	}()
	return func() { cancel(); <-done }
}

// replace puts b in force; the broker it replaces finishes its calls
// (within retireWait) and closes in the background.
func (bs *brokers) replace(b *token.Broker) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.closed {
		_ = b.Close()
		return
	}
	old, oldStop := bs.current, bs.stop
	bs.current, bs.stop = b, bs.refresh(b)
	_, idle := bs.tokens.SetBroker(b)
	bs.retired.Add(1)
	go func() {
		defer bs.retired.Done()
		select {
		case <-idle:
		case <-time.After(retireWait):
			bs.log.Warn("closing the replaced token broker with calls still waiting on it; they end UNAVAILABLE")
		case <-bs.quit:
		}
		oldStop()
		_ = old.Close()
	}()
}

// close stops the broker in force and waits for the retired ones.
func (bs *brokers) close() {
	bs.mu.Lock()
	bs.closed = true
	close(bs.quit)
	bs.stop()
	_ = bs.current.Close()
	bs.mu.Unlock()
	bs.retired.Wait()
}

// reloader applies a configuration file again: clients, tokens, ACLs,
// limits, apps and secrets. A file that does not load, or whose clients or
// apps cannot be used, is refused as a whole and the running configuration
// stays in force.
type reloader struct {
	log     *slog.Logger
	load    func() (*config.Config, error)
	authn   *auth.Authenticator
	brokers *brokers
	rdb     redis.UniversalClient
	opts    token.Options
	metrics *telemetry.SecurityMetrics
	audit   audit
	// secretFlags are checked again on each reload (see secretFlags.warn).
	secretFlags secretFlags
}

// reload loads and applies the configuration file once.
func (r *reloader) reload() {
	if err := r.apply(); err != nil {
		r.metrics.ConfigReloaded(false)
		r.log.Error("configuration reload refused; the running configuration stays in force", "err", err)
		return
	}
	r.metrics.ConfigReloaded(true)
}

func (r *reloader) apply() error {
	if r.load == nil {
		return fmt.Errorf("lockd was started without --config: there is nothing to reload")
	}
	file, err := r.load()
	if err != nil {
		return err
	}
	clients := authClients(file)
	if clients != nil {
		// Check before anything changes, so a bad file changes nothing.
		if _, err := auth.New(clients); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
	}
	b, err := newBroker(r.rdb, file, r.opts)
	if err != nil {
		return err
	}
	was := r.authn.Enabled()
	if err := r.authn.Replace(clients); err != nil {
		_ = b.Close()
		return fmt.Errorf("--config: %w", err)
	}
	r.brokers.replace(b)
	for _, w := range file.Warnings {
		r.log.Warn("config: " + w)
	}
	if was && clients == nil {
		r.log.Warn("INSECURE: the reloaded configuration has no auth section: authentication is now off")
	}
	r.log.Info("configuration reloaded", "auth", clients != nil, "clients", len(clients), "token_apps", b.Apps())
	return nil
}

// watch reloads whenever reloads delivers, until ctx ends.
func (r *reloader) watch(ctx context.Context, reloads <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-reloads:
			// The audit log is opened again first, with or without a
			// configuration file: logrotate renames it and sends SIGHUP.
			if err := r.audit.reopen(); err != nil {
				r.log.Error("could not open the audit log again; it goes on in the file open so far", "err", err)
			}
			r.log.Info("reloading the configuration")
			r.secretFlags.warn(r.log)
			r.reload()
		}
	}
}
