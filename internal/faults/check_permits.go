package faults

import (
	"fmt"
	"sort"
	"time"
)

// Semaphores. A permit is a lease of its own (SemaphoreService.Acquire,
// kept alive and released through LockService), recorded as a read hold
// (Write false) so that the lock checks leave permits of one key to
// overlap. CheckPermits holds them to the semaphore contract by the same
// rules of belief the lock checks use: a permit is held from its grant's
// reply until its holder releases it, learns it is lost, is
// force-released, or reaches the expiry lockd last told it.

// CheckPermits checks a semaphore run's history: no permit of a key is
// granted while limit other permits of the key are held; a holder whose
// permit is lost while it reads a KeepAlive stream is told before a permit
// is granted that could only be granted without its own; fencing tokens
// rise per key; force-released permits are reported. Grants inside
// windows are counted apart.
func CheckPermits(events []Event, limit int, windows []Window) *Result {
	r := &Result{}
	holds, _ := buildHolds(events, r)
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
		checkPermitGrants(r, hs, limit, inWindow)
		for i, a := range hs {
			if next := nextBeyond(hs, i, limit); next != nil {
				judgeReport(r, a, next, inWindow)
			}
		}
	}
	checkTokens(r, holds)
	checkForced(r, holds)
	r.FencedLinearizable = checkFencedModel(events)
	r.TokensLinearizable = checkTokenModel(holds)
	return r
}

// heldAt returns the permits of hs other than skip that were certainly
// held at t (each had begun by t and its certainty had not ended).
func heldAt(hs []*hold, t time.Time, skip ...*hold) []*hold {
	var out []*hold
next:
	for _, c := range hs {
		for _, s := range skip {
			if c == s {
				continue next
			}
		}
		if !c.start.After(t) && t.Before(c.certainUntil().Add(-clockSlack)) && c.start.Before(c.certainUntil()) {
			out = append(out, c)
		}
	}
	return out
}

// checkPermitGrants finds permits granted while limit others were held.
// hs is sorted by start.
func checkPermitGrants(r *Result, hs []*hold, limit int, inWindow func(time.Time) bool) {
	for _, b := range hs {
		if !b.start.Before(b.certainUntil()) {
			continue // its reply came after it ran out: never held
		}
		others := heldAt(hs, b.start, b)
		if len(others) < limit {
			continue
		}
		if inWindow(b.start) {
			r.WindowGrants++
			continue
		}
		leases := ""
		for i, o := range others {
			if i > 0 {
				leases += ", "
			}
			leases += fmt.Sprintf("%s (token %d, held until %s)", short(o.lease), o.token, stamp(o.certainUntil()))
		}
		r.OverLimit = append(r.OverLimit, fmt.Sprintf(
			"key %q: permit %s (token %d) granted at %s while %d permits were held, limit %d: %s",
			shortKey(b.key), short(b.lease), b.token, stamp(b.start), len(others), limit, leases))
	}
}

// nextBeyond returns the first permit granted after hs[i] that could only
// be granted once hs[i] was gone: when it started, limit other permits
// (counting itself, not hs[i]) were held.
func nextBeyond(hs []*hold, i, limit int) *hold {
	a := hs[i]
	for _, b := range hs[i+1:] {
		if b.start.Equal(a.start) {
			continue
		}
		if len(heldAt(hs, b.start, a)) >= limit {
			return b
		}
	}
	return nil
}
