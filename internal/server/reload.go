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
	"github.com/lockd/lockd/internal/gateway"
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
			Name: c.Name, Token: string(c.Token), Locks: c.Locks, Apps: c.Apps, Admin: c.Admin, TLSSubject: c.TLSSubject,
			Limits: c.Limits,
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
	// locks releases the leases of clients a reload removes.
	locks *service.LockServer
	// secretFlags are checked again on each reload (see secretFlags.warn).
	secretFlags secretFlags
	// mtls tells whether clients may be asked for a certificate
	// (tls_subject).
	mtls bool
	// revoking runs the releases of revoked clients' leases, one reload
	// at a time.
	revoking sync.Mutex
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
	if err := checkTLSSubjects(file, r.mtls); err != nil {
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
	if r.locks != nil {
		go r.revoke()
	}
	for _, w := range file.Warnings {
		r.log.Warn("config: " + w)
	}
	warnFixedEnv(r.log, file)
	if was && clients == nil {
		r.log.Warn("INSECURE: the reloaded configuration has no auth section: authentication is now off")
	}
	r.log.Info("configuration reloaded", "auth", clients != nil, "clients", len(clients), "token_apps", b.Apps())
	return nil
}

// revoke releases the leases of clients the reload took them from.
func (r *reloader) revoke() {
	r.revoking.Lock()
	defer r.revoking.Unlock()
	if n := r.locks.Revoke(context.Background(), r.authn.MayLock); n > 0 {
		r.log.Warn("released the leases of clients the reload removed, or whose prefixes it narrowed", "leases", n)
	}
}

// warnFixedEnv tells, on a reload, which secrets and tokens come from
// lockd's environment: a reload reads them again, but the environment is
// the one lockd started with, so they change only with a restart.
func warnFixedEnv(log *slog.Logger, file *config.Config) {
	var from []string
	for _, a := range file.Apps {
		if a.SecretEnv != "" {
			from = append(from, "apps "+a.Name)
		}
	}
	if file.Auth != nil {
		for _, c := range file.Auth.Clients {
			if c.TokenEnv != "" {
				from = append(from, "auth.clients "+c.Name)
			}
		}
	}
	if len(from) > 0 {
		log.Warn("config: secret_env and token_env are read from the environment lockd started with, which a reload cannot change: to rotate them without a restart, use secret_file and token_file", "from_env", from)
	}
}

// checkTLSSubjects refuses clients with a tls_subject when lockd asks for
// no client certificate: no call of theirs could ever be let in.
func checkTLSSubjects(file *config.Config, mtls bool) error {
	if file == nil || file.Auth == nil || mtls {
		return nil
	}
	for _, c := range file.Auth.Clients {
		if c.TLSSubject != "" {
			return fmt.Errorf("--config: auth.clients %q: tls_subject needs client certificates: set --tls-client-ca", c.Name)
		}
	}
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

// certSubject is the subject of a call's verified client certificate:
// its connection's, or, for a call through the HTTP/JSON gateway, the
// HTTPS caller's.
func certSubject(ctx context.Context) (string, bool) {
	if s, ok := auth.PeerCertSubject(ctx); ok {
		return s, true
	}
	return gateway.CertSubject(ctx)
}
