package token

import (
	"fmt"
	"net/http"

	"github.com/lockd/lockd/internal/dingtalk"
	"github.com/lockd/lockd/internal/feishu"
	"github.com/lockd/lockd/internal/oauth2"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat"
)

// newClient returns the upstream client of cfg's provider: the one place
// that knows which package serves which provider.
func newClient(cfg upstream.Config, hc *http.Client) (upstream.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Provider {
	case upstream.WeChat, upstream.WeCom:
		return wechat.NewClient(cfg, hc)
	case upstream.Feishu:
		return feishu.NewClient(cfg, hc)
	case upstream.DingTalk:
		return dingtalk.NewClient(cfg, hc)
	case upstream.OAuth2:
		return oauth2.NewClient(cfg, hc)
	}
	return nil, fmt.Errorf("%w: provider %q", upstream.ErrInvalidConfig, cfg.Provider)
}
