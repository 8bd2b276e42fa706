// Package leasetest looks at leases for tests of lockd's lock clients: it
// reads a lease's expiry from Redis (Expiry), and waits for a client
// lease's renewals (Renewals).
package leasetest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/client"
)

// Expiry reads when lease id of key expires from the lock's Redis record
// (the layout is in internal/redislock/common.lua; namespace "lockd"): the
// key's own expiry while a lone lease keeps it as a string, else the
// lease's field of the hash.
func Expiry(ctx context.Context, rdb redis.Cmdable, key, id string) (time.Time, error) {
	record := "lockd:{" + key + "}"
	kind, err := rdb.Type(ctx, record).Result()
	if err != nil {
		return time.Time{}, err
	}
	if kind == "string" {
		v, err := rdb.Get(ctx, record).Result()
		if err != nil {
			return time.Time{}, err
		}
		if f := strings.Split(v, "|"); len(f) < 4 || f[3] != id {
			return time.Time{}, redis.Nil
		}
		at, err := rdb.PExpireTime(ctx, record).Result()
		return time.UnixMilli(at.Milliseconds()), err
	}
	v, err := rdb.HGet(ctx, record, "x:"+id).Result()
	if err != nil {
		return time.Time{}, err
	}
	ms, err := strconv.ParseInt(strings.SplitN(v, "|", 2)[0], 10, 64)
	return time.UnixMilli(ms), err
}

// Renewals waits until l's expiry has moved on n times, failing the test
// if the lease is lost or ctx ends first.
func Renewals(ctx context.Context, tb testing.TB, l *client.Lease, n int) {
	tb.Helper()
	last := l.ExpireTime()
	for n > 0 {
		select {
		case <-l.Lost():
			tb.Fatalf("lease lost with %d renewals to go: %v", n, l.Err())
		case <-ctx.Done():
			tb.Fatalf("%d renewals did not come: %v", n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if exp := l.ExpireTime(); exp.After(last) {
			last, n = exp, n-1
		}
	}
}
