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

// TestElectionsAndHoldersAcrossTeams: an election's name is authorized by
// the client's lock prefixes, and what one team sees of another's holds (a
// busy key's holder, an election's leader) is the owner as that team named
// it: never its client's name nor its lease id.
func TestElectionsAndHoldersAcrossTeams(t *testing.T) {
	t.Parallel()
	r := twoTeams(t, redistest.Start(t), "")
	lc := lockdv1.NewLockServiceClient(r.conn)
	ec := lockdv1.NewElectionServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	billing, ledger := as(ctx, billingToken), as(ctx, ledgerToken)

	// billing's prefix covers ledger's keys: it holds one of them.
	held, err := lc.Acquire(billing, &lockdv1.AcquireRequest{Key: "billing-ledger/close", Owner: "closer-1", Ttl: durationpb.New(time.Minute)})
	if err != nil || !held.GetAcquired() {
		t.Fatal(held, err)
	}
	busy, err := lc.WLock(ledger, &lockdv1.WLockRequest{Key: "billing-ledger/close", Owner: "w"})
	if err != nil || busy.GetAcquired() || busy.GetHolder() != "closer-1" {
		t.Fatalf("ledger's busy WLock = %v, %v; want holder closer-1", busy, err)
	}

	st, err := ec.Campaign(billing, &lockdv1.CampaignRequest{Name: "billing-ledger/leader", Value: "10.1.1.1", Owner: "sched-1"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil || first.GetLeader().GetOwner() != "sched-1" || first.GetLeader().GetLeaseId() == "" {
		t.Fatalf("billing's Campaign = %v, %v", first, err)
	}
	ld, err := ec.Leader(ledger, &lockdv1.LeaderRequest{Name: "billing-ledger/leader"})
	if err != nil || ld.GetLeader().GetOwner() != "sched-1" || ld.GetLeader().GetLeaseId() != "" || ld.GetLeader().GetValue() != "10.1.1.1" {
		t.Fatalf("ledger's Leader = %v, %v", ld, err)
	}
	rl, err := lc.RLock(ledger, &lockdv1.RLockRequest{Key: "billing-ledger/leader", Owner: "r"})
	if err != nil || rl.GetAcquired() || rl.GetHolder() != "sched-1" {
		t.Fatalf("ledger's RLock of the election = %v, %v; want holder sched-1", rl, err)
	}

	// ledger may not take part in elections outside its prefix.
	for what, call := range map[string]func() error{
		"Campaign": func() error {
			s, err := ec.Campaign(ledger, &lockdv1.CampaignRequest{Name: "billing/leader"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"Leader": func() error {
			_, err := ec.Leader(ledger, &lockdv1.LeaderRequest{Name: "billing/leader"})
			return err
		},
		"Observe": func() error {
			s, err := ec.Observe(ledger, &lockdv1.ObserveRequest{Name: "billing/leader"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"Proclaim": func() error {
			_, err := ec.Proclaim(ledger, &lockdv1.ProclaimRequest{Name: "billing/leader", LeaseId: "x", Value: "v"})
			return err
		},
		"Resign": func() error {
			_, err := ec.Resign(ledger, &lockdv1.ResignRequest{Name: "billing/leader", LeaseId: "x"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("ledger's %s outside its prefix: %v, want PERMISSION_DENIED", what, err)
		}
	}
	if _, err := ec.Leader(ctx, &lockdv1.LeaderRequest{Name: "billing-ledger/leader"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Leader without a token: %v, want UNAUTHENTICATED", err)
	}

	// Semaphore keys are lock keys: the same prefixes, the same owners.
	sc := lockdv1.NewSemaphoreServiceClient(r.conn)
	if _, err := sc.Acquire(ledger, &lockdv1.SemaphoreServiceAcquireRequest{Key: "billing/permits", Limit: 1}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ledger's permit outside its prefix: %v, want PERMISSION_DENIED", err)
	}
	p, err := sc.Acquire(ledger, &lockdv1.SemaphoreServiceAcquireRequest{Key: "billing-ledger/permits", Limit: 1, Owner: "worker-1"})
	if err != nil || !p.GetAcquired() || p.GetLease().GetOwner() != "worker-1" {
		t.Fatalf("ledger's permit = %v, %v", p, err)
	}
	// billing naming ledger's owner gets no share of ledger's permit.
	if q, err := sc.Acquire(billing, &lockdv1.SemaphoreServiceAcquireRequest{Key: "billing-ledger/permits", Limit: 1, Owner: "worker-1"}); err != nil || q.GetAcquired() {
		t.Errorf("billing naming ledger's owner = %v, %v; want refused", q, err)
	}
}
