package bench

// The measuring loops of the benchmarks: interleaved slices of uncontended
// pairs and no-op calls, waiters on one key, and the CPU meters read around
// them.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sessions opens n sessions of svc, closed at cleanup.
func sessions(b *testing.B, svc lockService, n int) []session {
	b.Helper()
	ss, err := openSessions(svc, n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeSessions(b, ss) })
	return ss
}

// openSessions opens n sessions of svc, for workers 0 to n-1.
func openSessions(svc lockService, n int) ([]session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss := make([]session, n)
	for w := range ss {
		s, err := svc.session(ctx, w)
		if err != nil {
			return nil, err
		}
		ss[w] = s
	}
	return ss, nil
}

// closeSessions closes every session of ss.
func closeSessions(b *testing.B, ss []session) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range ss {
		if err := s.close(ctx); err != nil {
			b.Errorf("closing a session: %v", err)
		}
	}
}

// forEach runs op(w, i) for i in [0, n) on conc workers; w is the
// worker's index.
func forEach(n, conc int, op func(w, i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(w, i); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// untilDeadline runs op on conc workers until the deadline and returns how
// many calls completed and how long from the start until the last one did.
func untilDeadline(conc int, until time.Time, op func(w int) error) (int64, time.Duration, error) {
	var (
		n        atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				if err := op(w); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(start), firstErr
}

// pairs is uncontended Acquire+Release pairs (or Lock+Unlock) on svc:
// worker w takes and gives back key prefix+w, over and over.
func pairs(b *testing.B, svc lockService, conc int, prefix string) func(time.Time) (int64, time.Duration, error) {
	ss := sessions(b, svc, conc)
	keys := make([]string, conc)
	for w := range keys {
		keys[w] = fmt.Sprint(prefix, w)
	}
	ctx := context.Background()
	return func(until time.Time) (int64, time.Duration, error) {
		return untilDeadline(conc, until, func(w int) error {
			unlock, err := ss[w].lock(ctx, keys[w])
			if err != nil {
				return err
			}
			return unlock(ctx)
		})
	}
}

// noops is svc's no-op call on conc workers.
func noops(svc noopService, conc int) func(time.Time) (int64, time.Duration, error) {
	ctx := context.Background()
	return func(until time.Time) (int64, time.Duration, error) {
		return untilDeadline(conc, until, func(int) error { return svc.noop(ctx) })
	}
}

// meter reads a CPU clock: a process's user+system time.
type meter struct {
	name string // the metric is name-cpu-us/<unit>
	read func() time.Duration
}

// selfMeter is this process: the load generator, and the in-process
// servers if any.
func selfMeter(name string) meter {
	return meter{name: name, read: func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}}
}

// pidMeter is another process's user+system time from /proc (every
// thread, in clock ticks of 10 ms).
func pidMeter(name string, pid int) meter {
	return meter{name: name, read: func() time.Duration { return procCPU(pid) }}
}

func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (in parentheses, may hold spaces):
	// state is field 3, utime 14, stime 15.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ut+st) * tick
}

// workload is one loop measured in interleaved slices.
type workload struct {
	name   string
	run    func(until time.Time) (int64, time.Duration, error)
	meters []meter

	ops    int64
	took   time.Duration
	cpu    []time.Duration // per meter
	slices []float64       // the rate of each round's slice
}

func (w *workload) rate() float64 { return float64(w.ops) / w.took.Seconds() }

// sliceRatio is the median over rounds of f(a's rate, b's rate) in that
// round: two slices run back to back see much the same background load, so
// a burst of other work moves one round's ratio, not the median.
func sliceRatio(a, b *workload, f func(a, b float64) float64) float64 {
	r := make([]float64, len(a.slices))
	for i := range r {
		r[i] = f(a.slices[i], b.slices[i])
	}
	return median(r)
}

// ratio is a ÷ b, for sliceRatio.
func ratio(a, b float64) float64 { return a / b }

// median returns the median of v; v gets sorted.
func median(v []float64) float64 {
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// report reports w's rate as name-units/s and each meter's CPU per op as
// meter-cpu-us/unit.
func (w *workload) report(b *testing.B, unit string) {
	b.ReportMetric(w.rate(), w.name+"-"+unit+"s/s")
	for i, m := range w.meters {
		b.ReportMetric(float64(w.cpu[i].Nanoseconds())/1e3/float64(w.ops), m.name+"-cpu-us/"+unit)
	}
}

// interleave runs every workload for total in rounds slices, the order
// rotating each round, so that whatever else the machine does weighs on
// each alike. Compare workloads with sliceRatio.
func interleave(b *testing.B, total time.Duration, rounds int, ws ...*workload) {
	b.Helper()
	slice := total / time.Duration(rounds)
	for _, w := range ws {
		w.cpu = make([]time.Duration, len(w.meters))
	}
	for r := range rounds {
		for i := range ws {
			w := ws[(r+i)%len(ws)]
			before := make([]time.Duration, len(w.meters))
			for j, m := range w.meters {
				before[j] = m.read()
			}
			n, took, err := w.run(time.Now().Add(slice))
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			for j, m := range w.meters {
				w.cpu[j] += m.read() - before[j]
			}
			w.ops += n
			w.took += took
			w.slices = append(w.slices, float64(n)/took.Seconds())
		}
	}
}

// benchTime is -test.benchtime when it is a duration (else 1s): how long a
// fixed-shape benchmark measures each thing it compares.
func benchTime() time.Duration {
	d, _ := benchTimeFlag()
	return d
}

func benchTimeFlag() (time.Duration, bool) {
	if f := flag.Lookup("test.benchtime"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			return d, true
		}
	}
	return time.Second, false
}

// fixedShape readies b for a benchmark of a fixed shape (a set time, or a
// set amount of work) that ignores b.N: it reports no ns/op, and the
// function it returns, deferred, makes the run last at least -benchtime,
// so that the testing package runs it once rather than again with a larger
// b.N.
func fixedShape(b *testing.B) func() {
	b.Helper()
	start := time.Now()
	return func() {
		if d, ok := benchTimeFlag(); ok {
			time.Sleep(d - time.Since(start))
		}
		b.ReportMetric(0, "ns/op")
	}
}

// contention is what waiters on one key saw during the measured window.
type contention struct {
	holds    int             // grants in the window
	window   time.Duration   // its length
	handoffs []time.Duration // from the start of a Release to the next grant
	waits    []time.Duration // from a lock call to its grant, or to the window's end for calls still waiting then
}

func (c *contention) add(o contention) {
	c.holds += o.holds
	c.window += o.window
	c.handoffs = append(c.handoffs, o.handoffs...)
	c.waits = append(c.waits, o.waits...)
}

// report reports holds/s, handoff p50/p99 and the spread of waits (the
// longest over the mean), each metric prefixed by prefix.
func (c *contention) report(b *testing.B, prefix string) {
	b.ReportMetric(float64(c.holds)/c.window.Seconds(), prefix+"holds/s")
	if len(c.handoffs) > 0 {
		b.ReportMetric(percentile(c.handoffs, 0.50), prefix+"p50-ms")
		b.ReportMetric(percentile(c.handoffs, 0.99), prefix+"p99-ms")
	}
	if len(c.waits) > 0 {
		var sum, longest time.Duration
		for _, w := range c.waits {
			sum += w
			longest = max(longest, w)
		}
		mean := sum / time.Duration(len(c.waits))
		b.ReportMetric(float64(mean.Microseconds())/1000, prefix+"wait-mean-ms")
		b.ReportMetric(float64(longest)/float64(mean), prefix+"wait-max/mean")
	}
}

// percentile returns the p-th percentile of d in ms; d gets sorted.
func percentile(d []time.Duration, p float64) float64 {
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
}

// grantCount counts grants, and lets a waiter that was the last one
// granted wait, without polling, until another is: a waiter goes to the
// back of the line only once the next one has the lock.
type grantCount struct {
	mu    sync.Mutex
	n     int64
	moved chan struct{} // closed at the next grant
}

// add counts a grant and returns its number.
func (g *grantCount) add() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	if g.moved != nil {
		close(g.moved)
		g.moved = nil
	}
	return g.n
}

