package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/service"
)

// benchBearer is the bearer token of the one client the full stack knows.
const benchBearer = "bench-bearer-token-0123456789abcdef"

// otelEnv are the variables that could turn trace export on behind the
// benchmark's back; each variant sets them explicitly.
var otelEnv = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
}

// lockTarget is a LockService client and the context its calls carry (the
// bearer token, for the full stack).
type lockTarget struct {
	client lockdv1.LockServiceClient
	ctx    context.Context
}

// newBareServer serves a bare LockService (codec and UTF-8 interceptor,
// nothing else) on an engine over rdb, which may be a single Redis or a
// Cluster client, and returns the engine and a client of the service.
func newBareServer(b *testing.B, rdb redis.UniversalClient) (*redislock.Client, lockTarget) {
	b.Helper()
	engine := redislock.New(rdb, redislock.Options{})
	b.Cleanup(func() { _ = engine.Close() })
	gs := grpc.NewServer(grpc.ForceServerCodecV2(service.Codec()),
		grpc.UnaryInterceptor(service.UnaryInterceptor), grpc.StreamInterceptor(service.StreamInterceptor))
	lockdv1.RegisterLockServiceServer(gs, service.NewLockServer(engine, service.DefaultLimits(), slog.New(slog.NewTextHandler(io.Discard, nil))))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(gs.Stop)
	return engine, lockTarget{client: dialLocks(b, lis.Addr().String()), ctx: context.Background()}
}

func dialLocks(b *testing.B, addr string) lockdv1.LockServiceClient {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return lockdv1.NewLockServiceClient(conn)
}

// countingWriter counts what the full stack's logger writes.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// fullServer is lockd as production runs it, from server.Run.
type fullServer struct {
	lockTarget
	logged *countingWriter
}

// startFull runs server.Run on redisSpec with auth on (one client, every key
// allowed), telemetry on (otelgrpc stats handler, redisotel pool metrics and
// lock metrics into the Prometheus registry; trace export only if the
// OTEL_* environment names an endpoint), and the logging and recovery
// interceptors with production's JSON logger at INFO, writing to a counter.
// The client sends "authorization: Bearer" on every call, from a context
// built once.
func startFull(b *testing.B, redisSpec string) *fullServer {
	b.Helper()
	logged := &countingWriter{}
	started := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := server.Config{
		Listen:     "127.0.0.1:0",
		HTTPListen: "127.0.0.1:0", // /metrics served, not scraped
		Redis:      redisSpec,
		File: &config.Config{Auth: &config.Auth{Clients: []config.Client{
			{Name: "bench", Locks: []string{""}, Token: config.Secret(benchBearer)},
		}}},
		Limits:  service.DefaultLimits(),
		Version: "bench",
		Logger:  slog.New(slog.NewJSONHandler(logged, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Started: func(a server.Addrs) { started <- a },
	}
	go func() { done <- server.Run(ctx, cfg) }()
	var addrs server.Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		cancel()
		b.Fatalf("server.Run: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		b.Fatal("server.Run did not start")
	}
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("server.Run: %v", err)
		}
	})
	md := metadata.Pairs("authorization", "Bearer "+benchBearer)
	return &fullServer{
		lockTarget: lockTarget{client: dialLocks(b, addrs.GRPC), ctx: metadata.NewOutgoingContext(context.Background(), md)},
		logged:     logged,
	}
}

