package faults

import "fmt"

// OpForced is an admin ending a lease (AdminService.ForceRelease): Key and
// Token name the lease ended (ForceRelease never shows lease ids), Call
// and Return bound the call. A holder reading its KeepAlive stream at the
// call must be told (NOT_FOUND) before the key is granted again, as of any
// loss: its lease is judged like any other lost lease. A holder reading no
// stream cannot know before lockd tells it, which is what fencing tokens
// are for: it stops being certain of the lease from the call on, so a
// grant of the key after the call is no double grant, and a write of the
// evicted holder accepted after a later token's is still out of order.
const OpForced = OpWrite + 1

func init() { opNames[OpForced] = "forced" }

// keyToken names a lease by its key and fencing token.
type keyToken struct {
	key   string
	token uint64
}

// checkForced counts the leases an admin ended while their holder still
// claimed them, and, of those not judged against a next grant already,
// finds those whose holder read a KeepAlive stream from the force-release
// until the expiry it last knew without being told of the loss: lockd must
// tell it (NOT_FOUND) while it listens.
func checkForced(r *Result, holds []*hold) {
	for _, h := range holds {
		if h.forced.IsZero() || (!h.end.IsZero() && h.end.Before(h.forced)) {
			continue
		}
		r.ForcedLeases++
		if h.judged || !h.lost.IsZero() || !h.watchedAt(h.forced) || !h.watchedAt(h.expire.Add(-clockSlack)) {
			continue
		}
		r.ForcedUnreported = append(r.ForcedUnreported, fmt.Sprintf(
			"key %q: lease %s (token %d) was force-released at %s; its holder read its KeepAlive stream until its expiry %s and was never told",
			shortKey(h.key), short(h.lease), h.token, stamp(h.forced), stamp(h.expire)))
	}
}
