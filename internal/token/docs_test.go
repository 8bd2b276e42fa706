package token_test

import (
	"errors"
	"io/fs"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// docConfig finds the YAML blocks of docs/tokens.md marked to be run, and
// their names.
var docConfig = regexp.MustCompile("(?s)<!-- (tokens-config-[a-z0-9]+): run by internal/token/docs_test.go -->\n```yaml\n(.*?)```")

// docConfigNames names the block of docs/tokens.md that configures each
// provider (block names are unique across the documentation).
var docConfigNames = map[string]string{
	upstream.WeChat:   "tokens-config-wechat",
	upstream.WeCom:    "tokens-config-wecom",
	upstream.Feishu:   "tokens-config-feishu",
	upstream.DingTalk: "tokens-config-dingtalk",
	upstream.OAuth2:   "tokens-config-oauth2",
}

// TestTheTokenDocsConfigurationsRun parses every configuration of
// docs/tokens.md, registers its app with the fake upstream, points the app
// at the fake and has a fleet of two replicas serve its token.
func TestTheTokenDocsConfigurationsRun(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/tokens.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docConfig.FindAllSubmatch(doc, -1)
	if len(blocks) < len(upstream.Providers) {
		t.Fatalf("%d runnable configurations in docs/tokens.md, want one per provider (%d)", len(blocks), len(upstream.Providers))
	}
	const secret = "doc-S3cr3t"
	src := config.Sources{
		LookupEnv: func(string) (string, bool) { return secret, true },
		ReadFile:  func(string) ([]byte, error) { return []byte(secret + "\n"), nil },
		Stat:      func(string) (fs.FileInfo, error) { return nil, errors.New("not looked at") },
	}
	seen := map[string]bool{}
	srv := redistest.Start(t)
	for _, b := range blocks {
		name, block := string(b[1]), b[2]
		c, err := config.Parse(block, src)
		if err != nil {
			t.Fatalf("docs/tokens.md %s:\n%s\n%v", name, block, err)
		}
		for _, a := range c.Apps {
			t.Run(a.Name, func(t *testing.T) {
				cfg := a.Upstream()
				if want := docConfigNames[cfg.Provider]; name != want {
					t.Errorf("docs/tokens.md's block %s configures provider %q, whose block is named %q", name, cfg.Provider, want)
				}
				seen[cfg.Provider] = true
				fake := wechatfake.New(wechatfake.Options{})
				t.Cleanup(fake.Close)
				switch cfg.Provider {
				case upstream.WeChat:
					fake.AddApp(cfg.AppID, secret)
				case upstream.WeCom:
					fake.AddCorp(cfg.AppID, secret)
				case upstream.Feishu:
					fake.AddFeishu(cfg.AppID, secret)
				case upstream.DingTalk:
					fake.AddDingTalk(cfg.AppID, secret)
				case upstream.OAuth2:
					fake.AddOAuth2(cfg.AppID, secret)
				}
				if cfg.Provider == upstream.OAuth2 {
					cfg.TokenURL = fake.URL() + "/oauth2/token"
				} else {
					cfg.APIBase = fake.URL()
				}
				f := newFleet(t, srv, 2, []token.App{{Name: a.Name, Upstream: cfg}}, token.Options{})
				ctx := timeout(t, 30*time.Second)
				tok := oneToken(t, "Get", f.concurrently(20, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, a.Name, anyone) }))
				if !fake.Valid(tok.AccessToken) || fake.Issued(cfg.AppID) != 1 {
					t.Fatalf("got %v; %d tokens issued", tok, fake.Issued(cfg.AppID))
				}
			})
		}
	}
	for _, p := range upstream.Providers {
		if !seen[p] {
			t.Errorf("docs/tokens.md has no runnable configuration of provider %q", p)
		}
	}
}
