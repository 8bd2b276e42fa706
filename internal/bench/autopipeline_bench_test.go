package bench

import (
	"fmt"
	"testing"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// BenchmarkAutoPipeline measures go-redis's automatic pipelining on the
// lock path (redislock.Options.AutoPipeline): uncontended Acquire+Release
// pairs through two bare LockServices on one redis-server, one engine
// sending its scripts through the autopipeliner (path=auto) and one with a
// round trip per script (path=plain), interleaved in slices for
// -benchtime each: auto-pairs/s, plain-pairs/s, auto/plain their ratio,
// each one's CPU per pair in this process (client and server) and Redis's.
// Each engine has a Redis client of its own, so neither shares the other's
// connections.
func BenchmarkAutoPipeline(b *testing.B) {
	srv := redistest.Start(b)
	_, plain := newBareServerWith(b, srv.Client(b), redislock.Options{})
	_, auto := newBareServerWith(b, srv.Client(b), redislock.Options{AutoPipeline: true})
	for _, conc := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			defer fixedShape(b)()
			a := &workload{name: "auto", run: pairs(b, lockdService{t: auto}, conc, "autopipeline/auto/"),
				meters: []meter{selfMeter("auto"), pidMeter("auto-redis", srv.Pid())}}
			p := &workload{name: "plain", run: pairs(b, lockdService{t: plain}, conc, "autopipeline/plain/"),
				meters: []meter{selfMeter("plain"), pidMeter("plain-redis", srv.Pid())}}
			interleave(b, benchTime(), 30, p, a)
			a.report(b, "pair")
			p.report(b, "pair")
			b.ReportMetric(sliceRatio(a, p, ratio), "auto/plain")
		})
	}
}
