package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

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

// lockTarget is a LockService client and the metadata its calls carry
// (the bearer token, for the full stack; nil for none).
type lockTarget struct {
	client lockdv1.LockServiceClient
	md     metadata.MD
}

// newBareServer serves a bare LockService (codec and UTF-8 interceptor,
// nothing else) on an engine over rdb, which may be a single Redis or a
// Cluster client, and returns the engine and a client of the service.
func newBareServer(b *testing.B, rdb redis.UniversalClient) (*redislock.Client, lockTarget) {
	b.Helper()
	return newBareServerWith(b, rdb, redislock.Options{})
}

// newBareServerWith is newBareServer with an engine built with opts.
func newBareServerWith(b *testing.B, rdb redis.UniversalClient, opts redislock.Options) (*redislock.Client, lockTarget) {
	b.Helper()
	engine := redislock.New(rdb, opts)
	b.Cleanup(func() { _ = engine.Close() })
	gs := grpc.NewServer(grpc.ForceServerCodecV2(service.Codec()),
		grpc.UnaryInterceptor(service.UnaryInterceptor), grpc.StreamInterceptor(service.StreamInterceptor))
	lockdv1.RegisterLockServiceServer(gs, service.NewLockServer(engine, service.DefaultBounds(), slog.New(slog.NewTextHandler(io.Discard, nil))))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	b.Cleanup(gs.Stop)
	return engine, lockTarget{client: dialLocks(b, lis.Addr().String())}
}

func dialLocks(b *testing.B, addr string) lockdv1.LockServiceClient {
	b.Helper()
	return lockdv1.NewLockServiceClient(dial(b, addr))
}

// dial returns one client connection to addr, closed at cleanup.
func dial(b *testing.B, addr string) *grpc.ClientConn {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

// countingWriter counts what the full stack's logger writes.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// fullServer is lockd as production runs it, from server.Run, in this
// process.
type fullServer struct {
	lockTarget
	health healthpb.HealthClient
	logged *countingWriter
}

// startFull runs server.Run on redisSpec with telemetry on (otelgrpc stats
// handler, redisotel pool metrics and lock metrics into the Prometheus
// registry; trace export only if the OTEL_* environment names an
// endpoint), and the logging and recovery interceptors with production's
// JSON logger at INFO, writing to a counter. With auth, one bearer client
// may lock every key, and the client sends "authorization: Bearer" on every
// call, from metadata built once. The server's goroutines carry the pprof
// label side=lockd, so that a CPU profile of a benchmark can be narrowed to
// the server (go tool pprof -tagfocus side=lockd).
func startFull(b *testing.B, redisSpec string, auth bool) *fullServer {
	b.Helper()
	logged := &countingWriter{}
	started := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := server.Config{
		Listen:     "127.0.0.1:0",
		HTTPListen: "127.0.0.1:0", // /metrics served, not scraped
		Redis:      redisSpec,
		Bounds:     service.DefaultBounds(),
		Version:    "bench",
		Logger:     slog.New(slog.NewJSONHandler(logged, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Started:    func(a server.Addrs) { started <- a },
	}
	var md metadata.MD
	if auth {
		cfg.File = &config.Config{Auth: &config.Auth{Clients: []config.Client{
			{Name: "bench", Locks: []string{""}, Token: config.Secret(benchBearer)},
		}}}
		md = metadata.Pairs("authorization", "Bearer "+benchBearer)
	}
	go pprof.Do(ctx, pprof.Labels("side", "lockd"), func(ctx context.Context) { done <- server.Run(ctx, cfg) })
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
	conn := dial(b, addrs.GRPC)
	return &fullServer{
		lockTarget: lockTarget{client: lockdv1.NewLockServiceClient(conn), md: md},
		health:     healthpb.NewHealthClient(conn),
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

// BenchmarkStack measures what production's interceptors cost: uncontended
// Acquire+Release pairs through lockd as server.Run assembles it
// (path=full), interleaved in slices with the same pairs through the bare
// LockService of BenchmarkAcquireRelease on the same Redis, for
// -benchtime each: full-pairs/s, bare-pairs/s, and full/bare their ratio
// (the median of the ratios of slices run back to back);
// full-cpu-us/pair and bare-cpu-us/pair are this process's CPU (client and
// server, not Redis). The full stack has auth on (one bearer client, every
// key allowed), telemetry on (otelgrpc stats handler, redisotel pool
// metrics and lock metrics into the Prometheus registry; no OTLP endpoint,
// so traces are off and spans do not record), and the logging and recovery
// interceptors with production's JSON logger at INFO (successful calls log
// at DEBUG, so nothing is written).
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
	full := startFull(b, srv.Addr(), true)
	col, endpoint := startCollector(b)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	traced := startFull(b, srv.Addr(), true)
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
				defer fixedShape(b)()
				logged, spans := v.srv.logged.n.Load(), col.spans.Load()
				subject := &workload{name: v.name, run: pairs(b, lockdService{t: v.srv.lockTarget}, conc, "stack/"), meters: []meter{selfMeter(v.name)}}
				base := &workload{name: "bare", run: pairs(b, lockdService{t: bare}, conc, "stack/"), meters: []meter{selfMeter("bare")}}
				interleave(b, benchTime(), 30, base, subject)
				subject.report(b, "pair")
				base.report(b, "pair")
				b.ReportMetric(sliceRatio(subject, base, ratio), v.name+"/bare")
				if n := v.srv.logged.n.Load() - logged; n > 0 {
					b.Logf("the full stack logged %d bytes during %d pairs", n, subject.ops)
				}
				if v.srv == traced {
					// Flush the spans still queued, so that they count
					// here. The traced stack ran server.Run last, so its
					// provider is the global one.
					if tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
						_ = tp.ForceFlush(context.Background())
					}
					b.ReportMetric(float64(col.spans.Load()-spans)/float64(subject.ops), "spans/pair")
				}
			})
		}
	}
}

