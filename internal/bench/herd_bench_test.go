package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// BenchmarkHerd measures waiting at scale: waiters=N waiters on one key of
// one lockd process (cmd/lockd on a redis-server), each holding it 200 µs
// and going to the back of the line after releasing, for -benchtime after
// a second's warm-up. Reported: holds/s, handoff p50/p99 (start of the
// release call to the next grant), the mean wait of a call and the spread
// of waits (longest ÷ mean: 1 when every waiter waits its turn, large when
// some are passed over), and per handoff (per grant while the key is
// contended): Redis commands of every kind but INFO and PING (counted from
// INFO commandstats, so a wake-up that costs O(waiters) shows as growth
// with N), script calls, publishes, and lockd's and Redis's CPU. The
// commands per handoff are logged by name. Waiters share a connection up to
// 250 of them, and spread over more beyond.
func BenchmarkHerd(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	p := lockdtest.Start(b, lockdtest.Options{Args: []string{"--redis=" + rs.Addr()}})
	meters := []meter{pidMeter("lockd", p.Cmd.Process.Pid), pidMeter("redis", rs.Pid())}
	// At most perConn waiters share a connection: lockd refuses calls
	// beyond --max-concurrent-streams (1000) on one.
	const perConn = 250
	var conns spread
	for range 1000 / perConn {
		conns = append(conns, lockdService{t: lockTarget{client: lockdv1.NewLockServiceClient(p.Dial(b))}})
	}
	for _, n := range []int{16, 64, 256, 1000} {
		svc := conns[:(n+perConn-1)/perConn]
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			defer fixedShape(b)()
			ss := sessions(b, svc, n)
			var calls [2]map[string]int64
			var cpu [2][]time.Duration
			c, err := contend(ss, fmt.Sprint("herd/", n), 200*time.Microsecond, time.Second, benchTime(), func(open bool) {
				i := 0
				if !open {
					i = 1
				}
				calls[i] = redistest.CommandCalls(b, rdb)
				for _, m := range meters {
					cpu[i] = append(cpu[i], m.read())
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			if c.holds == 0 {
				b.Fatalf("no grant in %v with %d waiters", c.window, n)
			}
			c.report(b, "")
			per := func(v int64) float64 { return float64(v) / float64(c.holds) }
			diff := map[string]int64{}
			var total int64
			for name, v := range calls[1] {
				if d := v - calls[0][name]; d > 0 && name != "info" && name != "ping" {
					diff[name] = d
					total += d
				}
			}
			b.ReportMetric(per(total), "redis-cmds/handoff")
			b.ReportMetric(per(diff["eval"]+diff["evalsha"]), "scripts/handoff")
			b.ReportMetric(per(diff["publish"]+diff["spublish"]), "publishes/handoff")
			for i, m := range meters {
				b.ReportMetric(float64((cpu[1][i]-cpu[0][i]).Nanoseconds())/1e3/float64(c.holds), m.name+"-cpu-us/handoff")
			}
			names := slices.SortedFunc(maps.Keys(diff), func(x, y string) int { return cmp.Compare(diff[y], diff[x]) })
			var line strings.Builder
			for _, name := range names {
				fmt.Fprintf(&line, " %s=%.2f", name, per(diff[name]))
			}
			b.Logf("Redis commands per handoff with %d waiters:%s", n, line.String())
		})
	}
}
