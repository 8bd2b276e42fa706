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

	first, err := broker.Get(ctx, "mp") // minted
	if err != nil {
		log.Fatal(err)
	}
	cached, _ := broker.Get(ctx, "mp") // from the cache
	// The upstream rejected the token with 40001: report it.
	replaced, _ := broker.Refresh(ctx, "mp", first.AccessToken)
	// A late reporter of the old token gets the replacement, no mint.
	late, _ := broker.Refresh(ctx, "mp", first.AccessToken)

	fmt.Println(cached == first, replaced != first, late == replaced, fake.Mints("wx1234"))
	// Output: true true true 2
}
