package token_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func Example() {
	// A fake upstream and the embedded store stand in for WeChat and Redis.
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx1234": "app-secret"}})
	defer fake.Close()
	store, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	rdb := redis.NewClient(&redis.Options{Addr: store.Addr()})
	defer rdb.Close()

	broker, err := token.New(rdb, []token.App{{
		Name: "mp",
		Upstream: wechat.Config{
			Provider: wechat.ProviderWeChat,
			TokenAPI: wechat.TokenAPIStable,
			APIBase:  fake.URL(),
			AppID:    "wx1234",
			Secret:   "app-secret",
		},
	}}, token.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	ctx := context.Background()

	caller := token.Caller{Name: "orders"}      // the authenticated client, for limits and logs
	first, err := broker.Get(ctx, "mp", caller) // minted
	if err != nil {
		log.Fatal(err)
	}
	cached, _ := broker.Get(ctx, "mp", caller) // from the cache
	// WeChat revoked the token; an API call answered 40001: report it.
	// (A token WeChat still accepts would be checked and handed back.)
	fake.RevokeTokens("wx1234")
	replaced, _ := broker.Refresh(ctx, "mp", first.AccessToken, caller)
	// A late reporter of the old token gets the replacement, no mint.
	late, _ := broker.Refresh(ctx, "mp", first.AccessToken, caller)

	fmt.Println(cached == first, replaced != first, late == replaced, fake.Issued("wx1234"))
	// Output: true true true 2
}
