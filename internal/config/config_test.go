package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat"
)

// The secrets the tests' environment and files hold; no error, log line or
// printed value may contain them.
const (
	mpSecret     = "mp-S3cret+/=&value"
	corpSecret   = "corp-s3cret-value"
	ordersToken  = "orders-token-0123456789abcdef"
	billingToken = "billing-token-0123456789abcdef"
)

var secrets = []string{mpSecret, corpSecret, ordersToken, billingToken}

// sources serves the environment and files the tests refer to.
func sources() config.Sources {
	env := map[string]string{
		"MP_SECRET":     mpSecret,
		"ORDERS_TOKEN":  ordersToken,
		"EMPTY":         "",
		"SPACED_SECRET": "has space " + mpSecret,
		"SHORT_TOKEN":   "short",
	}
	files := map[string]string{
		"/run/secrets/corp":    corpSecret + "\n",
		"/run/secrets/billing": billingToken + "\r\n",
		"/run/secrets/empty":   "\n",
		"/etc/lockd/relative":  corpSecret,
	}
	return config.Sources{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		ReadFile: func(p string) ([]byte, error) {
			if v, ok := files[p]; ok {
				return []byte(v), nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
		Dir: "/etc/lockd",
	}
}

const validFile = `
apps:
  - name: mp
    provider: wechat
    appid: wx1234
    secret_env: MP_SECRET
    token_api: stable
    api_base: https://api.weixin.qq.com
  - name: corp.hr
    provider: wecom
    appid: ww5678
    secret_file: /run/secrets/corp
auth:
  clients:
    - name: orders
      token_env: ORDERS_TOKEN
      locks: ["orders/"]
      apps: ["mp"]
    - name: billing
      token_file: /run/secrets/billing
      locks: [""]
      apps: [mp, corp.hr]
`

func TestParseReadsAValidFile(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(validFile), sources())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Apps) != 2 || c.Auth == nil || len(c.Auth.Clients) != 2 {
		t.Fatalf("parsed %+v", c)
	}
	mp, ok := c.App("mp")
	if !ok {
		t.Fatal("app mp not found")
	}
	want := wechat.Config{Provider: "wechat", TokenAPI: "stable", APIBase: "https://api.weixin.qq.com", AppID: "wx1234", Secret: mpSecret}
	if got := mp.WeChat(); got != want {
		t.Fatalf("mp = %v, want %v", got, want)
	}
	if corp, _ := c.App("corp.hr"); string(corp.Secret) != corpSecret {
		t.Fatal("secret_file: the trailing newline was not trimmed")
	}
	if _, ok := c.App("nope"); ok {
		t.Fatal("App found an app that is not configured")
	}
	orders, billing := c.Auth.Clients[0], c.Auth.Clients[1]
	if string(orders.Token) != ordersToken || string(billing.Token) != billingToken {
		t.Fatal("client tokens not read")
	}
	if fmt.Sprint(orders.Locks) != "[orders/]" || fmt.Sprint(billing.Locks) != "[]" || len(billing.Locks) != 1 || fmt.Sprint(billing.Apps) != "[mp corp.hr]" {
		t.Fatalf("clients = %+v", c.Auth.Clients)
	}
}

func TestParseAcceptsAppsOfDistinctAccountsOnOneID(t *testing.T) {
	t.Parallel()
	file := `apps:
  - {name: mp, provider: wechat, appid: wx1, secret_env: MP_SECRET}
  - {name: mp-stable, provider: wechat, appid: wx1, token_api: stable, secret_env: MP_SECRET}
  - {name: hr, provider: wecom, appid: ww1, secret_env: MP_SECRET}
  - {name: sales, provider: wecom, appid: ww1, secret_file: /run/secrets/corp}
`
	c, err := config.Parse([]byte(file), sources())
	if err != nil || len(c.Apps) != 4 {
		t.Fatalf("Parse = %v, %v; want the four apps: WeChat keeps classic and stable tokens apart, and each WeCom app of a corp has its own secret", c, err)
	}
}

