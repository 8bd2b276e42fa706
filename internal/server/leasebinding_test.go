package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestAnotherClientsLeaseIDIsNotFound: billing's prefix covers ledger's
// keys, and billing has learnt the lease ids of ledger's lock, permit and
// leadership. Every call that takes a lease id answers billing exactly as
// for a lease that does not exist, and ledger's leases stay untouched.
func TestAnotherClientsLeaseIDIsNotFound(t *testing.T) {
	t.Parallel()
	r := twoTeams(t, redistest.Start(t), "")
	lc := lockdv1.NewLockServiceClient(r.conn)
	sc := lockdv1.NewSemaphoreServiceClient(r.conn)
	ec := lockdv1.NewElectionServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	billing, ledger := as(ctx, billingToken), as(ctx, ledgerToken)
	const (
		lockKey = "billing-ledger/lock"
		semKey  = "billing-ledger/sem"
		elected = "billing-ledger/leader"
		unknown = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	)

	lock, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: lockKey, Owner: "worker-1", Ttl: durationpb.New(time.Minute)})
	if err != nil || !lock.GetAcquired() {
		t.Fatalf("ledger's Acquire: %v, %v", lock, err)
	}
	permit, err := sc.Acquire(ledger, &lockdv1.SemaphoreServiceAcquireRequest{Key: semKey, Limit: 2, Ttl: durationpb.New(time.Minute)})
	if err != nil || !permit.GetAcquired() {
		t.Fatalf("ledger's permit: %v, %v", permit, err)
	}
	campaignCtx, stopCampaign := context.WithCancel(ledger)
	defer stopCampaign()
	campaign, err := ec.Campaign(campaignCtx, &lockdv1.CampaignRequest{Name: elected, Value: "v1", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	won, err := campaign.Recv()
	if err != nil {
		t.Fatalf("ledger's campaign: %v", err)
	}

	// sameAsUnknown checks that billing's call with ledger's lease id
	// fails as the same call with a made-up lease id does.
	sameAsUnknown := func(what string, call func(leaseID string) error, leaseID string) {
		t.Helper()
		theirs, made := call(leaseID), call(unknown)
		if status.Code(theirs) != codes.NotFound {
			t.Errorf("billing %s with ledger's lease id: %v, want NOT_FOUND", what, theirs)
		}
		if status.Code(made) != codes.NotFound || status.Convert(theirs).Message() != status.Convert(made).Message() {
			t.Errorf("billing %s: ledger's lease id answers %v, a made-up one %v: they must not differ", what, theirs, made)
		}
	}
	keepAlive := func(key string) func(string) error {
		return func(id string) error {
			s, err := lc.KeepAlive(billing, &lockdv1.KeepAliveRequest{Key: key, LeaseId: id, ReleaseOnClose: true})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}
	}
	for _, l := range []struct {
		what, key, id string
	}{
		{"the lock", lockKey, lock.GetLease().GetLeaseId()},
		{"the permit", semKey, permit.GetLease().GetLeaseId()},
		{"the leadership", elected, won.GetLeader().GetLeaseId()},
	} {
		sameAsUnknown("releasing "+l.what, func(id string) error {
			_, err := lc.Release(billing, &lockdv1.ReleaseRequest{Key: l.key, LeaseId: id})
			return err
		}, l.id)
		sameAsUnknown("renewing "+l.what, func(id string) error {
			_, err := lc.Renew(billing, &lockdv1.RenewRequest{Key: l.key, LeaseId: id, Ttl: durationpb.New(time.Second)})
			return err
		}, l.id)
		sameAsUnknown("keeping "+l.what+" alive", keepAlive(l.key), l.id)
	}
	sameAsUnknown("proclaiming", func(id string) error {
		_, err := ec.Proclaim(billing, &lockdv1.ProclaimRequest{Name: elected, LeaseId: id, Value: "billing's"})
		return err
	}, won.GetLeader().GetLeaseId())
	sameAsUnknown("resigning", func(id string) error {
		_, err := ec.Resign(billing, &lockdv1.ResignRequest{Name: elected, LeaseId: id})
		return err
	}, won.GetLeader().GetLeaseId())

	// ledger's leases are as it left them: one hold each, its value, its
	// ttl (billing's 1s Renew did not shorten them).
	renewed, err := lc.Renew(ledger, &lockdv1.RenewRequest{Key: lockKey, LeaseId: lock.GetLease().GetLeaseId()})
	if err != nil || renewed.GetLease().GetHoldCount() != 1 || renewed.GetLease().GetTtl().AsDuration() != time.Minute {
		t.Fatalf("ledger's lock after billing's tries: %v, %v", renewed, err)
	}
	if rel, err := lc.Release(ledger, &lockdv1.ReleaseRequest{Key: semKey, LeaseId: permit.GetLease().GetLeaseId()}); err != nil || rel.GetHoldCount() != 0 {
		t.Fatalf("ledger's permit after billing's tries: %v, %v", rel, err)
	}
	leader, err := ec.Leader(ledger, &lockdv1.LeaderRequest{Name: elected})
	if err != nil || leader.GetLeader().GetValue() != "v1" {
		t.Fatalf("the leader after billing's tries: %v, %v", leader, err)
	}
	if _, err := ec.Resign(ledger, &lockdv1.ResignRequest{Name: elected, LeaseId: won.GetLeader().GetLeaseId()}); err != nil {
		t.Fatalf("ledger resigning: %v", err)
	}
}
