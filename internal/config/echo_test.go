package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/config"
)

// TestPastedSecretsAreNotEchoed pastes secrets where the file wants the
// name of where a secret lives (secret_env, token_env, secret_file,
// token_file) or into api_base's query: the errors name the field and the
// line, and never print the pasted value.
func TestPastedSecretsAreNotEchoed(t *testing.T) {
	t.Parallel()
	const (
		hexSecret   = "0f3a9c2e7b8d4f61a5c3e9b7d2f40a18" // a WeChat AppSecret's shape
		mixedSecret = "Zq7vT2pLk9XwR4sNm8Hc"
		tokenLike   = "tok_live_4eC39HqLyjWDarjtT1zdp7dc"
		// shortRuns looks like no random token: its runs of letters and
		// digits are short. It is still a secret, pasted after a path.
		shortRuns = "S3cr3t!pa55-w0rd.x9"
	)
	const mp = "name: mp, provider: wechat, appid: wx1, "
	app := func(fields string) string { return "apps:\n  - {" + fields + "}\n" }
	withAuth := func(clients string) string {
		return app(mp+"secret_env: MP_SECRET") + "auth:\n  clients:\n" + clients
	}
	tests := []struct {
		name, file, secret string
		want               []string
	}{
		{"a secret pasted as secret_env", app(mp + "secret_env: " + hexSecret), hexSecret, []string{`apps[0] "mp": secret_env:`}},
		{"a mixed-case secret pasted as secret_env", app(mp + "secret_env: " + mixedSecret), mixedSecret, []string{`apps[0] "mp": secret_env:`}},
		{"a secret with punctuation pasted as secret_env", app(mp + "secret_env: \"" + tokenLike + "+/=\""), tokenLike, []string{"secret_env: not an environment variable name"}},
		{"a secret pasted as secret_file", app(mp + "secret_file: " + hexSecret), hexSecret, []string{`apps[0] "mp": secret_file:`}},
		{"a secret pasted after a path as secret_file", app(mp + "secret_file: \"/etc/lockd/pasted-" + shortRuns + "\""), shortRuns, []string{`apps[0] "mp": secret_file:`, "cannot be read"}},
		{"a token pasted after a path as token_file", withAuth("    - {name: o, token_file: \"/etc/lockd/pasted-" + shortRuns + "\"}\n"), shortRuns, []string{`auth.clients[0] "o": token_file:`, "cannot be read"}},
		{"a token pasted as token_env", withAuth("    - {name: o, token_env: " + tokenLike + "}\n"), tokenLike, []string{`auth.clients[0] "o": token_env:`}},
		{"a token pasted as token_file", withAuth("    - {name: o, token_file: " + mixedSecret + "}\n"), mixedSecret, []string{`auth.clients[0] "o": token_file:`}},
		{"a secret in api_base's query", app(mp + "secret_env: MP_SECRET, api_base: \"https://proxy.example/?secret=" + hexSecret + "\""), hexSecret, []string{"api_base", "query and fragment are not allowed"}},
		{"a password in api_base's user info", app(mp + "secret_env: MP_SECRET, api_base: \"https://u:" + mixedSecret + "@proxy.example/\""), mixedSecret, []string{"api_base", "user info is not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tt.file), sources())
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse = %v, want ErrInvalid", err)
			}
			msg := err.Error()
			if strings.Contains(msg, tt.secret) || strings.Contains(msg, tt.secret[:12]) {
				t.Errorf("error %q echoes the pasted secret", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\ndoes not contain %q", msg, w)
				}
			}
		})
	}
}
