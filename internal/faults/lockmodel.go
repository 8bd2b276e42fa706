package faults

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpDataLoss is a fault that may have lost Redis data (a restart without
// persistence or from an older snapshot, a failover), between Call and
// Return; it belongs to every key.
const OpDataLoss = OpForced + 1

func init() { opNames[OpDataLoss] = "data-loss" }

// The lock as a sequential object, for porcupine. Every answer of lockd
// that grants or renews a lease carries its expiry and ttl, so Redis's
// clock when it acted (expire - ttl) is known exactly; the model checks
// each operation at that time. Answers that carry no time (Release, a
// NOT_FOUND) are checked against their call's span, local time and Redis
// time being one clock on one host. Only write holds (locks, leaderships)
// are modelled; what the history cannot know is left open:
//
//   - a call that failed may or may not have acted: a failed Acquire by
//     the holder's client leaves its hold count unknown; a failed Release
//     by it may have ended the lease;
//   - a lease its holder let go of without an answer (a stream closed that
//     releases on close, a lease abandoned) and every lease across a fault
//     that may lose data may be gone at any time after;
//   - a report that a lease is lost is no state change: lockd may give up
//     on a lease before it runs out, never grant it sooner.
//
// Then a history is linearizable when some order of its operations, each
// inside its span, gives: a new lease only on a key whose lease has run
// out, been released or may be gone, with a fencing token above every one
// before; a re-entry only of the lease held, adding one hold, never
// shortening it; a Release answered OK only of the lease held, taking one
// hold; NOT_FOUND to a Release only for a lease not held or run out by the
// answer; a renewal only of the lease held and not run out.

// lockOpKind is what a modelled operation did.
type lockOpKind uint8

const (
	lockGrant     lockOpKind = iota + 1 // a grant (new lease or re-entry)
	lockRelease                         // a Release answered OK
	lockNotHeld                         // a Release answered NOT_FOUND
	lockRenew                           // a renewal (KeepAlive message, Renew answer)
	lockForced                          // an admin's ForceRelease
	lockMaybeGone                       // the lease may be gone from now on
	lockMaybeHeld                       // a failed Acquire: the holder's count is unknown
	lockDataLoss                        // a fault that may lose data
)

// lockOp is one modelled operation on a key.
type lockOp struct {
	key    string // "" for every key
	kind   lockOpKind
	client int
	lease  string
	token  uint64
	holds  uint32 // hold count answered, 0 when unknown
	expire int64  // expiry answered (ns, Redis clock)
	at     int64  // when Redis acted (ns), 0 when unknown
	call   int64  // when the call was made (ns)
	ret    int64  // when the answer came (ns)
}

// lockState is the model's state of one key.
type lockState struct {
	lease  string // the write lease holding the key, "" for none
	client int    // its holder
	expire int64  // its expiry
	holds  uint32 // its hold count, 0 when unknown
	unsure bool   // it may be gone
	token  uint64 // the highest fencing token granted
	clock  int64  // the latest time Redis acted at, of those known
}

const slackNs = int64(clockSlack)

// step applies op to s: whether op is possible in s, and the state after.
func (s lockState) step(op lockOp) (bool, lockState) {
	switch op.kind {
	case lockGrant:
		if op.lease == s.lease {
			// A re-entry: the lease is held, not run out when Redis acted
			// (op.at bounds that from above; with the expiry never
			// shortened it stays below a live lease's expiry).
			if !s.unsure && s.expire <= max(s.clock, op.at)-slackNs {
				return false, s
			}
			if s.holds > 0 && op.holds > 0 && op.holds != s.holds+1 || !s.unsure && op.expire < s.expire-slackNs {
				return false, s
			}
			s.holds, s.expire = op.holds, max(s.expire, op.expire)
			return true, s
		}
		// A new lease: at op.at (or, unknown, by the answer), nobody
		// else holds the key.
		at := op.at
		if at == 0 {
			at = max(s.clock, op.ret)
		}
		if at < s.clock-slackNs || op.token <= s.token || op.holds > 1 {
			return false, s
		}
		if s.lease != "" && !s.unsure && s.expire > at+slackNs {
			return false, s
		}
		return true, lockState{lease: op.lease, client: op.client, expire: op.expire, holds: op.holds, token: op.token, clock: max(s.clock, op.at)}
	case lockRelease:
		if op.lease != s.lease {
			return s.unsure && s.lease == "", s
		}
		// Held when the call was made (or at the latest time Redis acted).
		if !s.unsure && s.expire <= max(s.clock, op.call)-slackNs || s.holds > 0 && op.holds != s.holds-1 {
			return false, s
		}
		if op.holds == 0 {
			return true, lockState{token: s.token, clock: s.clock}
		}
		s.holds = op.holds
		return true, s
	case lockNotHeld:
		return op.lease != s.lease || s.unsure || s.expire <= op.ret+slackNs, s
	case lockRenew:
		if op.lease != s.lease {
			return false, s
		}
		if op.at < s.clock-slackNs || !s.unsure && s.expire <= op.at-slackNs {
			return false, s
		}
		s.expire, s.clock = op.expire, max(s.clock, op.at)
		return true, s
	case lockForced:
		if s.lease != "" && op.token == s.token {
			return true, lockState{token: s.token, clock: s.clock}
		}
		return true, s
	case lockMaybeGone:
		if op.lease == s.lease {
			s.unsure, s.holds = true, 0
		}
		return true, s
	case lockMaybeHeld:
		if op.client == s.client {
			s.holds = 0
		}
		return true, s
	case lockDataLoss:
		s.unsure, s.holds = true, 0
		return true, s
	}
	return false, s
}

// lockModel is the lock, per key, for porcupine.
var lockModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		var everyKey []porcupine.Operation
		for _, op := range history {
			k := op.Input.(lockOp).key
			if k == "" {
				everyKey = append(everyKey, op)
				continue
			}
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			part := byKey[k]
			for _, op := range everyKey {
				op.Input = lockOp{key: k, kind: lockDataLoss, ret: op.Return}
				part = append(part, op)
			}
			out = append(out, part)
		}
		return out
	},
	Init: func() any { return lockState{} },
	Step: func(state, input, _ any) (bool, any) {
		return state.(lockState).step(input.(lockOp))
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(lockOp)
		return fmt.Sprintf("%v lease %s token %d holds %d expire %s at %s", op.kind, short(op.lease), op.token, op.holds,
			stamp(time.Unix(0, op.expire)), stamp(time.Unix(0, op.at)))
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("lease %s holds %d expire %s unsure %v token %d", short(s.lease), s.holds, stamp(time.Unix(0, s.expire)), s.unsure, s.token)
	},
}

