// Package client is the Go client of lockd, the lock service on Redis.
//
// A Client talks to one or more lockd replicas. Acquire, AcquireRead and
// AcquirePermit take a key exclusively, shared, or as one of a
// semaphore's permits, and return a Lease that keeps itself alive through
// a KeepAlive stream. Its Lost channel is closed when the lease is lost —
// the stream ended with NOT_FOUND, or no renewal was confirmed in time —
// before anyone else can be granted the key, so the holder can stop
// working. Pass the lease's FencingToken to the resource it protects. A key
// held by others gives an error matching ErrLocked: a *LockedError, which
// tells who holds it and for how long.
//
// Mutex and RWMutex lock a key in the manner of sync.Mutex and
// sync.RWMutex; an Election elects one of its candidates, whose Leadership
// is kept alive and reports its loss the same way.
//
// Options are typed per call (AcquireOption, MutexOption, CampaignOption),
// so an option a call would not use does not compile.
//
// Calls are retried on UNAVAILABLE on the next replica, each with a
// request_id, so a grant whose reply was lost is returned rather than taken
// twice; a lease whose replica goes away resumes its KeepAlive on another.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Client is a connection to one or more lockd replicas. It is safe for
// concurrent use. Calls go to the first replica that answers; after an
// UNAVAILABLE answer they move to the next one.
type Client struct {
	addrs  []string
	conns  []*grpc.ClientConn
	locks  []lockdv1.LockServiceClient
	tokens []lockdv1.TokenServiceClient
	elects []lockdv1.ElectionServiceClient
	sems   []lockdv1.SemaphoreServiceClient
	cur    atomic.Uint32 // the replica calls go to first
	closed atomic.Bool
	opts   options
	owners string // prefix of the owners the client makes up

	ctx    context.Context // ends with Close; keepers run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	keepers map[keeperKey]*keeper
}

// Option configures a Client.
type Option func(*options)

type options struct {
	tls         *tls.Config
	token       string
	dial        []grpc.DialOption
	callTimeout time.Duration
	retryFor    time.Duration
}

// WithTLS connects over TLS with cfg (nil: the system's roots). Without it
// the client connects in plaintext, as to a sidecar on loopback.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tls = cfg
	}
}

// WithBearerToken sends "authorization: Bearer <token>" with every call.
// Beyond loopback, use it with WithTLS.
func WithBearerToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithDialOptions adds gRPC dial options to every replica's connection,
// after the client's own (keepalive pings every 30s, transport security).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithCallTimeout bounds each attempt of a call, beyond the time it asks
// lockd to wait for a lock, so a replica that stops answering is left for
// the next; default 10s.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) { o.callTimeout = d }
}

// WithRetryFor bounds how long a call keeps retrying replicas that answer
// UNAVAILABLE (or not at all) when its context has no deadline; default
// 30s.
func WithRetryFor(d time.Duration) Option {
	return func(o *options) { o.retryFor = d }
}

