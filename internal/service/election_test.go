package service_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/grpctest"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// coordInstance is one lockd serving LockService, ElectionService and
// SemaphoreService over bufconn.
type coordInstance struct {
	conn   *grpc.ClientConn
	locks  lockdv1.LockServiceClient
	elect  lockdv1.ElectionServiceClient
	sem    lockdv1.SemaphoreServiceClient
	server *service.LockServer
}

func startCoordination(t *testing.T, rdb redis.UniversalClient, bounds service.Bounds) coordInstance {
	t.Helper()
	engine := redislock.New(rdb, redislock.Options{})
	srv := service.NewLockServer(engine, bounds, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = engine.Close() })
	conn := serve(t, func(gs *grpc.Server) {
		lockdv1.RegisterLockServiceServer(gs, srv)
		lockdv1.RegisterElectionServiceServer(gs, service.NewElectionServer(srv))
		lockdv1.RegisterSemaphoreServiceServer(gs, service.NewSemaphoreServer(srv))
	})
	return coordInstance{conn: conn, locks: lockdv1.NewLockServiceClient(conn), elect: lockdv1.NewElectionServiceClient(conn),
		sem: lockdv1.NewSemaphoreServiceClient(conn), server: srv}
}

// stream reads a server stream in the background, so a test can wait for
// its next message or its end.
type stream[M any] struct {
	msgs chan M
	end  chan error
}

func follow[M any](recv func() (M, error)) *stream[M] {
	s := &stream[M]{msgs: make(chan M, 100), end: make(chan error, 1)}
	go func() {
		for {
			m, err := recv()
			if err != nil {
				s.end <- err
				return
			}
			s.msgs <- m
		}
	}()
	return s
}

func (s *stream[M]) next(t *testing.T, what string) M {
	t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case err := <-s.end:
		t.Fatalf("waiting for %s: the stream ended: %v", what, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("waiting for %s: nothing came", what)
	}
	var zero M
	return zero
}

func (s *stream[M]) ended(t *testing.T, what string) error {
	t.Helper()
	for {
		select {
		case <-s.msgs:
		case err := <-s.end:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("waiting for %s: the stream did not end", what)
			return nil
		}
	}
}