func TestParseReadsEveryProvider(t *testing.T) {
	t.Parallel()
	file := `apps:
  - {name: lark, provider: feishu, appid: cli_a1, token_api: app, api_base: "https://open.larksuite.com", secret_env: MP_SECRET}
  - {name: ding, provider: dingtalk, appid: dingkey1, secret_env: MP_SECRET}
  - {name: ding-old, provider: dingtalk, appid: dingkey2, token_api: legacy, secret_env: MP_SECRET}
  - name: reports
    provider: oauth2
    token_url: https://auth.example.com/oauth2/token
    client_id: reports
    secret_env: MP_SECRET
    scope: "reports.read reports.export"
    audience: https://api.example.com
    auth_style: body
  - {name: reports-admin, provider: oauth2, token_url: "https://auth.example.com/oauth2/token", appid: reports, secret_env: MP_SECRET, scope: admin}
`
	c, err := config.Parse([]byte(file), sources())
	if err != nil || len(c.Apps) != 5 {
		t.Fatalf("Parse = %v, %v; want the five apps (one OAuth2 client's tokens differ by scope)", c, err)
	}
	r, _ := c.App("reports")
	want := upstream.Config{Provider: "oauth2", TokenURL: "https://auth.example.com/oauth2/token", AppID: "reports", Secret: mpSecret,
		Scope: "reports.read reports.export", Audience: "https://api.example.com", AuthStyle: "body"}
	if got := r.Upstream(); got != want {
		t.Fatalf("Upstream = %v, want %v", got, want)
	}
	if l, _ := c.App("lark"); l.Upstream().TokenAPI != "app" || l.Upstream().APIBase != "https://open.larksuite.com" {
		t.Fatalf("lark = %v", l.Upstream())
	}
}

func TestParseWithoutAuthMeansNoAuthentication(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte("apps:\n  - {name: mp, provider: wechat, appid: wx1, secret_env: MP_SECRET}\n"), sources())
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth != nil {
		t.Fatalf("Auth = %+v, want nil", c.Auth)
	}
	if mp, _ := c.App("mp"); mp.WeChat().TokenAPI != "" {
		t.Fatal("token_api default should be left to the wechat package")
	}
}

