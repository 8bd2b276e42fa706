package faults

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// clockSlack absorbs the millisecond rounding of expiry times: Redis stamps
// expiries in whole milliseconds.
const clockSlack = time.Millisecond

// porcupineTimeout bounds each linearizability check; a check that runs out
// of time answers Unknown, which is reported but is not a violation.
const porcupineTimeout = 20 * time.Second

// Window is a span in which the run lost Redis data in a way the contract
// documents and lockd cannot always see (a failover to a replica that had
// not received the newest writes): two grants of one key whose later one
// falls in a window are counted apart, not as violations.
type Window struct {
	From, To time.Time
	Why      string
}

func (w Window) contains(t time.Time) bool { return !t.Before(w.From) && t.Before(w.To) }

// Result is what [Check] found in a history. Every slice of strings lists
// violations, one sentence each.
type Result struct {
	Holds       int // leases granted
	Calls       int // Acquire and Release calls
	FailedCalls int // calls that ended with an error

	// DoubleGrants are leases whose key was granted to another while the
	// lease still ran (by the expiry lockd had told its holder) and the
	// holder had neither released it nor been told it was lost: one entry
	// per such lease.
	DoubleGrants []string
	// WindowGrants counts grants made so inside a declared data-loss window.
	WindowGrants int

	// Overlaps counts writers that entered the plain resource while another
	// was inside; StaleOverlaps those in which one writer's lease had already
	// run out (a paused holder: what fencing is for); WindowOverlaps those
	// in a data-loss window. The rest are OverlapViolations, one entry per
	// pair of leases.
	Overlaps          int
	StaleOverlaps     int
	WindowOverlaps    int
	OverlapViolations []string

	// StaleWritesRejected counts writes the fenced resource refused.
	StaleWritesRejected int
	// OutOfOrder are writes the fenced resource accepted although it had
	// accepted a higher token before.
	OutOfOrder []string
	// TokenViolations are grants whose fencing token is not above every
	// token granted (to another lease of the key) before the call began.
	TokenViolations []string
	// FencedLinearizable and TokensLinearizable are porcupine's verdicts on
	// the fenced resource (a register that keeps its highest token) and on
	// the grants (a counter that only rises), per key.
	FencedLinearizable porcupine.CheckResult
	TokensLinearizable porcupine.CheckResult
	// LockLinearizable is porcupine's verdict on the lock itself (see
	// lockmodel.go): grants, releases with their hold counts, renewals,
	// force-releases, per key.
	LockLinearizable porcupine.CheckResult
	lockInfo         porcupine.LinearizationInfo

	// LossReports counts losses lockd reported to a holder; LeadTimes are,
	// for each reported loss followed by another grant of the key, how long
	// before that grant the holder was told.
	LossReports int
	LeadTimes   []time.Duration
	// LateReports are leases lost, while their holder read a KeepAlive
	// stream, that were granted to another before the holder was told,
	// while the holder still had the lease's expiry ahead of it, or that
	// were never reported at all.
	LateReports []string
	// ReportsAfterExpiry counts losses reported after the next grant but
	// after the expiry the holder already knew: its own clock had told it.
	// How late such a report comes depends on scheduling (lockd gives up a
	// sixth of the ttl before the expiry; an overloaded machine can delay
	// the message past it), so it is counted, not judged.
	ReportsAfterExpiry int

	// OverLimit are permits of a semaphore granted while the key's limit
	// of other permits were still held (see [CheckPermits]).
	OverLimit []string

	// ForcedLeases counts leases an admin ended (ForceRelease) while their
	// holder claimed them; ForcedUnreported are those whose holder read a
	// KeepAlive stream at the time and was never told of the loss.
	// ForcedHandovers counts those whose holder read its stream and whose
	// key was granted again: each judged like any lost lease (LeadTimes,
	// LateReports).
	ForcedLeases     int
	ForcedUnreported []string
	ForcedHandovers  int

	// Extra are violations a scenario found outside the history (keys left
	// without an expiry in Redis, a lease kept by a vanished client).
	Extra []string
}

