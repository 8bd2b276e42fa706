// Package config reads lockd's YAML configuration file (--config): the apps
// whose access_tokens lockd serves, and the clients allowed to call it.
//
// Secrets never live in the file: each app names an environment variable
// (secret_env) or a file (secret_file) holding its secret, and each client
// one holding its bearer token (token_env, token_file). Parse and Load read
// them, validate everything, and report every problem at once, naming the
// app or client and the field, never a secret.
//
//	apps:
//	  - name: mp               # what clients pass as `app`
//	    provider: wechat       # wechat | wecom | feishu | dingtalk | oauth2
//	    appid: wx1234          # wecom: the corpid; feishu: app_id; dingtalk: appKey
//	    secret_env: MP_SECRET  # or secret_file: /run/secrets/mp
//	    token_api: classic     # wechat: classic | stable; feishu: tenant | app; dingtalk: v1 | legacy
//	    api_base: https://api.weixin.qq.com
//	  - name: reports
//	    provider: oauth2
//	    token_url: https://auth.example.com/oauth2/token
//	    client_id: reports     # or appid
//	    secret_env: REPORTS_SECRET
//	    scope: "reports.read"  # optional
//	    audience: https://api.example.com  # optional
//	    auth_style: basic      # basic | body
//	auth:                      # absent = no authentication
//	  clients:
//	    - name: orders
//	      token_env: ORDERS_TOKEN   # or token_file
//	      locks: ["orders/"]        # key prefixes it may lock; [""] = all
//	      apps: ["mp"]              # apps whose tokens it may read
//	      limits: {waiters: 200, keepalives: 1000, watches: 100, leases: 5000, connections: 100, refreshes_per_hour: 10}
//	      tls_subject: "CN=orders,O=Example" # optional: the client certificate it must present
//	      admin: false              # true allows the admin calls
//
// Parse also reports, in Config.Warnings, what is valid but likely a
// mistake: lock prefixes without a separator, and prefixes covering another
// client's.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lockd/lockd/internal/upstream"
)

// ErrInvalid is wrapped by every error Parse and Load return for a file
// that is not a valid configuration. The message lists every problem found.
var ErrInvalid = errors.New("config: invalid")

const (
	// MaxFileBytes bounds the configuration file.
	MaxFileBytes = 1 << 20
	// MaxSecretFileBytes bounds a secret_file or token_file.
	MaxSecretFileBytes = 64 << 10
	// MaxNameBytes bounds app and client names.
	MaxNameBytes = 64
	// MinClientTokenBytes is the shortest bearer token a client may have:
	// shorter ones can be guessed.
	MinClientTokenBytes = 16
	// MaxLockPrefixBytes bounds an entry of a client's locks, as keys are.
	MaxLockPrefixBytes = 512
	// MaxLimit bounds each of a client's limits.
	MaxLimit = 1 << 30
)

// Config is lockd's configuration file.
type Config struct {
	// Apps are the apps whose access_tokens lockd serves, in file order.
	Apps []App
	// Auth lists the clients allowed to call lockd; nil means no
	// authentication.
	Auth *Auth
	// Warnings are things in the file that work but are likely mistakes,
	// such as one client's lock prefix covering another's keys; lockd logs
	// them.
	Warnings []string
}

// App is one entry of the apps list.
type App struct {
	// Name is what clients pass as `app`: 1 to MaxNameBytes letters,
	// digits, '.', '_' or '-', starting with a letter or digit.
	Name string
	// Provider is one of upstream.Providers: wechat, wecom, feishu,
	// dingtalk or oauth2.
	Provider string
	// AppID is the appid (wechat), corpid (wecom), app_id (feishu), appKey
	// (dingtalk) or client_id (oauth2, which may spell the key client_id).
	AppID string
	// SecretEnv names the environment variable holding the secret, when
	// the secret comes from the environment.
	SecretEnv string
	// SecretFile is the file holding the secret, when it comes from a
	// file; a relative path is relative to the configuration file.
	SecretFile string
	// TokenAPI picks among the provider's token APIs: classic (default) or
	// stable for wechat, tenant (default) or app for feishu, v1 (default)
	// or legacy for dingtalk; empty for the others.
	TokenAPI string
	// APIBase overrides the upstream's scheme and host (tests, proxies,
	// Lark); empty means the provider's public host. Not for oauth2.
	APIBase string
	// TokenURL is the OAuth2 token endpoint (oauth2 only, required).
	TokenURL string
	// Scope is the OAuth2 scope to ask for, space-separated (optional).
	Scope string
	// Audience is the OAuth2 audience parameter (optional).
	Audience string
	// AuthStyle is how an OAuth2 client sends its credentials: basic
	// (default, an HTTP Basic header) or body.
	AuthStyle string
	// Secret is the app's secret (AppSecret, corpsecret, app_secret,
	// appSecret or client_secret) read from SecretEnv or SecretFile,
	// without a trailing newline.
	Secret Secret
}

// Upstream returns the upstream configuration of a.
func (a App) Upstream() upstream.Config {
	return upstream.Config{
		Provider:  a.Provider,
		TokenAPI:  a.TokenAPI,
		APIBase:   a.APIBase,
		TokenURL:  a.TokenURL,
		AppID:     a.AppID,
		Secret:    string(a.Secret),
		Scope:     a.Scope,
		Audience:  a.Audience,
		AuthStyle: a.AuthStyle,
	}
}

