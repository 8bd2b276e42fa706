package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// The app of the token benchmarks: WeChat's classic API, where every mint
// supersedes the previous token.
const (
	benchApp    = "bench"
	benchAppID  = "wx-bench"
	benchSecret = "bench-secret"
	// benchNamespace is the brokers' Prefix; the app's cached token is the
	// hash benchTokenKey, its lock benchLockKey under benchLockPrefix (see
	// package token).
	benchNamespace  = "lockd"
	benchLockPrefix = benchNamespace + ":token:lock"
)

var (
	benchLockKey  = token.Identity(wechat.Config{Provider: wechat.ProviderWeChat, AppID: benchAppID, Secret: benchSecret})
	benchTokenKey = benchNamespace + ":token:{" + benchLockKey + "}"
)

// tokenStack is one Redis, a fake upstream, and replicas TokenService
// instances, each with its own broker and Redis connection on its own
// loopback gRPC listener, as a fleet of lockd processes would be.
type tokenStack struct {
	rdb     *redis.Client
	fake    *wechatfake.Server
	upcfg   wechat.Config
	clients []lockdv1.TokenServiceClient
}

func newTokenStack(b *testing.B, replicas int) *tokenStack {
	b.Helper()
	srv := redistest.Start(b)
	// No daily quota: the direct stampedes mint a thousand tokens each.
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{benchAppID: benchSecret}, DailyQuota: -1})
	b.Cleanup(fake.Close)
	s := &tokenStack{
		rdb:   srv.Client(b),
		fake:  fake,
		upcfg: wechat.Config{Provider: wechat.ProviderWeChat, TokenAPI: wechat.TokenAPIClassic, APIBase: fake.URL(), AppID: benchAppID, Secret: benchSecret},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range replicas {
		// No refresher runs: a stampede is what callers meet when no
		// replica renewed the token ahead of expiry.
		broker, err := token.New(srv.Client(b), []token.App{{Name: benchApp, Upstream: s.upcfg}}, token.Options{Prefix: benchNamespace, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		gs := grpc.NewServer(grpc.ForceServerCodecV2(service.Codec()), grpc.UnaryInterceptor(service.UnaryInterceptor))
		lockdv1.RegisterTokenServiceServer(gs, service.NewTokenServer(broker, log))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = gs.Serve(lis) }()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = conn.Close()
			gs.Stop()
			_ = broker.Close()
		})
		s.clients = append(s.clients, lockdv1.NewTokenServiceClient(conn))
	}
	return s
}

// expire ends the cached token once no replica holds the app's lock (the
// last leader releases it just after its callers got their token), so the
// next call finds the cache cold, as at expiry.
func (s *tokenStack) expire(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	locks := redislock.New(s.rdb, redislock.Options{Prefix: benchLockPrefix})
	defer func() { _ = locks.Close() }()
	res, err := locks.Acquire(ctx, redislock.Request{Key: benchLockKey, Mode: redislock.Write, TTL: 10 * time.Second, Wait: 10 * time.Second})
	if err != nil || !res.Acquired {
		b.Fatalf("taking the app's lock: %v %v", res, err)
	}
	// The token's bounds pass, its version stays: a replica's newer copy
	// in memory would be put back after a plain delete (a rollback). The
	// fetch pace's gate goes too: at expiry the last fetch is long past.
	if err := s.rdb.HSet(ctx, benchTokenKey, "expire_ms", 1, "hi_ms", 1, "renew_ms", 1).Err(); err != nil {
		b.Fatal(err)
	}
	if err := s.rdb.Del(ctx, benchTokenKey+":fetch-gate").Err(); err != nil {
		b.Fatal(err)
	}
	if _, err := locks.Release(ctx, benchLockKey, res.Lease.ID, ""); err != nil {
		b.Fatal(err)
	}
}