// Violations returns every violation found.
func (r *Result) Violations() []string {
	var all []string
	for _, l := range [][]string{r.DoubleGrants, r.OverLimit, r.OverlapViolations, r.OutOfOrder, r.TokenViolations, r.LateReports, r.ForcedUnreported, r.Extra} {
		all = append(all, l...)
	}
	if r.FencedLinearizable == porcupine.Illegal {
		all = append(all, "the fenced resource's history is not linearizable")
	}
	if r.TokensLinearizable == porcupine.Illegal {
		all = append(all, "the fencing tokens granted are not linearizable as a rising counter")
	}
	if r.LockLinearizable == porcupine.Illegal {
		all = append(all, "the lock's history (grants, releases and their hold counts, renewals) is not linearizable as a lock with leases")
	}
	return all
}

// hold is one lease as its holder saw it.
type hold struct {
	key, lease string
	client     int
	write      bool
	token      uint64
	call       time.Time // the granting call began
	start      time.Time // the grant's reply arrived
	expire     time.Time // latest expiry lockd reported
	end        time.Time // the holder stopped claiming it (final release, abandon)
	lost       time.Time // lockd reported it lost
	forced     time.Time // an admin's ForceRelease of it began
	watches    []span    // when the holder read a KeepAlive stream
	judged     bool      // its report was judged against the next grant
}

type span struct{ from, to time.Time }

// certainUntil is how long the holder can be sure it holds: until the
// expiry it was told of, unless it learned of a loss, let go, or an admin
// force-released it first while it read no KeepAlive stream. A holder
// reading its stream is told of a force-release (NOT_FOUND) before the key
// can be granted again, like of any loss; one not reading cannot learn of
// it before lockd tells it, and until then only fencing protects the
// resources from it.
func (h *hold) certainUntil() time.Time {
	t := h.expire
	forced := h.forced
	if !forced.IsZero() && h.watchedAt(forced) {
		forced = time.Time{}
	}
	for _, c := range []time.Time{h.lost, h.end, forced} {
		if !c.IsZero() && c.Before(t) {
			t = c
		}
	}
	return t
}

func (h *hold) watchedAt(t time.Time) bool {
	for _, w := range h.watches {
		if !t.Before(w.from) && (w.to.IsZero() || t.Before(w.to)) {
			return true
		}
	}
	return false
}

func conflict(a, b *hold) bool { return a.lease != b.lease && (a.write || b.write) }

// Check checks a run's history, the fenced resource's log and the plain
// resource's overlaps against the lock contract. Grants and overlaps inside
// windows are counted apart.
func Check(events []Event, fenced map[string][]FencedWrite, overlaps []Overlap, windows []Window) *Result {
	r := &Result{}
	holds, byLease := buildHolds(events, r)
	inWindow := func(t time.Time) bool {
		for _, w := range windows {
			if w.contains(t) {
				return true
			}
		}
		return false
	}

	keys := map[string][]*hold{}
	for _, h := range holds {
		keys[h.key] = append(keys[h.key], h)
	}
	for _, hs := range keys {
		sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
		checkGrants(r, hs, inWindow)
		checkReports(r, hs, inWindow)
	}
	checkTokens(r, holds)
	checkForced(r, holds)

	seen := map[[2]string]bool{}
	for _, o := range overlaps {
		r.Overlaps++
		a, b := byLease[o.Inside], byLease[o.Entering]
		switch {
		case a == nil || b == nil || !o.At.Before(a.certainUntil().Add(-clockSlack)) || !o.At.Before(b.certainUntil().Add(-clockSlack)):
			r.StaleOverlaps++
		case inWindow(o.At):
			r.WindowOverlaps++
		case seen[[2]string{o.Inside, o.Entering}] || seen[[2]string{o.Entering, o.Inside}]:
			// One entry per pair of leases.
		default:
			seen[[2]string{o.Inside, o.Entering}] = true
			r.OverlapViolations = append(r.OverlapViolations, fmt.Sprintf(
				"key %q: lease %s entered the plain resource at %s while lease %s, held until %s, was inside",
				shortKey(o.Key), short(o.Entering), stamp(o.At), short(o.Inside), stamp(a.certainUntil())))
		}
	}
	for key, log := range fenced {
		var highest uint64
		for i, w := range log {
			switch {
			case !w.Accepted:
				r.StaleWritesRejected++
			case w.Token < highest:
				r.OutOfOrder = append(r.OutOfOrder, fmt.Sprintf(
					"key %q: write %d by lease %s with token %d accepted after token %d", shortKey(key), i, short(w.Lease), w.Token, highest))
			default:
				highest = w.Token
			}
		}
	}
	r.FencedLinearizable = checkFencedModel(events)
	r.TokensLinearizable = checkTokenModel(holds)
	// A declared window may have lost data, as a recorded fault may.
	modelled := slices.Clone(events)
	for _, w := range windows {
		modelled = append(modelled, Event{Op: OpDataLoss, Client: -1, Call: w.From, Return: w.To})
	}
	r.LockLinearizable, r.lockInfo = checkLockModelVerbose(modelled)
	return r
}

