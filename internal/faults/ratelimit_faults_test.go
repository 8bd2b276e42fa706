package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// rateWorkload is a few limiters of different shapes, pressed by clients
// that mostly find them spent: half decide at once, half wait up to 300ms
// for their turn.
func rateWorkload(prefix string) RateWorkload {
	return RateWorkload{
		Rates: map[string]Rate{
			prefix + "/a": {Limit: 20, Period: time.Second, Burst: 5},
			prefix + "/b": {Limit: 50, Period: 2 * time.Second, Burst: 20},
			prefix + "/c": {Limit: 10, Period: 500 * time.Millisecond, Burst: 1},
		},
		Clients: scaled(8, 16), MaxCost: 3, Wait: 300 * time.Millisecond,
	}
}

// rateLimiters returns the fleet's replicas' RateLimitService, in the
// order of the replicas.
func (f *fleet) rateLimiters(t *testing.T) []lockdv1.RateLimitServiceClient {
	t.Helper()
	var out []lockdv1.RateLimitServiceClient
	for _, p := range f.procs {
		out = append(out, lockdv1.NewRateLimitServiceClient(p.Dial(t)))
	}
	return out
}

// rateScenario is one rate limit fault run: a workload on takers, a fault
// injected once the run made progress, the checks once it made progress
// again.
type rateScenario struct {
	name, fault string
	workload    RateWorkload
	takers      []Taker
	rdb         redis.UniversalClient // its clock judged; scanned for limiters without an expiry
	inject      func(t *testing.T, run *RateRun, round int)
	control     bool
}

func (s rateScenario) run(t *testing.T) (*RateResult, []RateEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	skew, err := MeasureSkew(ctx, s.rdb)
	if err != nil {
		t.Fatal(err)
	}
	run := NewRateRun(s.workload, s.takers)
	run.Start()
	stopped := false
	defer func() {
		if !stopped {
			run.Stop()
		}
	}()
	warm := int64(scaled(300, 2000))
	if !run.WaitDecisions(warm, progressTimeout) {
		t.Fatalf("%s: only %d decisions before the fault", s.name, run.Decisions())
	}
	var extra []string
	for round := range scaled(1, 3) {
		if s.inject == nil {
			break
		}
		s.inject(t, run, round)
		if !run.WaitDecisions(run.Decisions()+warm, progressTimeout) {
			extra = append(extra, fmt.Sprintf("only %d decisions in %v after fault %d", run.Decisions(), progressTimeout, round+1))
			break
		}
	}
	run.Stop()
	stopped = true
	events := run.History.Events()
	res := CheckRate(events, s.workload.Rates, skew)
	keys, err := UnexpiringLimiters(ctx, s.rdb, "lockd")
	if err != nil {
		t.Errorf("scanning Redis: %v", err)
	}
	for _, k := range keys {
		extra = append(extra, fmt.Sprintf("Redis key %q has no expiry after the run", k))
	}
	res.OverLimit = append(res.OverLimit, extra...)
	report.Add(s.name, fmt.Sprintf("%s; %d windows judged with %v of clock skew, peak %.0f%% of the bound", s.fault, res.Windows, skew, 100*res.Peak), res.AsResult(), s.control)
	t.Logf("%s: %d decisions (%d allowed, %d failed, %d attempts retried), %d windows, skew %v, peak %.3f of the bound",
		s.name, res.Decisions, res.Allowed, res.Failed, res.Retried, res.Windows, skew, res.Peak)
	return res, events
}

// expectRateClean fails the test with the violations found, if any, or
// when the run did not press its limiters.
func expectRateClean(t *testing.T, res *RateResult) {
	t.Helper()
	if v := res.Violations(); len(v) > 0 {
		t.Errorf("%d violations of the rate contract:\n%s", len(v), strings.Join(v, "\n"))
	}
	if res.Peak < 0.5 {
		t.Errorf("the run reached only %.0f%% of the bound in any window: it did not press the limiters", 100*res.Peak)
	}
}

// TestRateLimitRedisFrozen freezes Redis with SIGSTOP for 5s, longer than
// the clients' attempts (3s beyond their wait), while they take from
// three limiters through two replicas: attempts fail meanwhile and are
// retried with their request id (a cost may be spent without an answer,
// never allowed twice), and no window of the history allows more than
// burst + limit × t / period.
func TestRateLimitRedisFrozen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	res, _ := rateScenario{
		name: "rate limits: Redis frozen", fault: "SIGSTOP Redis for 5s (longer than the clients' attempts) under three limiters, two replicas",
		workload: rateWorkload("rlfrozen"), takers: LockdTakers(f.rateLimiters(t)), rdb: srv.Client(t),
		inject: func(t *testing.T, run *RateRun, round int) {
			srv.Freeze()
			time.Sleep(5 * time.Second)
			srv.Thaw()
		},
	}.run(t)
	expectRateClean(t, res)
	if res.Failed+res.Retried == 0 {
		t.Errorf("no attempt failed while Redis was frozen: the freeze was not felt")
	}
}

// restartWorkload is rateWorkload with a limiter whose whole burst is
// three seconds' worth: a second burst after a restart is a violation
// unless the restart took that long.
func restartWorkload(prefix string) RateWorkload {
	w := rateWorkload(prefix)
	w.Rates[prefix+"/e"] = Rate{Limit: 30, Period: 3 * time.Second, Burst: 30}
	return w
}