// spanCollector is an in-process OTLP/gRPC trace collector that counts the
// spans it receives and drops them.
type spanCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (c *spanCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	c.spans.Add(n)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startCollector serves a spanCollector on loopback and returns it with its
// endpoint URL.
func startCollector(b *testing.B) (*spanCollector, string) {
	b.Helper()
	c := &spanCollector{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, c)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(gs.Stop)
	return c, "http://" + lis.Addr().String()
}

// pairsRun runs n uncontended Acquire+Release pairs through t, spread over
// conc workers each on a key of its own, and returns how long they took.
func pairsRun(conc, n int, t lockTarget) (time.Duration, error) {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("bench/", w)
			for next.Add(1) <= int64(n) {
				res, err := t.client.Acquire(t.ctx, &lockdv1.AcquireRequest{Key: key, Owner: key})
				if err == nil && !res.GetAcquired() {
					err = fmt.Errorf("not acquired: %v", res)
				}
				if err == nil {
					_, err = t.client.Release(t.ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()})
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// interleaved measures b.N Acquire+Release pairs through subject, and as
// many through base, in alternating slices (base first, then subject first,
// and so on), so that whatever else the machine does at the time weighs on
// both alike. The benchmark's timer and pairs/s cover subject alone;
// base-pairs/s is reported beside it, and the ratio as subject/base. So are
// the CPU time this process (client and server, not Redis) spent per pair
// on each: cpu-us/pair and base-cpu-us/pair.
func interleaved(b *testing.B, conc int, subject, base lockTarget, subjectName, baseName string) {
	const rounds = 10
	runtime.GC()
	b.ResetTimer()
	b.StopTimer()
	var took, cpu [2]time.Duration // base, subject
	var done [2]int
	for i := range rounds {
		n := b.N / rounds
		if i < b.N%rounds {
			n++
		}
		if n == 0 {
			continue
		}
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, which := range order {
			t := base
			if which == 1 {
				t = subject
				b.StartTimer()
			}
			c := processCPU()
			d, err := pairsRun(conc, n, t)
			c = processCPU() - c
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			took[which] += d
			cpu[which] += c
			done[which] += n
		}
	}
	rate := func(which int) float64 { return float64(done[which]) / took[which].Seconds() }
	perPair := func(which int) float64 { return float64(cpu[which].Nanoseconds()) / 1e3 / float64(done[which]) }
	b.ReportMetric(rate(1), "pairs/s")
	b.ReportMetric(rate(0), baseName+"-pairs/s")
	b.ReportMetric(rate(1)/rate(0), subjectName+"/"+baseName)
	b.ReportMetric(perPair(1), "cpu-us/pair")
	b.ReportMetric(perPair(0), baseName+"-cpu-us/pair")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStack measures what production's interceptors cost: uncontended
// Acquire+Release pairs through lockd as server.Run assembles it
// (path=full), interleaved with the same pairs through the bare LockService
// of BenchmarkAcquireRelease on the same Redis: pairs/s is the full stack's,
// bare-pairs/s the bare server's, full/bare their ratio. The full stack has
// auth on (one bearer client, every key allowed), telemetry on (otelgrpc
// stats handler, redisotel pool metrics and lock metrics into the
// Prometheus registry; no OTLP endpoint, so traces are off and spans do not
// record), and the logging and recovery interceptors with production's
// JSON logger at INFO (successful calls log at DEBUG, so nothing is
// written).
//
// path=full+otlp is the same stack with OTEL_EXPORTER_OTLP_ENDPOINT set to
// an in-process collector: every RPC and its Redis commands are traced and
// exported (default sampler); spans/pair counts those that reached the
// collector (the SDK drops spans when its export queue is full).
func BenchmarkStack(b *testing.B) {
	srv := redistest.Start(b)
	_, bare := newBareServer(b, srv.Client(b))
	for _, k := range otelEnv {
		b.Setenv(k, "")
	}
	full := startFull(b, srv.Addr())
	col, endpoint := startCollector(b)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	traced := startFull(b, srv.Addr())
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")

	variants := []struct {
		name  string
		srv   *fullServer
		concs []int
	}{
		{"full", full, []int{16, 64}},
		{"full+otlp", traced, []int{16}},
	}
	for _, v := range variants {
		for _, conc := range v.concs {
			b.Run(fmt.Sprintf("path=%s/conc=%d", v.name, conc), func(b *testing.B) {
				logged, spans := v.srv.logged.n.Load(), col.spans.Load()
				interleaved(b, conc, v.srv.lockTarget, bare, v.name, "bare")
				if n := v.srv.logged.n.Load() - logged; n > 0 {
					b.Logf("the full stack logged %d bytes during %d pairs", n, b.N)
				}
				if v.srv == traced {
					// Flush the spans still queued, so that they count
					// here. The traced stack ran server.Run last, so its
					// provider is the global one.
					if tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
						_ = tp.ForceFlush(context.Background())
					}
					b.ReportMetric(float64(col.spans.Load()-spans)/float64(b.N), "spans/pair")
				}
			})
		}
	}
}

// BenchmarkCluster compares a 3-master Redis Cluster with a single
// redis-server under the bare gRPC LockService. op=pairs: uncontended
// Acquire+Release pairs, one key per worker so that the locks spread over
// the cluster's slots, on the Cluster (pairs/s) interleaved with the single
// server (single-pairs/s), and their ratio. op=handoff: handoff latency as
// in BenchmarkHandoff (16 waiters on one key, woken by pub/sub: PUBLISH on
// the single server, SPUBLISH on the Cluster). All Redis processes share the
// machine's cores with lockd and the load generator.
func BenchmarkCluster(b *testing.B) {
	_, single := newBareServer(b, redistest.Start(b).Client(b))
	_, cluster := newBareServer(b, redistest.StartCluster(b, 3).ClusterClient(b))
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("op=pairs/redis=cluster/conc=%d", conc), func(b *testing.B) {
			interleaved(b, conc, cluster, single, "cluster", "single")
		})
	}
	for _, t := range []struct {
		name string
		lt   lockTarget
	}{{"single", single}, {"cluster", cluster}} {
		var run int
		b.Run(fmt.Sprintf("op=handoff/redis=%s/waiters=16", t.name), func(b *testing.B) {
			// A key per run: a waiter granted just as the previous run
			// ended may still hold the last one.
			run++
			handoff(b, t.lt, fmt.Sprint("handoff/", run), 16, nil)
		})
	}
}

// handoff measures handoff latency on any LockService: waiters want key;
// each holder keeps it 2 ms, releases, and goes to the back of the line. The
// time from the start of its Release call to the next waiter's grant is
// recorded; p50-ms and p99-ms are reported. acquire takes the lock for an
// owner; nil waits for it through lockd (woken by pub/sub).
func handoff(b *testing.B, t lockTarget, key string, waiters int, acquire func(ctx context.Context, owner string) (*lockdv1.AcquireResponse, error)) {
	if acquire == nil {
		acquire = func(ctx context.Context, owner string) (*lockdv1.AcquireResponse, error) {
			return t.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: owner, WaitTimeout: durationpb.New(time.Minute)})
		}
	}
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	var (
		mu         sync.Mutex
		releasedAt time.Time
		latencies  []time.Duration
		handoffs   atomic.Int64
		wg         sync.WaitGroup
		target     = int64(b.N)
	)
	b.ResetTimer()
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("waiter-", w)
			for handoffs.Load() < target {
				res, err := acquire(ctx, owner)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				got := time.Now()
				mu.Lock()
				if !releasedAt.IsZero() {
					latencies = append(latencies, got.Sub(releasedAt))
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the critical section
				mine := handoffs.Add(1)
				if mine >= target {
					cancel() // wake the others so they stop
				}
				mu.Lock()
				releasedAt = time.Now()
				mu.Unlock()
				if _, err := t.client.Release(context.WithoutCancel(ctx), &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()}); err != nil {
					b.Error(err)
					return
				}
				// Go to the back of the line.
				for handoffs.Load() == mine && ctx.Err() == nil {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
