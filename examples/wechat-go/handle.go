// Package wechatlockd feeds the access-token handle of the Go WeChat SDK
// github.com/silenceper/wechat/v2 from lockd: the SDK asks the handle for
// the token before every API call, and the handle answers with the token
// lockd holds for the whole fleet, so the SDK never calls WeChat's token
// endpoint itself (which, with the classic API, would end every other
// process's token five minutes later).
//
//	c, _ := client.New([]string{"127.0.0.1:50051"})
//	oa := wechat.NewWechat().GetOfficialAccount(&offConfig.Config{AppID: "wx1234", Cache: cache.NewMemory()})
//	oa.SetAccessTokenHandle(wechatlockd.AccessTokenHandle{Client: c, App: "mp"})
//	ips, err := oa.GetBasic().GetCallbackIP() // called with lockd's token
//
// It lives in a module of its own, outside lockd's client module, so that
// programs using the client do not download the SDK.
package wechatlockd

import (
	"context"
	"time"

	"github.com/silenceper/wechat/v2/credential"

	"github.com/lockd/lockd/client"
)

// AccessTokenHandle is a credential.AccessTokenContextHandle that asks
// lockd for App's token.
type AccessTokenHandle struct {
	// Client is a lockd client.
	Client *client.Client
	// App is the app's name in lockd's configuration.
	App string
	// Timeout bounds a call of GetAccessToken; default 5s.
	Timeout time.Duration
}

var _ credential.AccessTokenContextHandle = AccessTokenHandle{}

// GetAccessToken returns lockd's token for the app.
func (h AccessTokenHandle) GetAccessToken() (string, error) {
	return h.GetAccessTokenContext(context.Background())
}

// GetAccessTokenContext returns lockd's token for the app, bounded by ctx
// and Timeout.
func (h AccessTokenHandle) GetAccessTokenContext(ctx context.Context) (string, error) {
	d := h.Timeout
	if d <= 0 {
		d = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tok, _, err := h.Client.AccessToken(ctx, h.App)
	return tok, err
}
