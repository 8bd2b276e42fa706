package faults

import (
	"testing"
	"time"
)

// permit is a permit grant: grant, as a read hold.
func permit(client int, key, lease string, token uint64, call, ret, exp int) Event {
	e := grant(client, key, lease, token, call, ret, exp)
	e.Write = false
	return e
}

// forced is an admin's ForceRelease of key's lease with token, called at
// call.
func forced(key string, token uint64, call int) Event {
	return Event{Op: OpForced, Client: -1, Key: key, Token: token, Write: true, Call: at(call), Return: at(call + 2)}
}

// TestSemaphoreCheck runs the permit checker on small made-up histories
// with a limit of 2, each built to hold or to break one promise of the
// semaphore contract.
func TestSemaphoreCheck(t *testing.T) {
	tests := []struct {
		name string
		// events are the history; the limit is 2.
		events []Event
		want   func(r *Result) bool
	}{
		{
			name: "limit permits held at once, and a third once one is released, is clean",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), permit(1, "s", "b", 2, 0, 2, 1000),
				release(0, "s", "a", 50), permit(2, "s", "c", 3, 10, 60, 1060),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 && r.Holds == 3 },
		},
		{
			name: "limit+1 permits held at once is a violation",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), permit(1, "s", "b", 2, 0, 2, 1000),
				permit(2, "s", "c", 3, 10, 60, 1060),
			},
			want: func(r *Result) bool { return len(r.OverLimit) == 1 && len(r.Violations()) == 1 },
		},
		{
			name: "permits of other keys do not count",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), permit(1, "s", "b", 2, 0, 2, 1000),
				permit(2, "t", "c", 1, 10, 60, 1060),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 },
		},
		{
			name: "a third permit once one ran out unseen, its holder not listening, is clean",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 100), permit(1, "s", "b", 2, 0, 2, 1000),
				permit(2, "s", "c", 3, 10, 160, 1160),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 },
		},
		{
			name: "a listening holder told of its loss after a permit beyond the limit is a late report",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), ev(OpWatch, 0, "s", "a", 5),
				permit(1, "s", "b", 2, 0, 2, 1000),
				ev(OpRenew, 0, "s", "a", 30), // renewed, expiry unchanged
				permit(2, "s", "c", 3, 10, 60, 1060),
				ev(OpLost, 0, "s", "a", 70),
			},
			want: func(r *Result) bool {
				return len(r.LateReports) == 1 && len(r.OverLimit) == 1
			},
		},
		{
			name: "a listening holder told of its loss before the next permit is clean, and the lead is measured",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), ev(OpWatch, 0, "s", "a", 5),
				permit(1, "s", "b", 2, 0, 2, 1000),
				ev(OpLost, 0, "s", "a", 40),
				permit(2, "s", "c", 3, 10, 60, 1060),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 && len(r.LeadTimes) == 1 && r.LossReports == 1 },
		},
		{
			name: "a listening holder that gave its permit up before the next permit is clean",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), ev(OpWatch, 0, "s", "a", 5),
				permit(1, "s", "b", 2, 0, 2, 1000),
				{Op: OpAbandon, Client: 0, Key: "s", Lease: "a", Call: at(40), Return: at(40)}, // gave it up, no news
				permit(2, "s", "c", 3, 10, 60, 1060),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 },
		},
		{
			name: "a permit whose token is not above an earlier grant's is a token violation",
			events: []Event{
				permit(0, "s", "a", 5, 0, 1, 1000), release(0, "s", "a", 50),
				permit(1, "s", "b", 4, 60, 61, 1060),
			},
			want: func(r *Result) bool { return len(r.TokenViolations) == 1 },
		},
		{
			name: "a force-released permit ends its holder's claim: the next permit is clean",
			events: []Event{
				permit(0, "s", "a", 1, 0, 1, 1000), permit(1, "s", "b", 2, 0, 2, 1000),
				forced("s", 1, 40),
				permit(2, "s", "c", 3, 10, 60, 1060),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 && r.ForcedLeases == 1 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := CheckPermits(tt.events, 2, nil)
			if !tt.want(r) {
				t.Errorf("unexpected result: %+v\nviolations: %q", r, r.Violations())
			}
		})
	}
}