// reportLatencies reports the 50th and 99th percentiles of lat in ms.
func reportLatencies(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkGetAccessTokenCached measures GetAccessToken through gRPC while
// the token is warm in Redis: the path every caller takes between refreshes.
func BenchmarkGetAccessTokenCached(b *testing.B) {
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			s := newTokenStack(b, 1)
			ctx := context.Background()
			req := &lockdv1.GetAccessTokenRequest{App: benchApp}
			if _, err := s.clients[0].GetAccessToken(ctx, req); err != nil {
				b.Fatal(err)
			}
			mints := s.fake.Mints(benchAppID)
			lat := make([][]time.Duration, conc) // per worker: no lock on the hot path
			parallel(b, conc, "calls/s", func(w, _ int) error {
				start := time.Now()
				res, err := s.clients[0].GetAccessToken(ctx, req)
				lat[w] = append(lat[w], time.Since(start))
				if err == nil && res.GetAccessToken() == "" {
					err = fmt.Errorf("empty token")
				}
				return err
			})
			if n := s.fake.Mints(benchAppID) - mints; n != 0 {
				b.Errorf("%d mints while the token was cached, want 0", n)
			}
			reportLatencies(b, slices.Concat(lat...))
		})
	}
}

// stampede starts callers goroutines together, each making one call, and
// returns every call's latency and the distinct tokens they got.
func stampede(b *testing.B, callers int, call func(i int) (string, error)) ([]time.Duration, int) {
	lat := make([]time.Duration, callers)
	toks := make([]string, callers)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			t0 := time.Now()
			tok, err := call(i)
			lat[i] = time.Since(t0)
			if err != nil {
				b.Error(err)
			}
			toks[i] = tok
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	slices.Sort(toks)
	return lat, len(slices.Compact(toks))
}

// BenchmarkTokenStampede measures what 1000 callers meet when they all ask
// for the token at once and none is cached (it expired and no replica
// renewed it ahead): through lockd, spread over 3 replicas sharing one
// Redis, against an upstream answering in 50 ms; and calling the upstream
// each (wechat-direct), as apps without a broker do. One op is one
// stampede. mints is upstream calls per stampede: 1 through lockd, one per
// caller direct, where each classic mint also supersedes the token the
// previous caller got (it stops working 5 minutes later) and burns the
// 2000-a-day quota. tokens is the distinct tokens handed out per stampede.
func BenchmarkTokenStampede(b *testing.B) {
	const (
		callers  = 1000
		replicas = 3
		latency  = 50 * time.Millisecond
	)
	b.Run(fmt.Sprintf("lockd/callers=%d/replicas=%d", callers, replicas), func(b *testing.B) {
		s := newTokenStack(b, replicas)
		s.fake.SetLatency(latency)
		req := &lockdv1.GetAccessTokenRequest{App: benchApp}
		call := func(i int) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := s.clients[i%replicas].GetAccessToken(ctx, req)
			return res.GetAccessToken(), err
		}
		stampede(b, callers, call) // warm: connections, scripts
		var (
			all    []time.Duration
			tokens int
			mints  int
		)
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			s.expire(b)
			before := s.fake.Mints(benchAppID)
			b.StartTimer()
			lat, n := stampede(b, callers, call)
			b.StopTimer()
			m := s.fake.Mints(benchAppID) - before
			if m != 1 {
				b.Errorf("stampede of %d callers over %d replicas: %d mints, want 1", callers, replicas, m)
			}
			mints += m
			all = append(all, lat...)
			tokens += n
		}
		b.ReportMetric(float64(mints)/float64(b.N), "mints")
		b.ReportMetric(float64(tokens)/float64(b.N), "tokens")
		reportLatencies(b, all)
		b.ReportMetric(0, "ns/op")
	})
	b.Run(fmt.Sprintf("wechat-direct/callers=%d", callers), func(b *testing.B) {
		s := newTokenStack(b, 0)
		s.fake.SetLatency(latency)
		// Keep every caller's connection, as a fleet of app processes
		// would, rather than dial a thousand times per stampede.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = callers
		b.Cleanup(tr.CloseIdleConnections)
		hc := &http.Client{Timeout: wechat.DefaultTimeout, Transport: tr}
		client, err := wechat.NewClient(s.upcfg, hc)
		if err != nil {
			b.Fatal(err)
		}
		call := func(int) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tok, err := client.Mint(ctx, false)
			return tok.AccessToken, err
		}
		stampede(b, callers, call) // warm: connections
		before := s.fake.Mints(benchAppID)
		var (
			all    []time.Duration
			tokens int
		)
		b.ResetTimer()
		for range b.N {
			lat, n := stampede(b, callers, call)
			all = append(all, lat...)
			tokens += n
		}
		b.StopTimer()
		b.ReportMetric(float64(s.fake.Mints(benchAppID)-before)/float64(b.N), "mints")
		b.ReportMetric(float64(tokens)/float64(b.N), "tokens")
		reportLatencies(b, all)
		b.ReportMetric(0, "ns/op")
	})
}
