package wechat

import "github.com/lockd/lockd/internal/upstream"

// Config is package upstream's Config; this package mints for the providers
// ProviderWeChat and ProviderWeCom.
type Config = upstream.Config

// Providers and token APIs of this package, as Config spells them.
const (
	// ProviderWeChat is an Official Account or Mini Program (api.weixin.qq.com).
	ProviderWeChat = upstream.WeChat
	// ProviderWeCom is a WeCom (WeChat Work) app: AppID holds the corpid and
	// Secret the app's corpsecret (qyapi.weixin.qq.com).
	ProviderWeCom = upstream.WeCom

	// TokenAPIClassic is GET /cgi-bin/token: every call mints a new token and
	// the previous one stays valid for five more minutes.
	TokenAPIClassic = upstream.TokenAPIClassic
	// TokenAPIStable is POST /cgi-bin/stable_token: the same token while it
	// is valid, and a force_refresh mode that revokes it at once.
	TokenAPIStable = upstream.TokenAPIStable

	// DefaultWeChatAPIBase is the APIBase of ProviderWeChat when none is set.
	DefaultWeChatAPIBase = "https://api.weixin.qq.com"
	// DefaultWeComAPIBase is the APIBase of ProviderWeCom when none is set.
	DefaultWeComAPIBase = "https://qyapi.weixin.qq.com"
)
