package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/config"
)

// FuzzParse feeds Parse arbitrary files: it must not panic, accept only
// valid configurations, and keep the secrets it reads out of its errors.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		validFile,
		"",
		"apps: []\n",
		"apps:\n  - {name: mp, provider: wechat, appid: wx1, secret_env: MP_SECRET}\n",
		"apps:\n  - &a {name: mp, provider: wecom, appid: ww1, secret_file: /run/secrets/corp}\n  - *a\n",
		"auth:\n  clients:\n    - {name: o, token_env: ORDERS_TOKEN, locks: [''], apps: []}\n",
		"apps: {name: mp}\n",
		"- - - [",
		"apps:\n  - name: mp\n    provider: wechat\n    appid: \"wx 1\"\n    secret: x\n",
		"a: &a [*a]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, sources())
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) && !strings.Contains(string(data), s) {
					t.Fatalf("error %q contains a secret", err)
				}
			}
			return
		}
		names := map[string]bool{}
		for _, a := range c.Apps {
			if a.Name == "" || names[a.Name] || a.Secret == "" {
				t.Fatalf("accepted app %+v", a)
			}
			names[a.Name] = true
			if err := a.WeChat().Validate(); err != nil {
				t.Fatalf("accepted app %q: %v", a.Name, err)
			}
		}
		if c.Auth != nil {
			if len(c.Auth.Clients) == 0 {
				t.Fatal("accepted auth without clients")
			}
			for _, cl := range c.Auth.Clients {
				if len(cl.Token) < config.MinClientTokenBytes {
					t.Fatalf("accepted client %q with a short token", cl.Name)
				}
				for _, app := range cl.Apps {
					if !names[app] {
						t.Fatalf("accepted client %q naming unknown app %q", cl.Name, app)
					}
				}
			}
		}
	})
}