// String names the kind.
func (k lockOpKind) String() string {
	return [...]string{"?", "grant", "release", "not-held", "renew", "forced", "maybe-gone", "maybe-held", "data-loss"}[k]
}

// lockOperations turns a history's events into the lock model's
// operations: write holds only.
func lockOperations(events []Event) []porcupine.Operation {
	var ops []porcupine.Operation
	add := func(e Event, op lockOp, call time.Time) {
		ret := e.Return
		if call.After(ret) {
			call = ret
		}
		op.call, op.ret = call.UnixNano(), ret.UnixNano()
		ops = append(ops, porcupine.Operation{ClientId: max(e.Client, 0), Input: op, Call: call.UnixNano(), Return: op.ret})
	}
	// acted is when Redis made a lease or renewal the event answers, or
	// zero when the answer does not tell.
	acted := func(e Event) time.Time {
		if e.TTL <= 0 || e.Expire.IsZero() {
			return time.Time{}
		}
		return e.Expire.Add(-e.TTL)
	}
	for _, e := range events {
		if !e.Write && e.Op != OpDataLoss {
			continue
		}
		op := lockOp{key: e.Key, client: e.Client, lease: e.Lease, token: e.Token, holds: e.HoldCount, expire: e.Expire.UnixNano()}
		call := e.Call
		switch {
		case e.Op == OpDataLoss:
			op.key, op.kind = "", lockDataLoss
		case e.Op == OpAcquire && e.OK:
			op.kind = lockGrant
			if at := acted(e); !at.IsZero() {
				op.at = at.UnixNano()
				// A grant replayed to a retry was made before the retry.
				if at.Before(call) {
					call = at
				}
			}
		case e.Op == OpAcquire && e.Err != "":
			op.kind = lockMaybeHeld
		case e.Op == OpRelease && e.Err == "" && !e.Async:
			op.kind = lockRelease
			if !e.Since.IsZero() {
				// A retry answers what its request's first try did,
				// which may have ended the hold from then on.
				call = e.Since
			}
		case e.Op == OpRelease && e.Err == "NotFound":
			op.kind = lockNotHeld
		case e.Op == OpRelease || e.Op == OpAbandon:
			op.kind = lockMaybeGone
		case e.Op == OpRenew && e.Err == "" && !e.Expire.IsZero():
			at := acted(e)
			if at.IsZero() {
				continue
			}
			op.kind, op.at, call = lockRenew, at.UnixNano(), at
		case e.Op == OpForced:
			op.kind = lockForced
		default:
			continue
		}
		add(e, op, call)
	}
	return ops
}

// checkLockModel checks the history against the lock model.
func checkLockModel(events []Event) porcupine.CheckResult {
	res, _ := checkLockModelVerbose(events)
	return res
}

// checkLockModelVerbose is checkLockModel with what porcupine found, for
// VisualizeLock.
func checkLockModelVerbose(events []Event) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(lockModel, lockOperations(events), porcupineTimeout)
}

// VisualizeLock writes porcupine's picture of the lock model's check
// (HTML: the operations of each key on a time line, and where no order of
// them fits the model), for reading what happened around a violation.
func (r *Result) VisualizeLock(path string) error {
	return porcupine.VisualizePath(lockModel, r.lockInfo, path)
}

// LostData records that the fault a scenario injected from from until now
// may have lost Redis data (see OpDataLoss).
func (r *Run) LostData(from time.Time) {
	r.History.Add(Event{Op: OpDataLoss, Client: -1, Call: from, Return: time.Now()})
}