// restartAfterBursts lets the limiters fill up (the clients held back),
// lets the clients spend the bursts, and restarts Redis without its data
// at once: a limiter that forgot it spent its burst hands out another.
func restartAfterBursts(srv *redistest.Server) func(t *testing.T, run *RateRun, round int) {
	return func(t *testing.T, run *RateRun, round int) {
		run.Pause()
		time.Sleep(3500 * time.Millisecond)
		run.Resume()
		run.WaitDecisions(run.Decisions()+60, progressTimeout)
		srv.Restart(t)
	}
}

// TestRateLimitRedisRestartedEmpty restarts Redis without its data right
// after the clients spent the bursts of full limiters: lockd finds its
// data-loss marker gone and counts every limiter as spent at the loss, so
// no second burst is allowed across the restart.
func TestRateLimitRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	res, _ := rateScenario{
		name: "rate limits: Redis restarted empty", fault: "Redis restarted without persistence right after the bursts of four full limiters were spent, two replicas",
		workload: restartWorkload("rlrestart"), takers: LockdTakers(f.rateLimiters(t)), rdb: srv.Client(t),
		inject: restartAfterBursts(srv),
	}.run(t)
	expectRateClean(t, res)
}

// TestRateLimitNegativeRestartWithoutMarkers is the restart above with
// lockd's data-loss watch off (--data-loss-grace=0): the limiters forget
// their spent bursts with Redis's data and hand out second ones. The
// checker must find them: the scenario above bites.
func TestRateLimitNegativeRestartWithoutMarkers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr(), "--data-loss-grace=0")
	res, _ := rateScenario{
		name: "control: rate limits, Redis restarted empty, no data-loss markers", fault: "the restart above with --data-loss-grace=0",
		workload: restartWorkload("rlnomarkers"), takers: LockdTakers(f.rateLimiters(t)), rdb: srv.Client(t),
		inject: restartAfterBursts(srv), control: true,
	}.run(t)
	if len(res.OverLimit) == 0 {
		t.Errorf("the checker found no second burst after a restart without markers (peak %.2f of the bound)", res.Peak)
	}
}

// TestRateLimitKillLockd kills one of three lockd processes on a 3-master
// Redis Cluster with SIGKILL while clients take and wait through it: they
// retry on the others with the same request_id (a waiter's retry waits
// for the turn its first call was given), and the bound holds throughout.
func TestRateLimitKillLockd(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	f := startFleet(t, 3, "--redis="+strings.Join(cl.Addrs(), ","))
	res, _ := rateScenario{
		name: "rate limits: kill -9 lockd", fault: "SIGKILL one of 3 lockd processes (Redis Cluster, 3 masters) under three limiters",
		workload: rateWorkload("rlkill"), takers: LockdTakers(f.rateLimiters(t)), rdb: cl.ClusterClient(t),
		inject: func(t *testing.T, run *RateRun, round int) {
			victim := f.procs[round%len(f.procs)]
			victim.Kill()
			if !run.WaitDecisions(run.Decisions()+int64(scaled(100, 500)), progressTimeout) {
				t.Fatalf("no progress after killing lockd %s", victim.Addr)
			}
			victim.Restart(t)
		},
	}.run(t)
	expectRateClean(t, res)
}

// TestRateLimitNegativeFixedWindow runs the same workload on the limiter
// many services write by hand, a counter per calendar window (INCRBY with
// an expiry), instead of lockd: it allows its limit at the start of every
// window, beyond the burst, and twice the limit around each window's
// edge. The checker must say so.
func TestRateLimitNegativeFixedWindow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	w := rateWorkload("rlfixed")
	w.Wait = 0
	res, _ := rateScenario{
		name: "control: rate limits by fixed window", fault: "a fixed-window counter (INCRBY per period) in place of lockd",
		workload: w, takers: []Taker{FixedWindow{RDB: rdb}}, rdb: rdb, control: true,
	}.run(t)
	if len(res.OverLimit) == 0 {
		t.Errorf("the checker passed a fixed-window limiter (peak %.2f of the bound)", res.Peak)
	}
}

// TestRateLimitNegativeDoctoredHistory runs lockd cleanly, then feeds the
// checker the same history with one limiter's refusals turned into
// allowances: the checker must find the excess, and pass the history as
// recorded.
func TestRateLimitNegativeDoctoredHistory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 1, "--redis="+srv.Addr())
	w := rateWorkload("rldoctored")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	skew, err := MeasureSkew(ctx, srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	run := NewRateRun(w, LockdTakers(f.rateLimiters(t)))
	run.Start()
	ok := run.WaitDecisions(int64(scaled(300, 2000)), progressTimeout)
	run.Stop()
	if !ok {
		t.Fatalf("only %d decisions", run.Decisions())
	}
	events := run.History.Events()
	if res := CheckRate(events, w.Rates, skew); len(res.Violations()) > 0 {
		t.Fatalf("the history as recorded: %q", res.Violations())
	}
	flipped := 0
	for i, e := range events {
		if e.Key == "rldoctored/a" && !e.Allowed && e.Err == "" && !e.Waited {
			events[i].Allowed = true
			flipped++
		}
	}
	res := CheckRate(events, w.Rates, skew)
	report.Add("control: doctored rate history", fmt.Sprintf("a clean run's history with %d refusals of one limiter turned into allowances", flipped), res.AsResult(), true)
	if flipped == 0 || len(res.OverLimit) == 0 {
		t.Errorf("%d refusals turned into allowances; the checker found %q", flipped, res.OverLimit)
	}
}