// TestForceReleaseCheck runs the lock checker on made-up histories with
// force-releases: a force-release is judged like any loss for a holder
// reading its KeepAlive stream (told before the next grant, or a late
// report and a double grant), ends the lease of a holder not reading
// without a false violation, while a second grant without one, a stale
// write accepted after the next holder's, or an evicted holder never told
// are found.
func TestForceReleaseCheck(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		fenced map[string][]FencedWrite
		want   func(r *Result) bool
	}{
		{
			name: "a listening holder told of its force-release before the next grant, its late write rejected, is clean",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 5),
				forced("k", 10, 40), ev(OpLost, 0, "k", "a", 43),
				grant(1, "k", "b", 20, 2, 45, 1045), write(1, "k", "b", 20, 50, true),
				write(0, "k", "a", 10, 55, false),
			},
			fenced: map[string][]FencedWrite{"k": {{Lease: "b", Token: 20, Accepted: true}, {Lease: "a", Token: 10}}},
			want: func(r *Result) bool {
				return len(r.Violations()) == 0 && r.ForcedLeases == 1 && r.ForcedHandovers == 1 && r.StaleWritesRejected == 1 &&
					r.LossReports == 1 && len(r.LeadTimes) == 1 && r.LeadTimes[0] == 2*time.Millisecond
			},
		},
		{
			name: "a listening holder told of its force-release after the next grant is a late report and a double grant",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 5),
				forced("k", 10, 40),
				grant(1, "k", "b", 20, 2, 45, 1045),
				ev(OpLost, 0, "k", "a", 60),
			},
			want: func(r *Result) bool {
				return len(r.LateReports) == 1 && len(r.DoubleGrants) == 1 && len(r.ForcedUnreported) == 0 && r.ForcedHandovers == 1
			},
		},
		{
			name: "a holder reading no stream, force-released, then the key granted, its write rejected, is clean",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				forced("k", 10, 40),
				grant(1, "k", "b", 20, 2, 45, 1045), write(1, "k", "b", 20, 50, true),
				write(0, "k", "a", 10, 55, false),
				ev(OpWatch, 0, "k", "a", 57), ev(OpLost, 0, "k", "a", 60),
			},
			fenced: map[string][]FencedWrite{"k": {{Lease: "b", Token: 20, Accepted: true}, {Lease: "a", Token: 10}}},
			want: func(r *Result) bool {
				return len(r.Violations()) == 0 && r.ForcedLeases == 1 && r.ForcedHandovers == 0 && r.StaleWritesRejected == 1
			},
		},
		{
			name: "the same grant without the force-release is a double grant and a late report",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 5),
				grant(1, "k", "b", 20, 2, 45, 1045),
				ev(OpLost, 0, "k", "a", 60),
			},
			want: func(r *Result) bool { return len(r.DoubleGrants) == 1 && len(r.LateReports) == 1 },
		},
		{
			name: "a force-release after the next grant does not excuse it",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				grant(1, "k", "b", 20, 2, 45, 1045),
				forced("k", 10, 50),
			},
			want: func(r *Result) bool { return len(r.DoubleGrants) == 1 },
		},
		{
			name: "the evicted holder's write accepted after the next holder's is out of order",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				forced("k", 10, 40),
				grant(1, "k", "b", 20, 2, 45, 1045), write(1, "k", "b", 20, 50, true),
				write(0, "k", "a", 10, 55, true),
			},
			fenced: map[string][]FencedWrite{"k": {{Lease: "b", Token: 20, Accepted: true}, {Lease: "a", Token: 10, Accepted: true}}},
			want:   func(r *Result) bool { return len(r.OutOfOrder) == 1 },
		},
		{
			name: "an evicted holder listening until its expiry and never told, the key granted meanwhile, is a violation",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 5),
				forced("k", 10, 40),
				grant(1, "k", "b", 20, 2, 45, 1045),
				ev(OpUnwatch, 0, "k", "a", 1500),
			},
			want: func(r *Result) bool {
				return len(r.LateReports) == 1 && len(r.DoubleGrants) == 1 && len(r.ForcedUnreported) == 0
			},
		},
		{
			name: "an evicted holder listening until its expiry and never told is a violation",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 5),
				forced("k", 10, 40),
				ev(OpUnwatch, 0, "k", "a", 1500),
			},
			want: func(r *Result) bool { return len(r.ForcedUnreported) == 1 && len(r.Violations()) == 1 },
		},
		{
			name: "a holder that released before the force-release was not evicted",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), release(0, "k", "a", 30),
				forced("k", 10, 40),
			},
			want: func(r *Result) bool { return r.ForcedLeases == 0 && len(r.Violations()) == 0 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.events, tt.fenced, nil, nil)
			if !tt.want(r) {
				t.Errorf("unexpected result: %+v\nviolations: %q", r, r.Violations())
			}
		})
	}
}
