package bench

import (
	"context"
	"runtime"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// BenchmarkWatchStreamMemory opens 2,000 WatchAccessToken streams on one
// replica (client and server in this process) and reports the memory each
// open stream costs, heap and goroutine stacks together, client side
// included: an upper bound of what each costs lockd.
func BenchmarkWatchStreamMemory(b *testing.B) {
	const streams = 2000
	s := newTokenStack(b, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.clients[0].GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: benchApp}); err != nil {
		b.Fatal(err)
	}
	inUse := func() (uint64, int) {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse, runtime.NumGoroutine()
	}
	for range b.N {
		sctx, stop := context.WithCancel(ctx)
		mem0, g0 := inUse()
		for range streams {
			st, err := s.clients[0].WatchAccessToken(sctx, &lockdv1.WatchAccessTokenRequest{App: benchApp})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		mem1, g1 := inUse()
		stop()
		b.ReportMetric(float64(mem1-mem0)/streams, "bytes/stream")
		b.ReportMetric(float64(g1-g0)/streams, "goroutines/stream")
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, g := inUse(); g <= g0+10 {
				break
			}
		}
	}
}