func campaignStream(ctx context.Context, t *testing.T, ec lockdv1.ElectionServiceClient, req *lockdv1.CampaignRequest) *stream[*lockdv1.CampaignResponse] {
	t.Helper()
	st, err := ec.Campaign(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return follow(st.Recv)
}

func observeStream(ctx context.Context, t *testing.T, ec lockdv1.ElectionServiceClient, name string) *stream[*lockdv1.ObserveResponse] {
	t.Helper()
	st, err := ec.Observe(ctx, &lockdv1.ObserveRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return follow(st.Recv)
}

func TestElectionServiceContract(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		inst := startCoordination(t, rdb, service.DefaultBounds())
		ec := inst.elect
		ctx := timeout(t, time.Minute)

		_, err := ec.Leader(ctx, &lockdv1.LeaderRequest{Name: "jobs/scheduler"})
		wantCode(t, "Leader of an empty election", err, codes.NotFound)
		obs := observeStream(ctx, t, ec, "jobs/scheduler")
		if o := obs.next(t, "the first state"); o.GetHasLeader() || o.GetLeader() != nil {
			t.Fatalf("first observation %v, want no leader", o)
		}

		actx, closeA := context.WithCancel(ctx)
		defer closeA()
		a := campaignStream(actx, t, ec, &lockdv1.CampaignRequest{Name: "jobs/scheduler", Value: "10.0.0.1:80", Owner: "a", Ttl: durationpb.New(2 * time.Second)})
		al := a.next(t, "a's election").GetLeader()
		if al.GetName() != "jobs/scheduler" || al.GetValue() != "10.0.0.1:80" || al.GetOwner() != "a" || al.GetTerm() == 0 ||
			len(al.GetLeaseId()) < 22 || time.Until(al.GetExpireTime().AsTime()) > 3*time.Second {
			t.Fatalf("a's leadership = %v", al)
		}
		if o := obs.next(t, "a's election"); !o.GetHasLeader() || o.GetLeader().GetTerm() != al.GetTerm() || o.GetLeader().GetLeaseId() != "" {
			t.Fatalf("observation %v, want a without its lease_id", o)
		}
		ld, err := ec.Leader(ctx, &lockdv1.LeaderRequest{Name: "jobs/scheduler"})
		if err != nil || ld.GetLeader().GetOwner() != "a" || ld.GetLeader().GetTerm() != al.GetTerm() || ld.GetLeader().GetLeaseId() != "" {
			t.Fatalf("Leader = %v, %v", ld, err)
		}
		// Renewals keep it past its ttl; each is sent.
		for range 3 {
			if l := a.next(t, "a renewal").GetLeader(); l.GetTerm() != al.GetTerm() || l.GetLeaseId() != al.GetLeaseId() {
				t.Fatalf("renewal %v", l)
			}
		}

		bctx, closeB := context.WithCancel(ctx)
		defer closeB()
		b := campaignStream(bctx, t, ec, &lockdv1.CampaignRequest{Name: "jobs/scheduler", Value: "10.0.0.2:80", Owner: "b"})
		pr, err := ec.Proclaim(ctx, &lockdv1.ProclaimRequest{Name: "jobs/scheduler", LeaseId: al.GetLeaseId(), Value: "10.0.0.1:81"})
		if err != nil || pr.GetLeader().GetValue() != "10.0.0.1:81" || pr.GetLeader().GetLeaseId() != al.GetLeaseId() {
			t.Fatalf("Proclaim = %v, %v", pr, err)
		}
		if o := obs.next(t, "a's new value"); o.GetLeader().GetValue() != "10.0.0.1:81" {
			t.Fatalf("observation %v", o)
		}
		for l := a.next(t, "a's new value").GetLeader(); l.GetValue() != "10.0.0.1:81"; l = a.next(t, "a's new value").GetLeader() {
		}
		select {
		case m := <-b.msgs:
			t.Fatalf("b elected while a leads: %v", m)
		default:
		}

		// a closes its stream: it resigns at once and b is elected.
		closeA()
		bl := b.next(t, "b's election").GetLeader()
		if bl.GetOwner() != "b" || bl.GetTerm() <= al.GetTerm() || bl.GetValue() != "10.0.0.2:80" {
			t.Fatalf("b's leadership = %v after a's %v", bl, al)
		}
		for o := obs.next(t, "b's election"); o.GetLeader().GetOwner() != "b"; o = obs.next(t, "b's election") {
			if o.GetHasLeader() {
				t.Fatalf("observation %v between a and b", o)
			}
		}
		_, err = ec.Proclaim(ctx, &lockdv1.ProclaimRequest{Name: "jobs/scheduler", LeaseId: al.GetLeaseId(), Value: "x"})
		wantCode(t, "Proclaim by the resigned leader", err, codes.NotFound)

		// Resign ends b's leadership: its stream ends NOT_FOUND.
		if _, err := ec.Resign(ctx, &lockdv1.ResignRequest{Name: "jobs/scheduler", LeaseId: bl.GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
		if err := b.ended(t, "b's stream"); status.Code(err) != codes.NotFound {
			t.Fatalf("b's stream ended with %v, want NOT_FOUND", err)
		}
		if o := obs.next(t, "no leader"); o.GetHasLeader() {
			t.Fatalf("observation %v, want no leader", o)
		}
		_, err = ec.Resign(ctx, &lockdv1.ResignRequest{Name: "jobs/scheduler", LeaseId: bl.GetLeaseId()})
		wantCode(t, "second Resign", err, codes.NotFound)

		// A read lease leads no election.
		r, err := inst.locks.RLock(ctx, &lockdv1.RLockRequest{Key: "jobs/reader", Owner: "r"})
		if err != nil || !r.GetAcquired() {
			t.Fatal(r, err)
		}
		_, err = ec.Proclaim(ctx, &lockdv1.ProclaimRequest{Name: "jobs/reader", LeaseId: r.GetLease().GetLeaseId(), Value: "x"})
		wantCode(t, "Proclaim with a read lease", err, codes.FailedPrecondition)
		_, err = ec.Resign(ctx, &lockdv1.ResignRequest{Name: "jobs/reader", LeaseId: r.GetLease().GetLeaseId()})
		wantCode(t, "Resign with a read lease", err, codes.FailedPrecondition)
	})
}

func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	inst := startCoordination(t, redistest.Start(t).Client(t), service.DefaultBounds())
	ec, conn := inst.elect, inst.conn
	ctx := timeout(t, 20*time.Second)
	campaignErr := func(req *lockdv1.CampaignRequest) error {
		st, err := ec.Campaign(ctx, req)
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	for _, tc := range []struct {
		name string
		call func() error
		rule string
	}{
		{"an empty name", func() error { return campaignErr(&lockdv1.CampaignRequest{}) }, "name must not be empty"},
		{"an oversized name", func() error {
			_, err := ec.Leader(ctx, &lockdv1.LeaderRequest{Name: strings.Repeat("n", 513)})
			return err
		}, "name is 513 bytes"},
		{"a name with a control character", func() error {
			st, err := ec.Observe(ctx, &lockdv1.ObserveRequest{Name: "a\nb"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, "name has control character"},
		{"an oversized value", func() error {
			return campaignErr(&lockdv1.CampaignRequest{Name: "e", Value: strings.Repeat("v", 4097)})
		}, "value is 4097 bytes"},
		{"a value of invalid UTF-8", func() error {
			return grpctest.Invoke(ctx, conn, "/lockd.v1.ElectionService/Proclaim",
				append(append(grpctest.String(1, "e"), grpctest.String(2, "lease")...), grpctest.String(3, "\xff")...))
		}, "value must be valid UTF-8"},
		{"a ttl below the minimum", func() error {
			return campaignErr(&lockdv1.CampaignRequest{Name: "e", Ttl: durationpb.New(time.Millisecond)})
		}, "ttl must lie in"},
		{"an oversized owner", func() error {
			return campaignErr(&lockdv1.CampaignRequest{Name: "e", Owner: strings.Repeat("o", 257)})
		}, "owner is 257 bytes"},
		{"an empty lease_id", func() error {
			_, err := ec.Resign(ctx, &lockdv1.ResignRequest{Name: "e"})
			return err
		}, "lease_id must not be empty"},
	} {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.rule) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %q", tc.name, err, tc.rule)
		}
	}
	_, err := ec.Proclaim(ctx, &lockdv1.ProclaimRequest{Name: "e", LeaseId: "never-granted"})
	wantCode(t, "Proclaim of an unknown lease", err, codes.NotFound)
}

// TestCampaignResumesOnAnotherReplica drains the replica a leader
// campaigns on: its stream ends UNAVAILABLE without resigning, and the
// same owner campaigning on another replica resumes the same leadership
// at once, without an election in between.
func TestCampaignResumesOnAnotherReplica(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	one := startCoordination(t, rdb, service.DefaultBounds())
	two := startCoordination(t, rdb, service.DefaultBounds())
	ctx := timeout(t, time.Minute)
	req := &lockdv1.CampaignRequest{Name: "resume", Value: "v1", Owner: "host-1", Ttl: durationpb.New(time.Minute)}
	first := campaignStream(ctx, t, one.elect, req)
	l1 := first.next(t, "the election").GetLeader()
	obs := observeStream(ctx, t, two.elect, "resume")
	obs.next(t, "the leader")

	one.server.Drain()
	if err := first.ended(t, "the drained stream"); status.Code(err) != codes.Unavailable {
		t.Fatalf("drained Campaign ended with %v, want UNAVAILABLE", err)
	}
	req.Value = "v2"
	second := campaignStream(ctx, t, two.elect, req)
	l2 := second.next(t, "the resumed leadership").GetLeader()
	if l2.GetTerm() != l1.GetTerm() || l2.GetLeaseId() != l1.GetLeaseId() || l2.GetValue() != "v2" {
		t.Fatalf("resumed leadership %v, want %v with value v2", l2, l1)
	}
	if o := obs.next(t, "the new value"); !o.GetHasLeader() || o.GetLeader().GetTerm() != l1.GetTerm() || o.GetLeader().GetValue() != "v2" {
		t.Fatalf("observation %v: the leadership did not carry on", o)
	}
}

// unreadCampaign is a Campaign stream whose client never reads: once its
// flow-control window is full, every Send blocks until the stream ends.
type unreadCampaign struct {
	lockdv1.ElectionService_CampaignServer
	ctx   context.Context
	sends chan struct{}
}

func (s *unreadCampaign) Context() context.Context { return s.ctx }

func (s *unreadCampaign) Send(*lockdv1.CampaignResponse) error {
	s.sends <- struct{}{}
	<-s.ctx.Done()
	return s.ctx.Err()
}

// TestCampaignRenewsForAClientThatNeverReads keeps a leadership on a
// stream whose Send blocks for good: it is renewed for many ttls, nobody
// else is elected, and closing the stream resigns it.
func TestCampaignRenewsForAClientThatNeverReads(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	inst := startCoordination(t, rdb, service.DefaultBounds())
	ctx := timeout(t, time.Minute)
	const ttl = time.Second
	sctx, closeStream := context.WithCancel(ctx)
	st := &unreadCampaign{ctx: sctx, sends: make(chan struct{}, 100)}
	ended := make(chan error, 1)
	go func() {
		ended <- service.NewElectionServer(inst.server).Campaign(&lockdv1.CampaignRequest{Name: "unread", Owner: "a", Ttl: durationpb.New(ttl)}, st)
	}()
	<-st.sends
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(ttl / 5) {
		l, err := inst.elect.Leader(ctx, &lockdv1.LeaderRequest{Name: "unread"})
		if err != nil || l.GetLeader().GetOwner() != "a" {
			t.Fatalf("Leader while the stream is unread = %v, %v", l, err)
		}
	}
	if n := len(st.sends); n != 0 {
		t.Fatalf("%d more sends started while the first never returned", n)
	}
	closeStream()
	if err := <-ended; status.Code(err) != codes.Canceled {
		t.Fatalf("Campaign after the client went = %v", err)
	}
	_, err := inst.elect.Leader(ctx, &lockdv1.LeaderRequest{Name: "unread"})
	wantCode(t, "Leader after the stream closed", err, codes.NotFound)
}
