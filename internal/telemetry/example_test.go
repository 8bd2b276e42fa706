package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/telemetry"
)

// Lock and token events become lockd_* series on the metrics handler.
func Example() {
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "lockd"})
	if err != nil {
		panic(err)
	}
	defer tel.Shutdown(ctx)

	tel.Locks().Granted(redislock.Write, 3*time.Millisecond)
	tel.Tokens().TokenUpstreamError("wx1234", "40001")

	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "lockd_lock_grants_total") || strings.HasPrefix(line, "lockd_token_") {
			fmt.Print(line)
		}
	}
	// Output:
	// lockd_lock_grants_total{mode="write"} 1
	// lockd_token_upstream_errors_total{app="wx1234",errcode="40001"} 1
}

// A server wires telemetry into its Redis client, lock engine, gRPC server
// and HTTP mux, and shuts it down last, to flush the final spans.
func ExampleTelemetry_GRPCServerOptions() {
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		ServiceName:    "lockd",
		ServiceVersion: "v1.0.0",
		Logger:         slog.Default(),
		Global:         true,
	})
	if err != nil {
		panic(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := tel.InstrumentRedis(rdb); err != nil { // before rdb is used
		panic(err)
	}
	engine := redislock.New(rdb, redislock.Options{Observer: tel.Locks()})
	defer engine.Close()

	gs := grpc.NewServer(tel.GRPCServerOptions()...)
	defer gs.Stop()

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.MetricsHandler())
}
