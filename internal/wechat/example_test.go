package wechat_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func ExampleNewClient() {
	// A fake upstream stands in for api.weixin.qq.com.
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	defer fake.Close()

	c, err := wechat.NewClient(wechat.Config{
		Provider: wechat.ProviderWeChat,
		TokenAPI: wechat.TokenAPIStable,
		APIBase:  fake.URL(), // empty in production
		AppID:    "wx1234",
		Secret:   "app-secret",
	}, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.ForceRefreshes())
	// Output: true
}

func ExampleClient_Mint() {
	fake := wechatfake.New(wechatfake.Options{Corps: map[string]string{"ww5678": "corp-secret"}})
	defer fake.Close()

	c, err := wechat.NewClient(wechat.Config{
		Provider: wechat.ProviderWeCom,
		APIBase:  fake.URL(),
		AppID:    "ww5678",
		Secret:   "corp-secret",
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := c.Mint(context.Background(), false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tok.AccessToken != "", tok.ExpiresIn)
	// Output: true 2h0m0s
}

func ExampleError() {
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	defer fake.Close()
	c, err := wechat.NewClient(wechat.Config{
		Provider: wechat.ProviderWeChat,
		APIBase:  fake.URL(),
		AppID:    "wx1234",
		Secret:   "not-the-secret",
	}, nil)
	if err != nil {
		log.Fatal(err)
	}

	_, err = c.Mint(context.Background(), false)
	var e *wechat.Error
	if errors.As(err, &e) {
		reason, meta := e.ErrorInfo()
		fmt.Println(errors.Is(err, wechat.ErrCredentials), e.Errcode, reason, meta["errcode"])
	}
	// Output: true 40125 WECHAT_CREDENTIALS_REJECTED 40125
}
