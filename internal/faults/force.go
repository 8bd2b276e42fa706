package faults

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// ForceRelease has an admin end every lease of key (AdminService.ForceRelease
// with no owner) and records each lease it ended as an [OpForced] event. It
// returns how many leases ended; NOT_FOUND (no lease held) is 0 without an
// error.
func (r *Run) ForceRelease(ctx context.Context, admin lockdv1.AdminServiceClient, key string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	call := time.Now()
	res, err := admin.ForceRelease(cctx, &lockdv1.ForceReleaseRequest{Key: key})
	ret := time.Now()
	switch {
	case status.Code(err) == codes.NotFound:
		return 0, nil
	case err != nil:
		return 0, err
	}
	for _, h := range res.GetReleased() {
		r.History.Add(Event{Op: OpForced, Client: -1, Key: key, Token: h.GetFencingToken(), Write: h.GetMode() != lockdv1.LockMode_LOCK_MODE_READ, Call: call, Return: ret})
	}
	return len(res.GetReleased()), nil
}