func TestParseRefusesBadFiles(t *testing.T) {
	t.Parallel()
	app := func(fields string) string { return "apps:\n  - {" + fields + "}\n" }
	const mp = "name: mp, provider: wechat, appid: wx1, "
	withAuth := func(clients string) string {
		return app(mp+"secret_env: MP_SECRET") + "auth:\n  clients:\n" + clients
	}
	tests := []struct {
		name string
		file string
		want []string // substrings of the error, in order of appearance
	}{
		{"an empty file is refused", "", []string{"the file is empty"}},
		{"a file of comments is refused", "# nothing\n", []string{"the file is empty"}},
		{"a file that is not YAML is refused", "apps: [\n", []string{"not YAML"}},
		{"a second YAML document is refused", "apps: []\n---\napps: []\n", []string{"line 2: more than one YAML document"}},
		{"a list at the top is refused", "- mp\n", []string{"line 1: the file must be a mapping"}},
		{"an unknown top-level field is refused", "apps: []\nauht: {}\n", []string{`line 2: unknown field "auht"`}},
		{"apps that is not a list is refused", "apps: mp\n", []string{"line 1: apps: must be a list"}},
		{"an app that is not a mapping is refused", "apps: [mp]\n", []string{"apps[0]: must be a mapping"}},
		{"a missing name is refused", app("provider: wechat, appid: wx1, secret_env: MP_SECRET"), []string{"apps[0]: name: missing"}},
		{"a name with a space is refused", app("name: m p, provider: wechat, appid: wx1, secret_env: MP_SECRET"), []string{`apps[0] "m p": name: want letters`}},
		{"a name starting with a dash is refused", app("name: -mp, provider: wechat, appid: wx1, secret_env: MP_SECRET"), []string{`name: want letters`}},
		{"a name with braces is refused", app("name: 'a{b}', provider: wechat, appid: wx1, secret_env: MP_SECRET"), []string{`name: want letters`}},
		{"a long name is refused", app("name: " + strings.Repeat("a", 65) + ", provider: wechat, appid: wx1, secret_env: MP_SECRET"), []string{"name: longer than 64 bytes"}},
		{
			"duplicate app names are refused",
			"apps:\n  - {" + mp + "secret_env: MP_SECRET}\n  - {" + mp + "secret_env: MP_SECRET}\n",
			[]string{`line 3: apps[1] "mp": name: also the name of apps[0]`},
		},
		{
			"two classic apps on one appid are refused",
			"apps:\n  - {" + mp + "secret_env: MP_SECRET}\n  - {name: mp2, provider: wechat, appid: wx1, secret_file: /run/secrets/corp}\n",
			[]string{`line 3: apps[1] "mp2": appid: wx1 is also the classic appid of apps[0]`},
		},
		{
			"two stable apps on one appid are refused",
			"apps:\n  - {" + mp + "token_api: stable, secret_env: MP_SECRET}\n  - {name: mp2, provider: wechat, appid: wx1, token_api: stable, secret_env: MP_SECRET}\n",
			[]string{`apps[1] "mp2": appid: wx1 is also the stable appid of apps[0]`},
		},
		{
			"one WeCom app configured twice is refused",
			"apps:\n  - {name: hr, provider: wecom, appid: ww1, secret_env: MP_SECRET}\n  - {name: hr2, provider: wecom, appid: ww1, secret_env: MP_SECRET}\n",
			[]string{`apps[1] "hr2": appid: corpid ww1 with the same secret is also apps[0]`},
		},
		{"a missing provider is refused", app("name: mp, appid: wx1, secret_env: MP_SECRET"), []string{`apps[0] "mp": provider: missing`}},
		{"an oauth2 client without token_url is refused", app("name: r, provider: oauth2, client_id: r, secret_env: MP_SECRET"),
			[]string{`apps[0] "r": token_url: missing`}},
		{"an oauth2 client without client_id is refused", app("name: r, provider: oauth2, token_url: 'https://a.example/t', secret_env: MP_SECRET"),
			[]string{`apps[0] "r": appid: missing`}},
		{"client_id and appid both are refused", app("name: r, provider: oauth2, token_url: 'https://a.example/t', client_id: r, appid: r, secret_env: MP_SECRET"),
			[]string{`apps[0] "r": client_id and appid: give one, not both`}},
		{"client_id for wechat is refused", app(mp + "client_id: x, secret_env: MP_SECRET"), []string{`apps[0] "mp": client_id: only for provider "oauth2"`}},
		{"a token_url with a secret in it is refused without echoing it",
			app("name: r, provider: oauth2, token_url: 'https://r:" + mpSecret + "@a.example/t', client_id: r, secret_env: MP_SECRET"),
			[]string{`apps[0] "r": token_url`}},
		{"an unknown auth_style is refused", app("name: r, provider: oauth2, token_url: 'https://a.example/t', client_id: r, auth_style: mtls, secret_env: MP_SECRET"),
			[]string{`auth_style "mtls"`}},
		{"a scope for feishu is refused", app("name: f, provider: feishu, appid: cli_1, scope: all, secret_env: MP_SECRET"), []string{`apps[0] "f": scope: only for provider "oauth2"`}},
		{"api_base for oauth2 is refused", app("name: r, provider: oauth2, token_url: 'https://a.example/t', api_base: 'https://a.example', client_id: r, secret_env: MP_SECRET"),
			[]string{`not for provider "oauth2": set token_url`}},
		{"a dingtalk token_api of wechat's is refused", app("name: d, provider: dingtalk, appid: k, token_api: stable, secret_env: MP_SECRET"), []string{`token_api "stable"`}},
		{
			"one OAuth2 client at one server with one scope configured twice is refused",
			"apps:\n  - {name: a, provider: oauth2, token_url: 'https://a.example/t', client_id: r, secret_env: MP_SECRET}\n  - {name: b, provider: oauth2, token_url: 'https://a.example/t', client_id: r, secret_env: MP_SECRET}\n",
			[]string{`apps[1] "b": client_id: r with the same token_url, scope and audience is also apps[0]`},
		},
		{
			"one Feishu app configured twice is refused",
			"apps:\n  - {name: a, provider: feishu, appid: cli_1, secret_env: MP_SECRET}\n  - {name: b, provider: feishu, appid: cli_1, secret_env: MP_SECRET}\n",
			[]string{`apps[1] "b": appid: cli_1 is also the feishu tenant appid of apps[0]`},
		},
		{"an unknown provider is refused", app("name: mp, provider: alipay, appid: wx1, secret_env: MP_SECRET"), []string{`apps[0] "mp": provider "alipay"`}},
		{"an unknown token_api is refused", app(mp + "token_api: fast, secret_env: MP_SECRET"), []string{`token_api "fast"`}},
		{"a token_api for wecom is refused", app("name: hr, provider: wecom, appid: ww1, token_api: stable, secret_env: MP_SECRET"), []string{`apps[0] "hr": token_api "stable"`}},
		{"an api_base that is not http is refused", app(mp + "api_base: ftp://x, secret_env: MP_SECRET"), []string{`api_base "ftp://x"`}},
		{"a missing appid is refused", app("name: mp, provider: wechat, secret_env: MP_SECRET"), []string{`apps[0] "mp": appid: missing`}},
		{"an unknown app field is refused", app(mp + "secert_env: MP_SECRET"), []string{`unknown field "secert_env"`, "secret_env or secret_file: missing"}},
		{"a field given twice is refused", "apps:\n  - name: mp\n    name: mp2\n", []string{`line 3: apps[0]: name: given twice`}},
		{"a list where a string belongs is refused", app(mp + "secret_env: [MP_SECRET]"), []string{"secret_env: must be a string"}},
		{"a missing secret source is refused", app(mp), []string{`apps[0] "mp": secret_env or secret_file: missing`}},
		{"both secret sources are refused", app(mp + "secret_env: MP_SECRET, secret_file: /run/secrets/corp"), []string{"secret_env and secret_file: give one, not both"}},
		{"an inline secret is refused without echoing it", app(mp + "secret: " + mpSecret), []string{"secret: do not put the secret in this file"}},
		{"an unset secret_env is refused", app(mp + "secret_env: NOT_SET"), []string{`apps[0] "mp": secret_env: environment variable NOT_SET is not set`}},
		{"an empty secret_env is refused", app(mp + "secret_env: EMPTY"), []string{"environment variable EMPTY is empty"}},
		{"a secret with a space is refused by position", app(mp + "secret_env: SPACED_SECRET"), []string{"secret_env: the secret has a space or control character at byte 3"}},
		{"a missing secret_file is refused", app(mp + "secret_file: /run/secrets/nope"), []string{`apps[0] "mp": secret_file: the file named there cannot be read: file does not exist`}},
		{"a relative secret_file is read beside the config", app(mp + "secret_file: nope"), []string{"secret_file: the file named there (relative to /etc/lockd) cannot be read"}},
		{"an empty secret_file is refused", app(mp + "secret_file: /run/secrets/empty"), []string{"secret_file: /run/secrets/empty is empty"}},
		{"every problem is reported", "apps:\n  - {name: a, provider: x, appid: wx1, secret_env: NOT_SET}\n  - {name: b, appid: wx2, secret_env: MP_SECRET}\n",
			[]string{`apps[0] "a": secret_env: environment variable NOT_SET is not set`, `apps[0] "a": provider "x"`, `apps[1] "b": provider: missing`}},
		{"an empty auth is refused", app(mp+"secret_env: MP_SECRET") + "auth:\n", []string{"auth: no clients"}},
		{"auth without clients is refused", app(mp+"secret_env: MP_SECRET") + "auth: {clients: []}\n", []string{"auth: no clients"}},
		{"an unknown auth field is refused", app(mp+"secret_env: MP_SECRET") + "auth: {clients: [], users: []}\n", []string{`auth: unknown field "users"`}},
		{"a client without a name is refused", withAuth("    - {token_env: ORDERS_TOKEN}\n"), []string{"auth.clients[0]: name: missing"}},
		{"duplicate client names are refused", withAuth("    - {name: o, token_env: ORDERS_TOKEN}\n    - {name: o, token_file: /run/secrets/billing}\n"), []string{`auth.clients[1] "o": name: also the name of auth.clients[0]`}},
		{"a client without a token is refused", withAuth("    - {name: o}\n"), []string{`auth.clients[0] "o": token_env or token_file: missing`}},
		{"an unset token_env is refused", withAuth("    - {name: o, token_env: NOT_SET}\n"), []string{"token_env: environment variable NOT_SET is not set"}},
		{"a missing token_file is refused", withAuth("    - {name: o, token_file: /run/secrets/nope}\n"), []string{"token_file: the file named there cannot be read"}},
		{"a short token is refused", withAuth("    - {name: o, token_env: SHORT_TOKEN}\n"), []string{"token_env: the token is 5 bytes, shorter than 16"}},
		{"an inline token is refused", withAuth("    - {name: o, token: " + ordersToken + "}\n"), []string{"token: do not put the token in this file"}},
		{"a shared token is refused", withAuth("    - {name: o, token_env: ORDERS_TOKEN}\n    - {name: p, token_env: ORDERS_TOKEN}\n"), []string{`auth.clients[1] "p": token: the same as client "o"'s`}},
		{"a client naming an unknown app is refused", withAuth("    - {name: o, token_env: ORDERS_TOKEN, apps: [mp, pm]}\n"), []string{`auth.clients[0] "o": apps[1]: "pm" is not the name of an app`}},
		{"locks that is not a list is refused", withAuth("    - {name: o, token_env: ORDERS_TOKEN, locks: orders/}\n"), []string{"locks: must be a list of strings"}},
		{"a null lock prefix is refused", withAuth("    - {name: o, token_env: ORDERS_TOKEN, locks: [~]}\n"), []string{"locks[0]: must be a string"}},
		{"a lock prefix with a control character is refused", withAuth("    - {name: o, token_env: ORDERS_TOKEN, locks: [\"a\\tb\"]}\n"), []string{"locks[0]: has a control character"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse([]byte(tt.file), sources())
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse = %+v, %v; want ErrInvalid", c, err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\ndoes not contain %q", msg, w)
				}
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error %q contains a secret", msg)
				}
			}
		})
	}
}

