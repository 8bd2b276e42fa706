package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// at returns the base time plus ms milliseconds.
func at(ms int) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

// grant is a write grant to client of lease with token, called at call,
// answered at ret, expiring at exp.
func grant(client int, key, lease string, token uint64, call, ret, exp int) Event {
	return Event{Op: OpAcquire, Client: client, Key: key, Lease: lease, Token: token, Write: true, OK: true, Call: at(call), Return: at(ret), Expire: at(exp)}
}

func release(client int, key, lease string, call int) Event {
	return Event{Op: OpRelease, Client: client, Key: key, Lease: lease, Write: true, Final: true, Call: at(call), Return: at(call + 1)}
}

func ev(op Op, client int, key, lease string, ms int) Event {
	return Event{Op: op, Client: client, Key: key, Lease: lease, Write: true, Call: at(ms), Return: at(ms)}
}

func write(client int, key, lease string, token uint64, ms int, ok bool) Event {
	return Event{Op: OpWrite, Client: client, Key: key, Lease: lease, Token: token, Write: true, Call: at(ms), Return: at(ms + 1), OK: ok}
}

// TestCheck runs the checker on small made-up histories, each built to
// hold or to break one promise, and counts what it finds.
func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		events   []Event
		fenced   map[string][]FencedWrite
		overlaps []Overlap
		windows  []Window
		want     func(r *Result) bool
	}{
		{
			name: "a handoff after a release is clean",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), release(0, "k", "a", 50),
				grant(1, "k", "b", 20, 2, 60, 1060), release(1, "k", "b", 100),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 && r.Holds == 2 && r.Calls == 4 },
		},
		{
			name: "a grant while the earlier lease still runs is a double grant",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				grant(1, "k", "b", 20, 2, 60, 1060),
			},
			want: func(r *Result) bool {
				return len(r.DoubleGrants) == 1 && r.LockLinearizable == porcupine.Illegal && len(r.Violations()) == 2
			},
		},
		{
			name: "a grant once the earlier lease expired is clean",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 100),
				grant(1, "k", "b", 20, 2, 101, 1100),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 },
		},
		{
			name: "a grant whose reply came after its own expiry was never certain",
			events: []Event{
				grant(0, "k", "a", 20, 900, 901, 2000),
				grant(1, "k", "b", 10, 0, 950, 100),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 },
		},
		{
			name: "a double grant inside a data-loss window is counted apart",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				grant(1, "k", "b", 20, 2, 60, 1060),
			},
			windows: []Window{{From: at(50), To: at(70), Why: "failover"}},
			want:    func(r *Result) bool { return len(r.Violations()) == 0 && r.WindowGrants == 1 },
		},
		{
			name: "a loss reported before the next grant gives a lead time",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 2),
				{Op: OpDataLoss, Client: -1, Call: at(250), Return: at(260)}, ev(OpLost, 0, "k", "a", 300),
				grant(1, "k", "b", 20, 2, 400, 1400),
			},
			want: func(r *Result) bool {
				return len(r.Violations()) == 0 && r.LossReports == 1 && len(r.LeadTimes) == 1 && r.LeadTimes[0] == 100*time.Millisecond
			},
		},
		{
			name: "a loss reported after the next grant, before the holder's expiry, is late",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000), ev(OpWatch, 0, "k", "a", 2),
				grant(1, "k", "b", 20, 2, 400, 1400),
				ev(OpLost, 0, "k", "a", 450),
			},
			want: func(r *Result) bool { return len(r.LateReports) == 1 && len(r.DoubleGrants) == 1 },
		},
		{
			name: "a loss reported after the next grant but after the holder's own expiry is counted apart",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 300), ev(OpWatch, 0, "k", "a", 2),
				grant(1, "k", "b", 20, 2, 400, 1400),
				ev(OpLost, 0, "k", "a", 450),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 && r.ReportsAfterExpiry == 1 },
		},
		{
			name: "a loss never reported to a reading holder is late too",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 300), ev(OpWatch, 0, "k", "a", 2),
				grant(1, "k", "b", 20, 2, 400, 1400),
				release(0, "k", "a", 500),
			},
			want: func(r *Result) bool { return len(r.LateReports) == 1 },
		},
		{
			name: "a holder whose stream broke cannot be told",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 300), ev(OpWatch, 0, "k", "a", 2), ev(OpUnwatch, 0, "k", "a", 100),
				grant(1, "k", "b", 20, 2, 400, 1400),
			},
			want: func(r *Result) bool { return len(r.Violations()) == 0 },
		},
		{
			name: "a token not above one granted before is a violation",
			events: []Event{
				grant(0, "k", "a", 20, 0, 1, 100), release(0, "k", "a", 50),
				grant(1, "k", "b", 10, 60, 61, 200),
			},
			want: func(r *Result) bool {
				return len(r.TokenViolations) == 1 && r.TokensLinearizable == porcupine.Illegal
			},
		},
		{
			name: "concurrent grants may get their tokens in either order",
			events: []Event{
				grant(0, "k", "a", 20, 0, 10, 5), release(0, "k", "a", 5),
				grant(1, "k", "b", 10, 1, 11, 12),
			},
			want: func(r *Result) bool { return len(r.TokenViolations) == 0 && r.TokensLinearizable == porcupine.Ok },
		},
		{
			name: "a write accepted below an accepted token is out of fencing order",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 100), write(0, "k", "a", 10, 2, true),
				grant(1, "k", "b", 20, 2, 101, 200), write(1, "k", "b", 20, 102, true),
				write(0, "k", "a", 10, 150, true),
			},
			fenced: map[string][]FencedWrite{"k": {{"a", 10, true}, {"b", 20, true}, {"a", 10, true}}},
			want: func(r *Result) bool {
				return len(r.OutOfOrder) == 1 && r.FencedLinearizable == porcupine.Illegal
			},
		},
		{
			name: "a stale write rejected is counted, not a violation",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 100), write(0, "k", "a", 10, 2, true),
				grant(1, "k", "b", 20, 2, 101, 200), write(1, "k", "b", 20, 102, true),
				write(0, "k", "a", 10, 150, false),
			},
			fenced: map[string][]FencedWrite{"k": {{"a", 10, true}, {"b", 20, true}, {"a", 10, false}}},
			want: func(r *Result) bool {
				return len(r.Violations()) == 0 && r.StaleWritesRejected == 1 && r.FencedLinearizable == porcupine.Ok
			},
		},
		{
			name: "an overlap with a writer past its expiry is stale",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 100),
				grant(1, "k", "b", 20, 2, 101, 200),
			},
			overlaps: []Overlap{{Key: "k", Inside: "a", Entering: "b", At: at(120)}},
			want:     func(r *Result) bool { return len(r.Violations()) == 0 && r.StaleOverlaps == 1 },
		},
		{
			name: "an overlap of two valid holders is a violation, once per pair",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				grant(1, "k", "b", 20, 2, 101, 1200),
			},
			overlaps: []Overlap{
				{Key: "k", Inside: "a", Entering: "b", At: at(120)},
				{Key: "k", Inside: "b", Entering: "a", At: at(130)},
			},
			want: func(r *Result) bool { return len(r.OverlapViolations) == 1 && r.Overlaps == 2 },
		},
		{
			name: "failed calls are counted, and a failed final release still ends the claim",
			events: []Event{
				grant(0, "k", "a", 10, 0, 1, 1000),
				{Op: OpRelease, Client: 0, Key: "k", Lease: "a", Write: true, Final: true, Call: at(50), Return: at(60), Err: "Unavailable"},
				grant(1, "k", "b", 20, 2, 70, 1070),
			},
			want: func(r *Result) bool { return r.FailedCalls == 1 && len(r.Violations()) == 0 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.events, tt.fenced, tt.overlaps, tt.windows)
			if !tt.want(r) {
				t.Errorf("unexpected result: %+v\nviolations: %q", r, r.Violations())
			}
		})
	}
}