// buildHolds folds the events into one hold per lease and counts calls.
func buildHolds(events []Event, r *Result) ([]*hold, map[string]*hold) {
	byLease := map[string]*hold{}
	byToken := map[keyToken]*hold{}
	var holds []*hold
	for _, e := range events {
		if e.Op == OpAcquire || e.Op == OpRelease {
			r.Calls++
		}
		h := byLease[e.Lease]
		if e.Err != "" {
			r.FailedCalls++
			if e.Op == OpRelease && e.Final && h != nil && h.end.IsZero() {
				h.end = e.Call // a failed release ends the holder's claim too
			}
			continue
		}
		switch e.Op {
		case OpAcquire:
			if !e.OK {
				continue
			}
			if h == nil {
				h = &hold{key: e.Key, lease: e.Lease, client: e.Client, write: e.Write, token: e.Token, call: e.Call, start: e.Return}
				byLease[e.Lease] = h
				byToken[keyToken{e.Key, e.Token}] = h
				holds = append(holds, h)
			}
			h.extend(e.Expire)
		case OpRenew:
			if h != nil {
				h.extend(e.Expire)
			}
		case OpLost:
			if h != nil && h.lost.IsZero() {
				h.lost = e.Return
				r.LossReports++
			}
		case OpRelease:
			if h != nil && e.Final && h.end.IsZero() {
				h.end = e.Call
			}
		case OpAbandon:
			if h != nil && h.end.IsZero() {
				h.end = e.Call
			}
		case OpForced:
			if f := byToken[keyToken{e.Key, e.Token}]; f != nil && f.forced.IsZero() {
				f.forced = e.Call
			}
		case OpWatch:
			if h != nil {
				h.watches = append(h.watches, span{from: e.Return})
			}
		case OpUnwatch:
			if h != nil && len(h.watches) > 0 && h.watches[len(h.watches)-1].to.IsZero() {
				h.watches[len(h.watches)-1].to = e.Call
			}
		}
	}
	r.Holds = len(holds)
	return holds, byLease
}

func (h *hold) extend(exp time.Time) {
	if exp.After(h.expire) {
		h.expire = exp
	}
}

// checkGrants finds conflicting grants made while an earlier holder was
// certain to hold the key, and reports each such earlier lease once. hs is
// sorted by start.
func checkGrants(r *Result, hs []*hold, inWindow func(time.Time) bool) {
	for i, a := range hs {
		var first *hold
		n := 0
		for _, b := range hs[i+1:] {
			// b is sorted after a, so the two were certain at once when b
			// started before a's certainty ended, and b's own had begun (a
			// grant whose reply arrives after its lease ran out, which a
			// stalled Redis can cause, was never certain).
			if !conflict(a, b) || !b.start.Before(a.certainUntil().Add(-clockSlack)) || !b.start.Before(b.certainUntil()) {
				continue
			}
			if inWindow(b.start) {
				r.WindowGrants++
				continue
			}
			if first == nil {
				first = b
			}
			n++
		}
		if first != nil {
			r.DoubleGrants = append(r.DoubleGrants, fmt.Sprintf(
				"key %q: lease %s (token %d), held until %s, was granted to %d others meanwhile, first lease %s (token %d) at %s",
				shortKey(a.key), short(a.lease), a.token, stamp(a.certainUntil()), n, short(first.lease), first.token, stamp(first.start)))
		}
	}
}

