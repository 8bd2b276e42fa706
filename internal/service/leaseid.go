package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"

	"github.com/lockd/lockd/internal/auth"
)

// A lease belongs to the client it was granted to (SPEC §2). With
// authentication on, a lease id is 128 random bits and a tag binding them
// to the client's name, both URL-safe base64: <random 22><tag 16>, the tag
// being the first 96 bits of SHA-256 over the client's name and the random
// part. Redis stores the whole id, so a client that learnt another's lease
// id can neither use it (its tag names the other client) nor re-tag it (a
// re-tagged id names no lease). A lease id that is not the caller's is
// answered as a lease that does not exist, before Redis is asked, so the
// answer tells nothing about the other client's lease.

const (
	leaseRandomChars = 22 // 16 bytes
	leaseTagBytes    = 12
)

// newLeaseIDFor returns the engine's maker of lease ids for the caller:
// nil (the engine's own random ids) without authentication.
func newLeaseIDFor(ctx context.Context) func() string {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return nil
	}
	return func() string {
		var b [16]byte
		_, _ = rand.Read(b[:])
		random := base64.RawURLEncoding.EncodeToString(b[:])
		return random + leaseTag(id.Name, random)
	}
}

// callersLease reports whether leaseID may name a lease of the caller: any
// id without authentication, else only one bound to the caller's client.
func callersLease(ctx context.Context, leaseID string) bool {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return true
	}
	if len(leaseID) != leaseRandomChars+base64.RawURLEncoding.EncodedLen(leaseTagBytes) {
		return false
	}
	random, tag := leaseID[:leaseRandomChars], leaseID[leaseRandomChars:]
	return subtle.ConstantTimeCompare([]byte(tag), []byte(leaseTag(id.Name, random))) == 1
}

func leaseTag(client, random string) string {
	sum := sha256.Sum256([]byte("lockd lease\x00" + client + "\x00" + random))
	return base64.RawURLEncoding.EncodeToString(sum[:leaseTagBytes])
}
