// Command wechat-fake serves a fake WeChat and WeCom token upstream
// (package wechatfake) for trying lockd's token feature locally:
//
//	go run ./cmd/wechat-fake --app wx1234:app-secret --corp ww5678:corp-secret
//
// then point an app's api_base at http://127.0.0.1:9480. Tokens can be
// checked with GET /cgi-bin/getcallbackip?access_token=TOKEN; JS-SDK tickets
// are served too (see package wechatfake). POST /fake/reject?access_token=TOKEN
// makes the upstream refuse a token it handed out, as WeChat does when some
// other system replaced it: what client tests use to see a rejected token
// reported and replaced.
package main

import (
	"context"
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
	opts := wechatfake.Options{Apps: pairs{}, Corps: pairs{}}
	listen := fs.String("listen", "127.0.0.1:9480", "address to serve on")
	fs.Var(pairs(opts.Apps), "app", "WeChat `appid:secret` (repeatable)")
	fs.Var(pairs(opts.Corps), "corp", "WeCom `corpid:corpsecret` (repeatable)")
	fs.DurationVar(&opts.ExpiresIn, "expires-in", 7200*time.Second, "lifetime of new tokens")
	fs.IntVar(&opts.DailyQuota, "daily-quota", 2000, "tokens per app per day (classic, WeCom); negative: unlimited")
	roundUp := fs.Bool("round-up", false, "announce the life left of a token handed out again rounded up (default: down, so its last second is expires_in 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *roundUp {
		opts.Rounding = wechatfake.RoundUp
	}
	if len(opts.Apps)+len(opts.Corps) == 0 {
		return errors.New("no apps: pass --app appid:secret or --corp corpid:corpsecret")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(wechatfake.NewHandler(opts)), ReadHeaderTimeout: 10 * time.Second}
	ids := make([]string, 0, len(opts.Apps)+len(opts.Corps))
	for id := range opts.Apps {
		ids = append(ids, id)
	}
	for id := range opts.Corps {
		ids = append(ids, id)
	}
	slog.Info("serving fake WeChat upstream", "api_base", "http://"+ln.Addr().String(), "apps", ids)

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

// handler serves the fake upstream and its test control, /fake/reject.
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
	return mux
}