// New returns a Client for the lockd replicas at addrs ("host:port").
// Connections are made lazily, when the first call needs them.
func New(addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no lockd address given")
	}
	o := options{callTimeout: 10 * time.Second, retryFor: 30 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	// Pings find a replica gone silent (a partition, a host that froze)
	// even while no call is under way; lockd allows one every 5s or more.
	dial := []grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true})}
	if o.tls != nil {
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	dial = append(dial, o.dial...)
	c := &Client{addrs: append([]string(nil), addrs...), opts: o, keepers: map[keeperKey]*keeper{}}
	for _, addr := range addrs {
		conn, err := grpc.NewClient(addr, dial...)
		if err != nil {
			_ = c.closeConns()
			return nil, fmt.Errorf("client: %s: %w", addr, err)
		}
		c.conns = append(c.conns, conn)
		c.locks = append(c.locks, lockdv1.NewLockServiceClient(conn))
		c.tokens = append(c.tokens, lockdv1.NewTokenServiceClient(conn))
		c.elects = append(c.elects, lockdv1.NewElectionServiceClient(conn))
		c.sems = append(c.sems, lockdv1.NewSemaphoreServiceClient(conn))
	}
	host, _ := os.Hostname()
	c.owners = fmt.Sprintf("%s:%d:", host, os.Getpid())
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Close releases the holds of every lease the client holds (within the
// call timeout), stops keeping them alive and closes the connections.
func (c *Client) Close() error {
	c.mu.Lock()
	var held []*keeper
	for _, k := range c.keepers {
		held = append(held, k)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.callTimeout)
	var wg sync.WaitGroup
	for _, k := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.releaseAll(ctx)
		}()
	}
	wg.Wait()
	cancel()
	c.cancel()
	c.wg.Wait()
	c.closed.Store(true)
	return c.closeConns()
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("client: closed")

func (c *Client) closeConns() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// AccessToken returns the current access_token of app (as configured in
// lockd) and when it expires.
func (c *Client) AccessToken(ctx context.Context, app string) (string, time.Time, error) {
	var res *lockdv1.GetAccessTokenResponse
	err := c.retry(ctx, false, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		defer cancel()
		var err error
		res, err = c.tokens[r].GetAccessToken(actx, &lockdv1.GetAccessTokenRequest{App: app})
		return err
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return res.GetAccessToken(), res.GetExpireTime().AsTime(), nil
}

// current is the replica calls go to first.
func (c *Client) current() int {
	return int(c.cur.Load()) % len(c.conns)
}

// moveFrom makes the replica after r the current one, unless another call
// has already moved on from r.
func (c *Client) moveFrom(r int) {
	c.cur.CompareAndSwap(uint32(r), uint32((r+1)%len(c.conns)))
}

// retry runs attempt on the current replica, moving to the next one after
// each failure that another replica may not have (UNAVAILABLE, an attempt
// that timed out; for lock calls also a replica's own limits). After a full
// round of failures it backs off. It gives up when ctx ends, or when ctx has
// no deadline and retrying has gone on for the client's retry bound.
func (c *Client) retry(ctx context.Context, locking bool, attempt func(ctx context.Context, r int) error) error {
	var (
		giveUp time.Time
		pause  = 50 * time.Millisecond
	)
	for n := 1; ; n++ {
		r := c.current()
		err := attempt(ctx, r)
		if err != nil && c.closed.Load() {
			return ErrClosed
		}
		if err == nil || !retryable(ctx, err, locking) {
			return ctxErr(ctx, err)
		}
		c.moveFrom(r)
		if _, ok := ctx.Deadline(); !ok {
			if giveUp.IsZero() {
				giveUp = time.Now().Add(c.opts.retryFor)
			} else if time.Now().After(giveUp) {
				return err
			}
		}
		if n%len(c.conns) == 0 {
			if err := sleep(ctx, mrand.N(pause)+pause/2); err != nil {
				return err
			}
			pause = min(2*pause, time.Second)
		}
	}
}

// retryable reports whether err may not recur on another replica or a bit
// later.
func retryable(ctx context.Context, err error, locking bool) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.DeadlineExceeded, codes.Canceled:
		// The attempt's own bound, not the caller's: the replica did not
		// answer in time.
		return true
	case codes.ResourceExhausted:
		// Too many waiters or streams on that replica.
		return locking
	}
	return false
}

// ctxErr prefers the context's own error when the context has ended, so
// callers can match context.Canceled and context.DeadlineExceeded; the
// replica's answer is kept in the message.
func ctxErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Canceled && s.Code() != codes.DeadlineExceeded {
		return fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newOwner makes up an owner unique to one lease: host:pid:random.
func (c *Client) newOwner() string {
	return c.owners + newID()
}

// newID returns 128 random bits, URL-safe.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// bearer sends a bearer token with every call.
type bearer string

// GetRequestMetadata returns the authorization header.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: lockd is often a sidecar on loopback.
func (bearer) RequireTransportSecurity() bool { return false }