// checkReports checks that every lease lost while its holder read a
// KeepAlive stream was reported before the key was granted again.
func checkReports(r *Result, hs []*hold, inWindow func(time.Time) bool) {
	for i, a := range hs {
		var next *hold
		for _, b := range hs[i+1:] {
			if conflict(a, b) {
				next = b
				break
			}
		}
		if next != nil {
			judgeReport(r, a, next, inWindow)
		}
	}
}

// judgeReport checks that lease a, if lost while its holder read a
// KeepAlive stream, was reported to it before next, the grant that could
// only be made without it, started.
func judgeReport(r *Result, a, next *hold, inWindow func(time.Time) bool) {
	forced := !a.forced.IsZero() && a.forced.Before(next.start)
	if forced && a.watchedAt(a.forced) && (a.end.IsZero() || a.forced.Before(a.end)) {
		// An admin ended it while its holder listened: judged like any
		// loss (checkForced leaves it alone).
		a.judged = true
		r.ForcedHandovers++
	} else if forced {
		return // checkForced checks it was reported at all
	}
	if !a.lost.IsZero() && a.lost.Before(next.start) {
		r.LeadTimes = append(r.LeadTimes, next.start.Sub(a.lost))
		return
	}
	if (!a.end.IsZero() && !next.start.Before(a.end)) || !a.watchedAt(next.start) || inWindow(next.start) {
		return // let go, not listening, or lost where lockd cannot know
	}
	what := "never told"
	if !a.lost.IsZero() {
		if !next.start.Before(a.expire.Add(-clockSlack)) {
			r.ReportsAfterExpiry++
			return
		}
		what = fmt.Sprintf("told %s later", a.lost.Sub(next.start).Round(time.Millisecond))
	}
	r.LateReports = append(r.LateReports, fmt.Sprintf(
		"key %q: lease %s was granted to another (lease %s) at %s while its holder kept its KeepAlive stream open; the holder was %s",
		shortKey(a.key), short(a.lease), short(next.lease), stamp(next.start), what))
}

// checkTokens finds grants whose token is not above every token granted
// to another lease of the key before the grant's call began.
func checkTokens(r *Result, holds []*hold) {
	byKey := map[string][]*hold{}
	for _, h := range holds {
		byKey[h.key] = append(byKey[h.key], h)
	}
	for _, hs := range byKey {
		ret := append([]*hold(nil), hs...)
		sort.Slice(ret, func(i, j int) bool { return ret[i].start.Before(ret[j].start) })
		calls := append([]*hold(nil), hs...)
		sort.Slice(calls, func(i, j int) bool { return calls[i].call.Before(calls[j].call) })
		var best *hold
		k := 0
		for _, b := range calls {
			for k < len(ret) && ret[k].start.Before(b.call) {
				if best == nil || ret[k].token > best.token {
					best = ret[k]
				}
				k++
			}
			if best != nil && b.token <= best.token {
				r.TokenViolations = append(r.TokenViolations, fmt.Sprintf(
					"key %q: lease %s got token %d at %s, not above token %d of lease %s granted before",
					shortKey(b.key), short(b.lease), b.token, stamp(b.start), best.token, short(best.lease)))
			}
		}
	}
}

func short(lease string) string {
	if len(lease) > 8 {
		return lease[:8]
	}
	return lease
}

// shortKey shortens a long key for a message.
func shortKey(key string) string {
	if len(key) > 40 {
		return key[:32] + "…"
	}
	return key
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }
