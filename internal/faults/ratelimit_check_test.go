package faults

import (
	"strings"
	"testing"
	"time"
)

// gcra returns the takes a perfect limiter allows at the given instants
// (each a take of cost 1 lasting a microsecond), exactly: the history a
// correct lockd could produce at best.
func gcra(rate Rate, at []time.Time) []RateEvent {
	interval := rate.Period / time.Duration(rate.Limit)
	tau := time.Duration(rate.burst()) * interval
	var tat time.Time
	var out []RateEvent
	for _, now := range at {
		base := tat
		if base.Before(now) {
			base = now
		}
		e := RateEvent{Key: "k", Cost: 1, Call: now, Return: now.Add(time.Microsecond)}
		if !base.Add(interval - tau).After(now) {
			tat, e.Allowed = base.Add(interval), true
		}
		out = append(out, e)
	}
	return out
}

// every returns n instants step apart from start.
func every(start time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(i) * step)
	}
	return out
}

func TestCheckRate(t *testing.T) {
	t.Parallel()
	rate := Rate{Limit: 10, Period: time.Second, Burst: 4}
	rates := map[string]Rate{"k": rate}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Takes every 7ms for 3s: the limiter is pressed throughout.
	history := gcra(rate, every(start, 7*time.Millisecond, 430))

	t.Run("a perfect limiter pressed to its bound passes", func(t *testing.T) {
		t.Parallel()
		res := CheckRate(history, rates, 0)
		if len(res.Violations()) > 0 {
			t.Fatalf("violations: %q", res.Violations())
		}
		if res.Allowed < 30 || res.Peak < 0.9 || res.Peak > 1 {
			t.Errorf("%d allowed, peak %.3f of the bound: the history did not press the limit", res.Allowed, res.Peak)
		}
	})
	t.Run("one take too many is found", func(t *testing.T) {
		t.Parallel()
		doctored := append([]RateEvent(nil), history...)
		for i := range doctored {
			if !doctored[i].Allowed && i > 100 {
				doctored[i].Allowed = true // one refusal turned into an allowance
				break
			}
		}
		res := CheckRate(doctored, rates, 0)
		if len(res.OverLimit) == 0 || !strings.Contains(res.OverLimit[0], `key "k"`) {
			t.Fatalf("a take beyond the bound was not found: %+v", res)
		}
	})
	t.Run("a fixed window allows twice its limit at the edge", func(t *testing.T) {
		t.Parallel()
		var events []RateEvent
		counts := map[int64]int{}
		for _, now := range every(start, 7*time.Millisecond, 430) {
			w := now.Truncate(rate.Period).UnixNano()
			counts[w]++
			events = append(events, RateEvent{Key: "k", Cost: 1, Call: now, Return: now.Add(time.Microsecond), Allowed: counts[w] <= int(rate.Limit)})
		}
		if res := CheckRate(events, rates, 0); len(res.OverLimit) == 0 {
			t.Fatalf("a fixed window passed: peak %.2f", res.Peak)
		}
	})
	t.Run("the skew widens every take, so a slight excess within it is not judged", func(t *testing.T) {
		t.Parallel()
		// Five takes of a burst of 4 a millisecond apart: a violation
		// certain without skew, not with 60ms of it (the takes may have
		// been decided across 125ms, in which 1.25 more come back).
		var events []RateEvent
		for i, at := range every(start, time.Millisecond, 5) {
			events = append(events, RateEvent{Client: i, Key: "k", Cost: 1, Call: at, Return: at.Add(time.Millisecond), Allowed: true})
		}
		if res := CheckRate(events, rates, 0); len(res.OverLimit) == 0 {
			t.Errorf("5 of a burst of 4 at once passed")
		}
		if res := CheckRate(events, rates, 60*time.Millisecond); len(res.OverLimit) > 0 {
			t.Errorf("with 60ms of skew: %q", res.OverLimit)
		}
	})
	t.Run("failed and refused takes count for nothing", func(t *testing.T) {
		t.Parallel()
		events := []RateEvent{
			{Key: "k", Cost: 4, Call: start, Return: start, Allowed: true},
			{Key: "k", Cost: 4, Call: start, Return: start, Err: "Unavailable"},
			{Key: "k", Cost: 4, Call: start, Return: start},
		}
		res := CheckRate(events, rates, 0)
		if len(res.OverLimit) > 0 || res.Allowed != 1 || res.Failed != 1 || res.Decisions != 2 {
			t.Fatalf("%+v", res)
		}
	})
}
