package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/etcdtest"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// etcd's stubs come from its own modules: the Lease, Maintenance and KV
// clients from go.etcd.io/etcd/api/v3, the v3lock client from the server
// module's v3lockpb package. Both are generated with
// google.golang.org/protobuf and add no version change to any module lockd
// builds with; only the one small v3lockpb package of the server module is
// compiled. The v3 wire API of these calls is the same on the etcd 3.4
// server Debian ships.

// versus is lockd and etcd side by side on this machine, each a separate
// process reached through one gRPC connection from this one, with the same
// client shape: generated stubs, the same workers.
//
// lockd is cmd/lockd with its default flags (no auth, telemetry on, the
// call log at INFO) but for its addresses and --redis, on a redis-server
// without persistence. etcd is Debian's etcd-server, one member, its data
// (and the log it fsyncs on every write, as etcd always does) in a
// temporary directory.
type versus struct {
	lockd       lockdService
	etcd        etcdService
	lockdMeters []meter
	etcdMeters  []meter
	etcdDataDir string
}

func startVersus(b *testing.B) *versus {
	b.Helper()
	rs := redistest.Start(b)
	et := etcdtest.Start(b)
	v := &versus{etcdDataDir: et.DataDir()}
	// The no-op call is a health check: unbounded here, since 256 workers
	// keep more open at once than a replica allows callers without a
	// token by default.
	p := lockdtest.Start(b, lockdtest.Options{Args: []string{"--redis=" + rs.Addr(), "--max-health-streams=0"}})
	pin(b, rs.Pid(), redisCores)
	pin(b, p.Cmd.Process.Pid, serverCores)
	pin(b, et.Pid(), serverCores)
	pin(b, 0, loadCores)
	conn := p.Dial(b)
	v.lockd = lockdService{t: lockTarget{client: lockdv1.NewLockServiceClient(conn)}, health: healthpb.NewHealthClient(conn)}
	v.lockdMeters = []meter{pidMeter("lockd", p.Cmd.Process.Pid), pidMeter("redis", rs.Pid()), selfMeter("lockd-client")}
	conn = dial(b, et.Addr())
	v.etcd = etcdService{locks: v3lockpb.NewLockClient(conn), leases: etcdpb.NewLeaseClient(conn), maint: etcdpb.NewMaintenanceClient(conn)}
	v.etcdMeters = []meter{pidMeter("etcd", et.Pid()), selfMeter("etcd-client")}
	// Both answer before anything is measured.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []noopService{v.lockd, v.etcd} {
		if err := s.noop(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return v
}

// BenchmarkVersusEtcd compares lockd with etcd's own gRPC lock service
// (v3lock Lock/Unlock, see etcdService), both as separate processes on this
// machine (see versus). Every comparison interleaves the two in short
// slices (the order rotating), -benchtime in all for each, so that whatever
// else the machine does weighs on both alike, and each ratio is the median
// of the ratios of slices run back to back; the ratios, not the absolute
// rates, are what a run shows.
//
// op=uncontended/conc=N: N workers, each taking and giving back a key of
// its own: lockd-pairs/s and etcd-pairs/s, pairs-lockd/etcd; interleaved
// with each server's no-op unary call on the same connection and workers
// (lockd: grpc.health.v1.Health/Check on the same lockd, through its full
// interceptor chain; etcd: Maintenance.Status): lockd-noop/s, etcd-noop/s,
// and each one's pairs/s ÷ (noop/s ÷ 2), how close a pair (two calls) comes
// to two calls that do nothing. CPU per pair of each process (lockd, redis,
// etcd, and this process as each one's client) comes from /proc.
//
// op=contended/waiters=16/hold=200us: 16 waiters on one key, each holding
// it 200 µs and going to the back of the line after releasing: holds/s,
// handoff p50/p99 (start of the release call to the next grant) and the
// spread of waits, for each, and holds-lockd/etcd.
func BenchmarkVersusEtcd(b *testing.B) {
	v := startVersus(b)
	b.Logf("etcd data directory: %s", v.etcdDataDir)
	for _, conc := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("op=uncontended/conc=%d", conc), func(b *testing.B) {
			defer fixedShape(b)()
			lp := &workload{name: "lockd", run: pairs(b, v.lockd, conc, "versus/"), meters: v.lockdMeters}
			ep := &workload{name: "etcd", run: pairs(b, v.etcd, conc, "versus/"), meters: v.etcdMeters}
			ln := &workload{name: "lockd", run: noops(v.lockd, conc), meters: v.lockdMeters}
			en := &workload{name: "etcd", run: noops(v.etcd, conc), meters: v.etcdMeters}
			interleave(b, benchTime(), 30, lp, ep, ln, en)
			lp.report(b, "pair")
			ep.report(b, "pair")
			ln.report(b, "noop")
			en.report(b, "noop")
			halfNoop := func(pairs, noops float64) float64 { return pairs / (noops / 2) }
			b.ReportMetric(sliceRatio(lp, ep, ratio), "pairs-lockd/etcd")
			b.ReportMetric(sliceRatio(ln, en, ratio), "noop-lockd/etcd")
			b.ReportMetric(sliceRatio(lp, ln, halfNoop), "lockd-pairs/half-noop")
			b.ReportMetric(sliceRatio(ep, en, halfNoop), "etcd-pairs/half-noop")
		})
	}
	b.Run("op=contended/waiters=16/hold=200us", func(b *testing.B) {
		defer fixedShape(b)()
		const rounds = 15
		sides := []*contender{
			{name: "lockd", svc: v.lockd, meters: v.lockdMeters},
			{name: "etcd", svc: v.etcd, meters: v.etcdMeters},
		}
		for r := range rounds {
			for i := range sides {
				sides[(r+i)%len(sides)].run(b, fmt.Sprint("contended/", r), 16, 200*time.Microsecond, 50*time.Millisecond, benchTime()/rounds)
			}
		}
		for _, s := range sides {
			s.report(b)
		}
		r := make([]float64, rounds)
		for i := range r {
			r[i] = sides[0].slices[i] / sides[1].slices[i]
		}
		b.ReportMetric(median(r), "holds-lockd/etcd")
	})
}

// contender accumulates one lock service's contention runs.
type contender struct {
	name   string
	svc    lockService
	meters []meter

	c      contention
	cpu    []time.Duration // per meter, over the measured windows
	slices []float64       // holds/s of each run
}

// run measures waiters on key for measure (after warmup), with fresh
// sessions that are closed again afterwards.
func (k *contender) run(b *testing.B, key string, waiters int, hold, warmup, measure time.Duration) {
	b.Helper()
	if k.cpu == nil {
		k.cpu = make([]time.Duration, len(k.meters))
	}
	ss, err := openSessions(k.svc, waiters)
	if err != nil {
		b.Fatalf("%s: %v", k.name, err)
	}
	defer closeSessions(b, ss)
	before := make([]time.Duration, len(k.meters))
	c, err := contend(ss, key, hold, warmup, measure, func(open bool) {
		for i, m := range k.meters {
			if open {
				before[i] = m.read()
			} else {
				k.cpu[i] += m.read() - before[i]
			}
		}
	})
	if err != nil {
		b.Fatalf("%s: %v", k.name, err)
	}
	k.c.add(c)
	k.slices = append(k.slices, float64(c.holds)/c.window.Seconds())
}

func (k *contender) report(b *testing.B) {
	k.c.report(b, k.name+"-")
	for i, m := range k.meters {
		if k.c.holds > 0 {
			b.ReportMetric(float64(k.cpu[i].Nanoseconds())/1e3/float64(k.c.holds), m.name+"-cpu-us/hold")
		}
	}
}
