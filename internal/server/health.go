package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// serviceNames are the names health reports on, besides "".
var serviceNames = []string{lockdv1.LockService_ServiceDesc.ServiceName, lockdv1.TokenService_ServiceDesc.ServiceName,
	lockdv1.ElectionService_ServiceDesc.ServiceName, lockdv1.SemaphoreService_ServiceDesc.ServiceName,
	lockdv1.RateLimitService_ServiceDesc.ServiceName}

// watchHealth turns every service NOT_SERVING while Redis does not answer,
// and back to SERVING when it does.
func watchHealth(ctx context.Context, hs *health.Server, ping func(context.Context) error, every time.Duration, log *slog.Logger) {
	last := healthpb.HealthCheckResponse_UNKNOWN
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(every, 500*time.Millisecond))
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			if err != nil {
				log.Warn("redis unreachable: NOT_SERVING", "err", err)
			} else if last != healthpb.HealthCheckResponse_UNKNOWN {
				log.Info("redis reachable again: SERVING")
			}
			hs.SetServingStatus("", st)
			for _, name := range serviceNames {
				hs.SetServingStatus(name, st)
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// servingOf reads hs's overall status, for the lockd_serving gauge.
func servingOf(hs *health.Server) func() bool {
	return func() bool {
		res, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}
}

func httpHandler(hs *health.Server, metrics, ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		res, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
