package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redislock"
)

// connect opens the Redis deployment named by cfg, or the embedded store.
// Every new connection to Redis is first checked by identity (the lock
// engine's redislock.IdentityCheck).
func connect(cfg Config, log *slog.Logger, identity *redislock.IdentityCheck) (redis.UniversalClient, func(), error) {
	if cfg.Redis == "" {
		// No listener: no other process on the host can reach the store.
		st, err := embedded.StartPrivate()
		if err != nil {
			return nil, nil, fmt.Errorf("embedded store: %w", err)
		}
		log.Warn("no --redis given: serving from the embedded store, for trying lockd only, not for production; locks live in this process alone and vanish with it")
		rdb := redis.NewClient(&redis.Options{Addr: "embedded", Dialer: st.Dial, ContextTimeoutEnabled: true})
		return rdb, func() { rdb.Close(); st.Close() }, nil
	}
	password, err := redisPassword(cfg.RedisPassword, cfg.RedisPasswordFile)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := newRedisClient(cfg.Redis, cfg.RedisCluster, cfg.RedisMaster, password, identity.OnConnect)
	if err != nil {
		return nil, nil, err
	}
	return rdb, func() { rdb.Close() }, nil
}

// redisPassword returns the Redis password given directly or in file (one
// or the other), without a trailing newline. Its errors never show file,
// which may be the password pasted in its place.
func redisPassword(direct, file string) (string, error) {
	if file == "" {
		return direct, nil
	}
	if direct != "" {
		return "", errors.New("--redis-password-file and LOCKD_REDIS_PASSWORD: give the password once")
	}
	pw, err := config.ReadSecretFile(file)
	if err != nil {
		return "", fmt.Errorf("--redis-password-file: %w", err)
	}
	return pw, nil
}

// NewRedisClient opens spec: a redis:// or rediss:// URL, or a comma list of
// host:port (Cluster when more than one, or when cluster is set; sentinels
// when master names a Sentinel master). Errors never show spec itself, as
// a URL may hold a password.
func NewRedisClient(spec string, cluster bool, master string) (redis.UniversalClient, error) {
	return newRedisClient(spec, cluster, master, "", nil)
}

// newRedisClient is NewRedisClient with a password given apart from spec
// (empty: none, or the URL's), and a check of every new connection
// (nil: none).
func newRedisClient(spec string, cluster bool, master, password string, onConnect func(context.Context, *redis.Conn) error) (redis.UniversalClient, error) {
	const timeout = 2 * time.Second
	if strings.Contains(spec, "://") {
		opt, err := redis.ParseURL(spec)
		if err != nil {
			return nil, fmt.Errorf("--redis: %s", urlProblem(spec, err))
		}
		if password != "" {
			if opt.Password != "" {
				return nil, errors.New("--redis: the URL holds a password and another was given (--redis-password-file or LOCKD_REDIS_PASSWORD); give it once")
			}
			opt.Password = password
		}
		opt.ContextTimeoutEnabled = true
		opt.OnConnect = onConnect
		if master != "" {
			return redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: master, SentinelAddrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password,
				DB: opt.DB, TLSConfig: opt.TLSConfig, ContextTimeoutEnabled: true, DialTimeout: timeout, OnConnect: onConnect,
			}), nil
		}
		if cluster {
			return redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password,
				TLSConfig: opt.TLSConfig, ContextTimeoutEnabled: true, DialTimeout: timeout, OnConnect: onConnect,
			}), nil
		}
		return redis.NewClient(opt), nil
	}
	var addrs []string
	entries := strings.Split(spec, ",")
	for i, a := range entries {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if strings.Contains(a, "@") {
			return nil, fmt.Errorf("--redis: entry %d of %d holds user info; write a redis:// URL, or give the password with --redis-password-file", i+1, len(entries))
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("--redis: entry %d of %d is not host:port (a URL starts with redis:// or rediss://)", i+1, len(entries))
		}
		addrs = append(addrs, a)
	}
	switch {
	case len(addrs) == 0:
		return nil, errors.New("--redis: no address given")
	case master != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, Password: password,
			ContextTimeoutEnabled: true, DialTimeout: timeout, OnConnect: onConnect}), nil
	case len(addrs) > 1 || cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Password: password,
			ContextTimeoutEnabled: true, DialTimeout: timeout, OnConnect: onConnect}), nil
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0], Password: password, ContextTimeoutEnabled: true, DialTimeout: timeout, OnConnect: onConnect}), nil
}

// urlProblem describes why a --redis URL does not parse without quoting
// it: the URL, or the bit of it an error would quote, may be a password.
func urlProblem(spec string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		var esc url.EscapeError
		if errors.As(ue.Err, &esc) {
			return "not a valid URL: a '%' that does not start an escape such as %40 (the URL is not shown: it may hold a password)"
		}
		return "not a valid URL (the URL is not shown: it may hold a password)"
	}
	msg := err.Error()
	if u, perr := url.Parse(spec); perr == nil && u.User != nil {
		for _, secret := range []string{u.User.String(), u.User.Username()} {
			if secret != "" {
				msg = strings.ReplaceAll(msg, secret, "xxxxx")
			}
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// validNamespace checks --namespace: 1 to 64 letters, digits, '.', '_' or
// '-', starting with a letter or digit. Every Redis key and channel starts
// with the namespace and a colon (locks "<ns>:{", tokens "<ns>:token:"),
// so without colons (and braces) in it no namespace's keys can fall among
// another's.
func validNamespace(ns string) error {
	if ns == "" || len(ns) > 64 {
		return fmt.Errorf("--namespace must be 1 to 64 characters, got %d", len(ns))
	}
	for i, r := range ns {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '.' || r == '_' || r == '-'))
		if !ok {
			return fmt.Errorf("--namespace %q: want letters, digits, '.', '_' or '-', starting with a letter or digit", ns)
		}
	}
	return nil
}

// redisLogger sends go-redis's own messages (reconnects, dial failures) to
// the debug log; outages are reported once by the health watcher instead.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