// WeChat is Upstream, under the name it had when lockd served WeChat
// alone.
//
// Deprecated: use Upstream.
func (a App) WeChat() upstream.Config { return a.Upstream() }

// LogValue lets log/slog print a without its secret.
func (a App) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", a.Name),
		slog.String("provider", a.Provider),
		slog.String("appid", a.AppID),
		slog.String("token_api", a.TokenAPI),
		slog.String("api_base", SafeURL(a.APIBase)),
		slog.String("token_url", SafeURL(a.TokenURL)),
	)
}

// Auth is the auth section: who may call lockd, and for what.
type Auth struct {
	// Clients are the callers lockd knows, in file order.
	Clients []Client
}

// Client is one entry of auth.clients.
type Client struct {
	// Name identifies the client in logs; the same rule as App.Name.
	Name string
	// TokenEnv names the environment variable holding the bearer token,
	// when it comes from the environment.
	TokenEnv string
	// TokenFile is the file holding the bearer token, when it comes from a
	// file; a relative path is relative to the configuration file.
	TokenFile string
	// Locks are the key prefixes the client may lock; "" allows every key.
	Locks []string
	// Apps are the names of the apps whose tokens the client may read.
	Apps []string
	// Limits bound what the client may hold on one replica at once; zero
	// fields leave it bound only by the replica-wide limits.
	Limits Limits
	// Admin allows the client the administrative calls.
	Admin bool
	// TLSSubject, when set, is the subject distinguished name (RFC 2253,
	// as `openssl x509 -noout -subject -nameopt RFC2253` prints it) that
	// the verified client certificate of the client's connections must
	// have: its token alone then lets nobody in.
	TLSSubject string
	// Token is the bearer token read from TokenEnv or TokenFile, at least
	// MinClientTokenBytes of printable ASCII without spaces. Clients send
	// it as "authorization: Bearer <token>".
	Token Secret
}

// Limits are a client's own limits (limits: in its auth.clients entry),
// each on one replica, so that one team cannot exhaust a replica for the
// others; package auth hands them to the services, which enforce them. A
// zero field is not a limit of the client's own: the client is bound by
// the replica-wide limit, or, with two or more clients configured, by its
// fair share of it (see docs/multi-team.md).
type Limits struct {
	// Waiters bounds its lock calls waiting for a busy key at once.
	Waiters int
	// KeepAlives bounds its open KeepAlive, Hold, Campaign and Observe
	// streams.
	KeepAlives int
	// Watches bounds its open WatchAccessToken streams.
	Watches int
	// Leases bounds the leases it holds at once that were granted through
	// the replica by unary calls (Acquire, RLock, WLock, a semaphore's
	// Acquire).
	Leases int
	// Connections bounds its connections open at once on each listener
	// (gRPC, the HTTP/JSON gateway).
	Connections int
	// RefreshesPerHour bounds its RefreshAccessToken calls that may lead
	// to a mint, per app and hour.
	RefreshesPerHour int
}

// LogValue lets log/slog print c without its token.
func (c Client) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.Any("locks", c.Locks),
		slog.Any("apps", c.Apps),
		slog.Bool("admin", c.Admin),
		slog.String("tls_subject", c.TLSSubject),
	)
}

// Secret is a value read from the environment or a file that must not be
// shown: it prints, logs and marshals as "REDACTED". Convert it with
// string(s) where the value itself is needed.
type Secret string

// String returns "REDACTED", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "REDACTED"
}

// GoString is String, so that %#v hides the secret as well.
func (s Secret) GoString() string { return s.String() }

// LogValue lets log/slog print the secret masked.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText masks the secret in JSON, YAML and other text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// App returns the app called name.
func (c *Config) App(name string) (App, bool) {
	if c == nil {
		return App{}, false
	}
	for _, a := range c.Apps {
		if a.Name == name {
			return a, true
		}
	}
	return App{}, false
}

// Sources is where Parse reads what the file refers to.
type Sources struct {
	// LookupEnv reads an environment variable; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// ReadFile reads a secret or token file; nil means reading the file
	// system, at most MaxSecretFileBytes.
	ReadFile func(string) ([]byte, error)
	// Stat looks at a secret or token file, to warn when group or others
	// may read it; nil means os.Stat.
	Stat func(string) (fs.FileInfo, error)
	// Dir is the directory relative secret_file and token_file paths are
	// relative to; empty means the working directory.
	Dir string
}

// Load reads and validates the configuration file at path. Relative
// secret_file and token_file paths are taken relative to the file's
// directory; lookupEnv (nil means os.LookupEnv) reads secret_env and
// token_env.
func Load(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	data, err := readBounded(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data, Sources{LookupEnv: lookupEnv, Dir: filepath.Dir(path)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// errTooLong is the error of reading a file longer than allowed.
var errTooLong = errors.New("longer than allowed")

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errTooLong}
	}
	return data, nil
}

func (s Sources) withDefaults() Sources {
	if s.LookupEnv == nil {
		s.LookupEnv = os.LookupEnv
	}
	if s.ReadFile == nil {
		s.ReadFile = func(path string) ([]byte, error) { return readBounded(path, MaxSecretFileBytes) }
	}
	if s.Stat == nil {
		s.Stat = os.Stat
	}
	return s
}

func (s Sources) path(p string) string {
	if filepath.IsAbs(p) || s.Dir == "" {
		return p
	}
	return filepath.Join(s.Dir, p)
}
