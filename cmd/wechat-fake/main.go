// Command wechat-fake serves a fake token upstream (package wechatfake) for
// trying lockd's token feature locally: WeChat and WeCom, Feishu/Lark,
// DingTalk and an OAuth2 client-credentials server, all on one port:
//
//	go run ./cmd/wechat-fake --app wx1234:app-secret --corp ww5678:corp-secret \
//	    --feishu cli_a1:feishu-secret --dingtalk dingkey:ding-secret --oauth2 reports:oauth-secret
//
// then point an app's api_base at http://127.0.0.1:9480 (an oauth2 app's
// token_url at http://127.0.0.1:9480/oauth2/token). Tokens can be checked
// with GET /cgi-bin/getcallbackip?access_token=TOKEN (WeChat),
// /open-apis/contact/v3/scopes (Feishu, Authorization: Bearer TOKEN) and
// the like; JS-SDK tickets are served too (see package wechatfake).
//
// Two endpoints serve tests: POST /fake/reject?access_token=TOKEN makes the
// upstream refuse a token it handed out, as WeChat does when some other
// system replaced it; GET /fake/stats?id=ID&path=PATH answers how many token
// requests named the app id, how many distinct tokens it was issued, and
// which tokens the API at PATH was called with.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// pairs collects repeated id:secret flags.
type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(len(p), " entries") }

func (p pairs) Set(v string) error {
	id, secret, ok := strings.Cut(v, ":")
	if !ok || id == "" || secret == "" {
		return errors.New("want id:secret")
	}
	p[id] = secret
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		slog.Error("wechat-fake", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("wechat-fake", flag.ContinueOnError)
	opts := wechatfake.Options{Apps: pairs{}, Corps: pairs{}, Feishu: pairs{}, DingTalk: pairs{}, OAuth2: pairs{}}
	listen := fs.String("listen", "127.0.0.1:9480", "address to serve on")
	fs.Var(pairs(opts.Apps), "app", "WeChat `appid:secret` (repeatable)")
	fs.Var(pairs(opts.Corps), "corp", "WeCom `corpid:corpsecret` (repeatable)")
	fs.Var(pairs(opts.Feishu), "feishu", "Feishu/Lark `app_id:app_secret` (repeatable)")
	fs.Var(pairs(opts.DingTalk), "dingtalk", "DingTalk `appKey:appSecret` (repeatable)")
	fs.Var(pairs(opts.OAuth2), "oauth2", "OAuth2 `client_id:client_secret` (repeatable)")
	fs.DurationVar(&opts.FeishuFreshWindow, "feishu-fresh-window", 30*time.Minute, "life left below which Feishu hands out a new token")
	fs.DurationVar(&opts.ExpiresIn, "expires-in", 7200*time.Second, "lifetime of new tokens")
	fs.IntVar(&opts.DailyQuota, "daily-quota", 2000, "tokens per app per day (classic, WeCom); negative: unlimited")
	roundUp := fs.Bool("round-up", false, "announce the life left of a token handed out again rounded up (default: down, so its last second is expires_in 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *roundUp {
		opts.Rounding = wechatfake.RoundUp
	}
	if len(opts.Apps)+len(opts.Corps)+len(opts.Feishu)+len(opts.DingTalk)+len(opts.OAuth2) == 0 {
		return errors.New("no apps: pass --app appid:secret, --corp corpid:corpsecret, --feishu, --dingtalk or --oauth2 id:secret")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(wechatfake.NewHandler(opts)), ReadHeaderTimeout: 10 * time.Second}
	var ids []string
	for _, m := range []map[string]string{opts.Apps, opts.Corps, opts.Feishu, opts.DingTalk, opts.OAuth2} {
		for id := range m {
			ids = append(ids, id)
		}
	}
	slog.Info("serving fake token upstream", "api_base", "http://"+ln.Addr().String(), "apps", ids)

	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// handler serves the fake upstream and its test controls, /fake/reject and
// /fake/stats.
func handler(fake *wechatfake.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", fake)
	mux.HandleFunc("POST /fake/reject", func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("access_token")
		if tok == "" {
			http.Error(w, "access_token is required", http.StatusBadRequest)
			return
		}
		fake.Reject(tok)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /fake/stats", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		seen := fake.Seen(q.Get("path"))
		if seen == nil {
			seen = []string{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"token_requests": fake.Mints(q.Get("id")),
			"issued":         fake.Issued(q.Get("id")),
			"seen":           seen,
		})
	})
	return mux
}