func TestSecretsDoNotPrint(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(validFile), sources())
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("config", "apps", c.Apps, "app", c.Apps[0], "client", c.Auth.Clients[0], "secret", c.Apps[0].Secret)
	asJSON, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Join([]string{
		fmt.Sprint(c), fmt.Sprintf("%+v", c.Apps), fmt.Sprintf("%#v", c.Apps), fmt.Sprintf("%+v", *c.Auth),
		fmt.Sprintf("%#v", c.Auth.Clients), logs.String(), string(asJSON), c.Apps[0].WeChat().String(),
	}, "\n")
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatalf("a secret was printed:\n%s", out)
		}
	}
	if !strings.Contains(out, "REDACTED") {
		t.Fatalf("secrets should print as REDACTED:\n%s", out)
	}
}

func TestLoadReadsSecretFilesBesideTheConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mp.secret"), []byte(mpSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "lockd.yaml")
	file := "apps:\n  - {name: mp, provider: wechat, appid: wx1, secret_file: mp.secret}\n  - {name: hr, provider: wecom, appid: ww1, secret_env: HR_SECRET}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) { return corpSecret, k == "HR_SECRET" }
	c, err := config.Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	mp, _ := c.App("mp")
	hr, _ := c.App("hr")
	if string(mp.Secret) != mpSecret || string(hr.Secret) != corpSecret {
		t.Fatal("secrets not read")
	}

	if _, err := config.Load(filepath.Join(dir, "missing.yaml"), env); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file = %v", err)
	}
	big := filepath.Join(dir, "big.secret")
	if err := os.WriteFile(big, make([]byte, config.MaxSecretFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("apps:\n  - {name: mp, provider: wechat, appid: wx1, secret_file: big.secret}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path, env); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("Load with an oversized secret file = %v", err)
	}
}