// waitPast waits until grant n is not the last one, or ctx ends.
func (g *grantCount) waitPast(ctx context.Context, n int64) {
	g.mu.Lock()
	if g.n != n {
		g.mu.Unlock()
		return
	}
	if g.moved == nil {
		g.moved = make(chan struct{})
	}
	moved := g.moved
	g.mu.Unlock()
	select {
	case <-moved:
	case <-ctx.Done():
	}
}

// holdFor spends d in a critical section, yielding the processor to other
// goroutines meanwhile. time.Sleep would not do: a sleep shorter than a
// millisecond lasts up to a whole one whenever the process has nothing
// else to do (the Go runtime waits for timers in the netpoller, which
// counts in whole milliseconds), so a 200 µs hold became 0.4-1.1 ms and
// the lock service under test barely mattered to holds/s.
func holdFor(d time.Duration) {
	for until := time.Now().Add(d); time.Now().Before(until); {
		runtime.Gosched()
	}
}

// contendRuns numbers the runs of contend, for a key of their own.
var contendRuns atomic.Int64

// contend has one waiter per session want one key, prefix plus a number no
// other run used (a grant that reached lockd but not its cancelled caller
// holds the key until its lease ends); each holder keeps it for
// hold, releases it, and goes to the back of the line (it asks again only
// once another waiter got the key). Once every waiter has asked, and warmup
// has passed, grants are counted for measure; mark(true) and mark(false)
// are called as that window opens and closes (for counters to read around
// it). Waits are those of the calls granted in the window, and of the calls
// still waiting as it closes (how long they had waited by then), so that a
// waiter passed over for the whole window counts. Then every waiter is
// cancelled; sessions are left to the caller. Two waiters holding the key
// at once fail the run: a lock service that does not exclude is not
// measured.
func contend(ss []session, prefix string, hold, warmup, measure time.Duration, mark func(open bool)) (contention, error) {
	key := fmt.Sprint(prefix, "/", contendRuns.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), warmup+measure+2*time.Minute)
	defer cancel()
	var (
		mu         sync.Mutex
		res        contention
		releasedAt time.Time
		open       bool
		grants     grantCount
		holding    atomic.Int64 // waiters inside the critical section: 1 at most
		asked      sync.WaitGroup
		wg         sync.WaitGroup
		errOnce    sync.Once
		firstErr   error
		asking     = make([]atomic.Int64, len(ss)) // start of a waiter's pending call, Unix ns; 0 when none
	)
	fail := func(err error) {
		if ctx.Err() == nil {
			errOnce.Do(func() { firstErr = err })
			cancel()
		}
	}
	asked.Add(len(ss))
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for ctx.Err() == nil {
				start := time.Now()
				asking[i].Store(start.UnixNano())
				if first {
					asked.Done()
					first = false
				}
				unlock, err := s.lock(ctx, key)
				if err != nil {
					fail(err)
					return
				}
				got := time.Now()
				mu.Lock()
				asking[i].Store(0)
				if open {
					res.holds++
					res.waits = append(res.waits, got.Sub(start))
					if !releasedAt.IsZero() {
						res.handoffs = append(res.handoffs, got.Sub(releasedAt))
					}
				}
				mu.Unlock()
				mine := grants.add()
				if n := holding.Add(1); n != 1 {
					fail(fmt.Errorf("%d waiters held %s at once", n, key))
				}
				holdFor(hold) // the critical section
				holding.Add(-1)
				mu.Lock()
				releasedAt = time.Now()
				mu.Unlock()
				if err := unlock(context.WithoutCancel(ctx)); err != nil {
					fail(err)
					return
				}
				// Go to the back of the line.
				grants.waitPast(ctx, mine)
			}
		}()
	}
	asked.Wait()
	time.Sleep(warmup)
	mark(true)
	mu.Lock()
	open = true
	mu.Unlock()
	opened := time.Now()
	time.Sleep(measure)
	mu.Lock()
	open = false
	closed := time.Now()
	res.window = closed.Sub(opened)
	for i := range asking {
		if t := asking[i].Load(); t != 0 {
			res.waits = append(res.waits, closed.Sub(time.Unix(0, t)))
		}
	}
	mu.Unlock()
	mark(false)
	cancel()
	wg.Wait()
	return res, firstErr
}
