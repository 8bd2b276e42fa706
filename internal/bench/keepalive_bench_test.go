package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// BenchmarkKeepAliveStreams opens 10,000 KeepAlive streams on one lockd
// process and keeps them for a few renewal rounds. It reports the process's
// resident memory per stream, Redis script calls per second, the lockd
// process's CPU per renewal, how late renewals arrive against their ttl/3
// schedule, and leases lost (must be 0). b.N is ignored: the run has a fixed shape.
func BenchmarkKeepAliveStreams(b *testing.B) {
	defer fixedShape(b)()
	const (
		streams = 10000
		conns   = 20 // 500 streams each, below --max-concurrent-streams
		ttl     = 6 * time.Second
		rounds  = 4
	)
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	p := lockdtest.Start(b, lockdtest.Options{Args: []string{"--redis=" + srv.Addr(), "--max-keepalives=20000", "--log-level=WARN"}})
	pid := p.Cmd.Process.Pid
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var clients []lockdv1.LockServiceClient
	for range conns {
		conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, lockdv1.NewLockServiceClient(conn))
	}
	rssBefore := rssKiB(b, pid)

	var (
		wg       sync.WaitGroup
		received atomic.Int64
		lost     atomic.Int64
		mu       sync.Mutex
		lateness []time.Duration
		opened   sync.WaitGroup
	)
	opened.Add(streams)
	sem := make(chan struct{}, 64)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := clients[i%conns]
			sem <- struct{}{}
			key := fmt.Sprint("kept/", i)
			res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl)})
			if err != nil || !res.GetAcquired() {
				<-sem
				opened.Done()
				b.Errorf("acquire %d: %v %v", i, res, err)
				return
			}
			stream, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()})
			<-sem
			opened.Done()
			if err != nil {
				b.Errorf("keepalive %d: %v", i, err)
				return
			}
			var last time.Time
			for {
				msg, err := stream.Recv()
				if err != nil {
					if ctx.Err() == nil {
						lost.Add(1)
					}
					return
				}
				now := time.Now()
				received.Add(1)
				if !last.IsZero() {
					// Renewals are due every ttl/3; lateness is how far past
					// that the renewed lease arrived.
					late := now.Sub(last) - ttl/3
					mu.Lock()
					lateness = append(lateness, late)
					mu.Unlock()
				}
				last = now
				_ = msg
			}
		}()
	}
	opened.Wait()
	calls0, cpu0, start := redistest.ScriptCalls(b, rdb), procCPU(pid), time.Now()
	time.Sleep(rounds * ttl / 3)
	calls1, cpu1, elapsed := redistest.ScriptCalls(b, rdb), procCPU(pid), time.Since(start)
	rssAfter := rssKiB(b, pid)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var maxLate, sum time.Duration
	for _, l := range lateness {
		maxLate = max(maxLate, l)
		sum += l
	}
	b.ReportMetric(float64(rssAfter-rssBefore)*1024/streams, "rss-bytes/stream")
	b.ReportMetric(float64(calls1-calls0)/elapsed.Seconds(), "script-calls/s")
	b.ReportMetric(float64(len(lateness))/elapsed.Seconds(), "renewals/s")
	if len(lateness) > 0 {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(len(lateness)), "lockd-cpu-us/renewal")
		b.ReportMetric(float64(sum.Milliseconds())/float64(len(lateness)), "mean-late-ms")
	}
	b.ReportMetric(float64(maxLate.Milliseconds()), "max-late-ms")
	b.ReportMetric(float64(lost.Load()), "leases-lost")
}

func rssKiB(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
