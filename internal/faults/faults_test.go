package faults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/redis/go-redis/v9"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
)

// chaos is set by `make chaos`: longer runs, more clients, faults repeated.
var chaos = os.Getenv("LOCKD_FAULTS") == "chaos"

// report collects every scenario's result; TestMain writes it to the file
// named by LOCKD_FAULTS_REPORT, when set.
var report Report

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		// The scenarios mostly wait (on faults, renewals, timeouts), not
		// compute: three at a time keep the package's wall time down.
		_ = flag.Set("test.parallel", "3")
	}
	code := m.Run()
	if path := os.Getenv("LOCKD_FAULTS_REPORT"); path != "" && report.Len() > 0 {
		f, err := os.Create(path)
		if err == nil {
			err = report.WriteMarkdown(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "writing the fault report:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// scaled returns n, or chaosN under `make chaos`.
func scaled[T any](n, chaosN T) T {
	if chaos {
		return chaosN
	}
	return n
}

// fleet is a set of lockd processes on one Redis deployment.
type fleet struct {
	procs     []*lockdtest.Process
	replicas  []lockdv1.LockServiceClient
	elections []lockdv1.ElectionServiceClient
}

// startFleet starts n lockd processes with args (the Redis flags), logging
// warnings only, and pausing grants after a Redis data loss for at most 5s.
func startFleet(t *testing.T, n int, args ...string) *fleet {
	t.Helper()
	args = append([]string{"--log-level=WARN", "--data-loss-grace=5s"}, args...)
	f := &fleet{}
	for range n {
		p := lockdtest.Start(t, lockdtest.Options{Race: lockdtest.Race, Args: args})
		f.procs = append(f.procs, p)
		conn := p.Dial(t)
		f.replicas = append(f.replicas, lockdv1.NewLockServiceClient(conn))
		f.elections = append(f.elections, lockdv1.NewElectionServiceClient(conn))
	}
	return f
}

// scenario is one fault run: a workload on a fleet, a fault injected once
// the run makes progress, and the checks once it made progress again.
type scenario struct {
	name, fault string
	workload    Workload
	replicas    []lockdv1.LockServiceClient
	rdb         redis.UniversalClient // scanned for keys without an expiry
	// inject injects the fault once and returns the data-loss windows it
	// opened. It runs once, or three times under `make chaos` (round counts
	// them), with progress awaited after each.
	inject func(t *testing.T, run *Run, round int) []Window
	// once injects the fault only once, even under `make chaos`.
	once bool
	// after, if set, runs once the clients stopped, before the checks, and
	// returns further violations.
	after func(t *testing.T, run *Run) []string
	// prepare, if set, sees the run before its clients start.
	prepare func(run *Run)
	control bool // a negative control: must find violations
}

// defaultWorkload is a dozen clients on four keys, each hold kept alive
// by KeepAlive across a few renewals (longer than its ttl).
func defaultWorkload(prefix string) Workload {
	keys := make([]string, scaled(4, 6))
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", prefix, i)
	}
	return Workload{
		Keys: keys, Clients: scaled(12, 24), TTL: time.Second, Wait: 2 * time.Second,
		Writes: 8, Step: 150 * time.Millisecond,
	}
}

const (
	// progressTimeout bounds each wait for the run to make progress; a run
	// that makes none for that long is stuck, whatever the machine's load.
	progressTimeout = 90 * time.Second
)

// run runs the scenario, records its row in the report and returns the
// result.
func (s scenario) run(t *testing.T) *Result {
	t.Helper()
	run := NewRun(s.workload, s.replicas)
	if s.prepare != nil {
		s.prepare(run)
	}
	run.Start()
	stopped := false
	defer func() {
		if !stopped {
			run.Stop()
		}
	}()
	warm := int64(scaled(15, 200))
	if !run.WaitHolds(warm, progressTimeout) {
		t.Fatalf("%s: only %d holds before the fault", s.name, run.Holds())
	}
	var windows []Window
	var extra []string
	rounds := scaled(1, 3)
	if s.once {
		rounds = 1
	}
	for round := range rounds {
		if s.inject == nil {
			break
		}
		windows = append(windows, s.inject(t, run, round)...)
		if round < rounds-1 && !run.WaitHolds(run.Holds()+warm, progressTimeout) {
			t.Fatalf("%s: no progress after fault %d", s.name, round+1)
		}
	}
	healed := run.Holds()
	recovered := run.WaitHolds(healed+warm, progressTimeout)
	run.Stop()
	stopped = true
	if !recovered {
		extra = append(extra, fmt.Sprintf("only %d holds in %v after the fault ended", run.Holds()-healed, progressTimeout))
	}
	if s.after != nil {
		extra = append(extra, s.after(t, run)...)
	}
	if s.rdb != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		keys, err := Unexpiring(ctx, s.rdb, "lockd")
		cancel()
		if err != nil {
			t.Errorf("scanning Redis: %v", err)
		}
		for _, k := range keys {
			extra = append(extra, fmt.Sprintf("Redis key %q has no expiry after the run", k))
		}
	}
	res := run.Check(windows...)
	res.Extra = append(res.Extra, extra...)
	writeHistory(t, run, len(res.Violations()) > 0)
	if res.LockLinearizable == porcupine.Illegal {
		path := filepath.Join(os.TempDir(), "lockd-faults-"+strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".html")
		if err := res.VisualizeLock(path); err == nil {
			t.Logf("the lock model's check drawn in %s", path)
		}
	}
	report.Add(s.name, s.fault, res, s.control)
	t.Logf("%s: %d holds, %d calls (%d failed), %d overlaps (%d stale, %d in data-loss windows), %d stale writes rejected, %d loss reports, lead %s, fenced %s, tokens %s, lock %s",
		s.name, res.Holds, res.Calls, res.FailedCalls, res.Overlaps, res.StaleOverlaps, res.WindowOverlaps,
		res.StaleWritesRejected, res.LossReports, leads(res.LeadTimes), res.FencedLinearizable, res.TokensLinearizable, res.LockLinearizable)
	return res
}

// expectClean fails the test with the violations found, if any.
func expectClean(t *testing.T, res *Result) {
	t.Helper()
	if v := res.Violations(); len(v) > 0 {
		if len(v) > 20 {
			v = append(v[:20], fmt.Sprintf("… and %d more", len(v)-20))
		}
		t.Errorf("%d violations of the lock contract:\n%s", len(res.Violations()), strings.Join(v, "\n"))
	}
}

// writeHistory writes the run's events, one a line, to a file in the
// directory named by LOCKD_FAULTS_HISTORY, or in the temporary directory
// when the run found violations, and logs where: for reading what happened
// around a violation.
func writeHistory(t *testing.T, run *Run, violations bool) {
	dir := os.Getenv("LOCKD_FAULTS_HISTORY")
	if dir == "" && !violations {
		return
	}
	if dir == "" {
		dir = os.TempDir()
	}
	var b strings.Builder
	for _, e := range run.History.Events() {
		fmt.Fprintf(&b, "%s..%s %-8s client=%d key=%s lease=%s token=%d expire=%s ok=%v final=%v err=%s\n",
			stamp(e.Call), stamp(e.Return), e.Op, e.Client, shortKey(e.Key), e.Lease, e.Token, stamp(e.Expire), e.OK, e.Final, e.Err)
	}
	name := "lockd-faults-" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".history"
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("writing the history: %v", err)
		return
	}
	t.Logf("history written to %s", path)
}
