package redislock_test

import (
	"fmt"
	"testing"

	"github.com/lockd/lockd/internal/redislock"
)

// contractBusyAnswersNameTheHolder: a refused call names an owner holding
// the key — the writer, or one of the readers, also among so many of them
// that the hash is walked in parts.
func contractBusyAnswersNameTheHolder(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	mustAcquire(t, c, redislock.Request{Key: "held/w", Mode: redislock.Write, Owner: "writer-1", TTL: minute})
	for _, mode := range []redislock.Mode{redislock.Write, redislock.Read} {
		if res := mustRefuse(t, c, redislock.Request{Key: "held/w", Mode: mode, Owner: "other", TTL: minute}); res.Holder != "writer-1" {
			t.Fatalf("%v refused by a writer names %q", mode, res.Holder)
		}
	}

	// Enough readers that the hash is no longer small.
	readers := map[string]bool{}
	for i := range 200 {
		owner := fmt.Sprint("reader-", i)
		readers[owner] = true
		mustAcquire(t, c, redislock.Request{Key: "held/r", Mode: redislock.Read, Owner: owner, TTL: minute})
	}
	if res := mustRefuse(t, c, redislock.Request{Key: "held/r", Mode: redislock.Write, Owner: "other", TTL: minute}); !readers[res.Holder] {
		t.Fatalf("a writer refused by readers names %q, not one of them", res.Holder)
	}

}
