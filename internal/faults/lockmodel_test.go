package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// held is a grant answered with holds holds, made by Redis at made (ms)
// with a ttl of ttl ms: it expires at made+ttl.
func held(client int, lease string, token uint64, call, made, ret, ttl int, holds uint32) Event {
	return Event{Op: OpAcquire, Client: client, Key: "k", Lease: lease, Token: token, Write: true, OK: true,
		Call: at(call), Return: at(ret), Expire: at(made + ttl), TTL: time.Duration(ttl) * time.Millisecond, HoldCount: holds}
}

// released is a Release answered OK with holds left.
func released(client int, lease string, call, ret int, holds uint32) Event {
	return Event{Op: OpRelease, Client: client, Key: "k", Lease: lease, Write: true, Call: at(call), Return: at(ret), HoldCount: holds}
}

// renewed is a renewal Redis made at made (ms) for ttl ms, heard at heard.
func renewed(client int, lease string, made, heard, ttl int) Event {
	return Event{Op: OpRenew, Client: client, Key: "k", Lease: lease, Write: true, Call: at(heard), Return: at(heard),
		Expire: at(made + ttl), TTL: time.Duration(ttl) * time.Millisecond}
}

// TestLockModel checks made-up histories of one key against the lock
// model: each built to hold or to break one promise.
func TestLockModel(t *testing.T) {
	notFound := func(e Event) Event { e.Err, e.HoldCount = "NotFound", 0; return e }
	failed := func(e Event) Event { e.Err, e.OK, e.Lease = "Unavailable", false, ""; return e }
	retried := func(e Event, since int) Event { e.Since = at(since); return e }
	tests := []struct {
		name   string
		events []Event
		want   porcupine.CheckResult
	}{
		{"grants, a renewal, a re-entry and releases in turn", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), renewed(0, "a", 300, 305, 1000),
			held(0, "a", 10, 310, 311, 312, 1000, 2), released(0, "a", 400, 401, 1), released(0, "a", 402, 403, 0),
			held(1, "b", 20, 405, 406, 407, 1000, 1), released(1, "b", 500, 501, 0),
		}, porcupine.Ok},
		{"one Release that takes two holds", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), held(0, "a", 10, 10, 11, 12, 1000, 2),
			released(0, "a", 20, 5020, 0),
		}, porcupine.Illegal},
		{"one re-entry that adds two holds", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), held(0, "a", 10, 10, 11, 5012, 1000, 3),
		}, porcupine.Illegal},
		{"a new lease with two holds", []Event{
			held(0, "a", 10, 0, 1, 5002, 1000, 2),
		}, porcupine.Illegal},
		{"a new lease while another runs", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), held(1, "b", 20, 50, 51, 52, 1000, 1),
		}, porcupine.Illegal},
		{"a renewal of a lease after another was granted the key", []Event{
			held(0, "a", 10, 0, 1, 2, 100, 1), held(1, "b", 20, 150, 151, 152, 1000, 1),
			renewed(0, "a", 200, 201, 100),
		}, porcupine.Illegal},
		{"a renewal heard late, made before the release", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), released(0, "a", 100, 101, 0),
			held(1, "b", 20, 110, 111, 112, 1000, 1), renewed(0, "a", 50, 300, 1000),
		}, porcupine.Ok},
		{"a Release answered OK once the lease ran out", []Event{
			held(0, "a", 10, 0, 1, 2, 100, 1), released(0, "a", 200, 201, 0),
		}, porcupine.Illegal},
		{"NOT_FOUND to a Release of a lease still running", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), notFound(released(0, "a", 200, 201, 0)),
		}, porcupine.Illegal},
		{"NOT_FOUND to a Release of a lease run out", []Event{
			held(0, "a", 10, 0, 1, 2, 100, 1), notFound(released(0, "a", 200, 201, 0)),
		}, porcupine.Ok},
		{"a token not above the last", []Event{
			held(0, "a", 10, 0, 1, 2, 100, 1), released(0, "a", 20, 21, 0), held(1, "b", 5, 30, 31, 32, 100, 1),
		}, porcupine.Illegal},
		{"a failed Release may have ended the lease", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), failed(released(0, "a", 20, 3020, 0)),
			held(1, "b", 20, 3030, 3031, 3032, 1000, 1),
		}, porcupine.Ok},
		{"a retried Release answered OK after the key was granted again", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), failed(released(0, "a", 20, 25, 0)),
			held(1, "b", 20, 22, 23, 30, 1000, 1), retried(released(0, "a", 40, 45, 0), 20),
		}, porcupine.Ok},
		{"a Release answered OK after the key was granted again", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), failed(released(0, "a", 20, 25, 0)),
			held(1, "b", 20, 22, 23, 30, 1000, 1), released(0, "a", 40, 45, 0),
		}, porcupine.Illegal},
		{"a failed re-entry leaves the hold count open", []Event{
			held(0, "a", 10, 0, 1, 2, 10000, 1), failed(held(0, "a", 10, 10, 11, 3012, 10000, 2)),
			released(0, "a", 3020, 3021, 1), released(0, "a", 3022, 3023, 0),
		}, porcupine.Ok},
		{"a new lease after a fault that may lose data", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), {Op: OpDataLoss, Client: -1, Call: at(100), Return: at(200)},
			held(1, "b", 20, 300, 301, 302, 1000, 1), notFound(released(0, "a", 400, 401, 0)),
		}, porcupine.Ok},
		{"a new lease after a force-release", []Event{
			held(0, "a", 10, 0, 1, 2, 1000, 1), forced("k", 10, 100),
			held(1, "b", 20, 110, 111, 112, 1000, 1),
		}, porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkLockModel(tt.events); got != tt.want {
				t.Errorf("porcupine says %v, want %v", got, tt.want)
			}
		})
	}
}