// BenchmarkCluster compares a 3-master Redis Cluster with a single
// redis-server under the bare gRPC LockService. op=pairs: uncontended
// Acquire+Release pairs, one key per worker so that the locks spread over
// the cluster's slots, on the Cluster (cluster-pairs/s) interleaved with the
// single server (single-pairs/s), and their ratio. op=handoff: 16 waiters
// on one key, 2 ms holds, woken by pub/sub (PUBLISH on the single server,
// SPUBLISH on the Cluster): holds/s and handoff p50/p99 as in
// BenchmarkHandoff. All Redis processes share the machine's cores with
// lockd and the load generator.
func BenchmarkCluster(b *testing.B) {
	_, single := newBareServer(b, redistest.Start(b).Client(b))
	_, cluster := newBareServer(b, redistest.StartCluster(b, 3).ClusterClient(b))
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("op=pairs/redis=cluster/conc=%d", conc), func(b *testing.B) {
			defer fixedShape(b)()
			c := &workload{name: "cluster", run: pairs(b, lockdService{t: cluster}, conc, "cluster/"), meters: []meter{selfMeter("cluster")}}
			s := &workload{name: "single", run: pairs(b, lockdService{t: single}, conc, "cluster/"), meters: []meter{selfMeter("single")}}
			interleave(b, benchTime(), 30, s, c)
			c.report(b, "pair")
			s.report(b, "pair")
			b.ReportMetric(sliceRatio(c, s, ratio), "cluster/single")
		})
	}
	for _, t := range []struct {
		name string
		lt   lockTarget
	}{{"single", single}, {"cluster", cluster}} {
		b.Run(fmt.Sprintf("op=handoff/redis=%s/waiters=16", t.name), func(b *testing.B) {
			defer fixedShape(b)()
			ss := sessions(b, lockdService{t: t.lt}, 16)
			c, err := contend(ss, "handoff", 2*time.Millisecond, 200*time.Millisecond, benchTime(), func(bool) {})
			if err != nil {
				b.Fatal(err)
			}
			c.report(b, "")
		})
	}
}

// BenchmarkInProcess runs uncontended Acquire+Release pairs at concurrency
// 64 through lockd's production stack in its default configuration
// (server.Run: no auth, telemetry on, the call log at INFO) in this
// process, on a redis-server, and nothing else: for CPU and allocation
// profiles of lockd under load (scripts/bench.sh with BENCH_PROFILE=dir;
// the server's goroutines carry the pprof label side=lockd). Its
// lockd-pairs/s beside BenchmarkVersusEtcd's shows what the process
// boundary costs; lockd+client-cpu-us/pair is this process's CPU, load
// generator included.
func BenchmarkInProcess(b *testing.B) {
	b.Run("op=uncontended/conc=64", func(b *testing.B) {
		defer fixedShape(b)()
		srv := redistest.Start(b)
		for _, k := range otelEnv {
			b.Setenv(k, "")
		}
		full := startFull(b, srv.Addr(), false)
		w := &workload{name: "lockd", run: pairs(b, lockdService{t: full.lockTarget}, 64, "inprocess/"),
			meters: []meter{selfMeter("lockd+client"), pidMeter("redis", srv.Pid())}}
		interleave(b, benchTime(), 1, w)
		w.report(b, "pair")
	})
}
