package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/token"
)

// AdminServer serves lockd.v1.AdminService: who holds what, on the
// LockServer's engine, and the state of the TokenServer's apps. Admin
// clients see everything and may ForceRelease (the auth interceptor
// refuses it to the others); other clients list and describe within their
// own prefixes and apps.
type AdminServer struct {
	lockdv1.UnimplementedAdminServiceServer

	locks  *LockServer
	tokens *TokenServer
}

// NewAdminServer returns an AdminServer on locks's engine and audit log
// and tokens's apps (nil serves no apps).
func NewAdminServer(locks *LockServer, tokens *TokenServer) *AdminServer {
	return &AdminServer{locks: locks, tokens: tokens}
}

// Page sizes of ListLocks.
const (
	defaultPageSize = 100
	maxPageSize     = 500
	maxPageToken    = 1024
)

// ListLocks lists the held keys under a prefix that the caller may see.
func (a *AdminServer) ListLocks(ctx context.Context, req *lockdv1.ListLocksRequest) (*lockdv1.ListLocksResponse, error) {
	if err := validText("prefix", req.GetPrefix(), redislock.MaxKeyBytes); err != nil {
		return nil, err
	}
	if err := validText("page_token", req.GetPageToken(), maxPageToken); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		return nil, invalid("page_size must be at most %d, got %d", maxPageSize, size)
	}
	scope := auth.ScopeOf(ctx)
	// A page token names the prefix walked, narrowed to the caller's
	// prefixes the same way on every page.
	opts := redislock.ListOptions{Prefix: scope.Narrow(req.GetPrefix()), PageSize: size, PageToken: req.GetPageToken()}
	if !scope.All {
		opts.Keep = scope.MayLock
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	page, err := a.locks.engine.List(bctx, opts)
	if err != nil {
		return nil, a.status(ctx, err)
	}
	resp := &lockdv1.ListLocksResponse{NextPageToken: page.Next}
	for _, info := range page.Locks {
		resp.Locks = append(resp.Locks, lockInfoProto(ctx, scope, info))
	}
	return resp, nil
}

// DescribeLock tells who holds a key and who waits for it.
func (a *AdminServer) DescribeLock(ctx context.Context, req *lockdv1.DescribeLockRequest) (*lockdv1.DescribeLockResponse, error) {
	if err := validKey(req.GetKey()); err != nil {
		return nil, err
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	info, err := a.locks.engine.Describe(bctx, req.GetKey())
	if err != nil {
		return nil, a.status(ctx, err)
	}
	return &lockdv1.DescribeLockResponse{Lock: lockInfoProto(ctx, auth.ScopeOf(ctx), info)}, nil
}

// ForceRelease ends the leases of a key's owner, or of every holder, and
// logs who did it.
func (a *AdminServer) ForceRelease(ctx context.Context, req *lockdv1.ForceReleaseRequest) (*lockdv1.ForceReleaseResponse, error) {
	if err := validKey(req.GetKey()); err != nil {
		return nil, err
	}
	if err := validText("owner", req.GetOwner(), maxOwnerBytes); err != nil {
		return nil, err
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	key := req.GetKey()
	owners := []string{req.GetOwner()}
	if _, authenticated := auth.FromContext(ctx); authenticated && req.GetOwner() != "" {
		// Owners are kept with their client's name before them: end the
		// leases of every owner that shows as the one asked for.
		info, err := a.locks.engine.Describe(bctx, key)
		if err != nil {
			return nil, a.status(ctx, err)
		}
		owners = owners[:0]
		for _, h := range info.Holders {
			if displayed(ctx, h.Owner) == req.GetOwner() && !slices.Contains(owners, h.Owner) {
				owners = append(owners, h.Owner)
			}
		}
		if len(owners) == 0 {
			return nil, status.Errorf(codes.NotFound, "owner %q holds no lease of key %q", req.GetOwner(), key)
		}
	}
	resp := &lockdv1.ForceReleaseResponse{}
	var firstErr error
	for _, owner := range owners {
		ended, err := a.locks.engine.ForceRelease(bctx, key, owner)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, h := range ended {
			a.locks.leases.forced(key, h.Owner)
			a.locks.ForceReleased(ctx, key, displayed(ctx, h.Owner), h.FencingToken)
			a.locks.log.LogAttrs(ctx, slog.LevelWarn, "force release", clientAttr(ctx), slog.String("key", key),
				slog.String("owner", displayed(ctx, h.Owner)), slog.String("mode", h.Mode.String()),
				slog.Uint64("fencing_token", h.FencingToken))
			resp.Released = append(resp.Released, holderProto(ctx, auth.Scope{All: true, Admin: true}, h))
		}
	}
	if len(resp.GetReleased()) == 0 {
		if errors.Is(firstErr, redislock.ErrNotHeld) && req.GetOwner() != "" {
			return nil, status.Errorf(codes.NotFound, "owner %q holds no lease of key %q", req.GetOwner(), key)
		}
		return nil, a.status(ctx, firstErr)
	}
	return resp, nil
}

// DescribeApp tells the state of an app's token, never the token.
func (a *AdminServer) DescribeApp(ctx context.Context, req *lockdv1.DescribeAppRequest) (*lockdv1.DescribeAppResponse, error) {
	if err := validApp(req.GetApp()); err != nil {
		return nil, err
	}
	b, done := a.broker()
	defer done()
	if b == nil {
		return nil, a.tokens.status(ctx, req.GetApp(), token.ErrUnknownApp)
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	st, err := b.Describe(bctx, req.GetApp())
	if err != nil {
		return nil, a.tokens.status(ctx, req.GetApp(), err)
	}
	return &lockdv1.DescribeAppResponse{App: appProto(st)}, nil
}

// ListApps describes every app the caller may read.
func (a *AdminServer) ListApps(ctx context.Context, _ *lockdv1.ListAppsRequest) (*lockdv1.ListAppsResponse, error) {
	b, done := a.broker()
	defer done()
	resp := &lockdv1.ListAppsResponse{}
	if b == nil {
		return resp, nil
	}
	scope := auth.ScopeOf(ctx)
	bctx, cancel := bounded(ctx)
	defer cancel()
	for _, app := range b.Apps() {
		if !scope.MayRead(app) {
			continue
		}
		st, err := b.Describe(bctx, app)
		if err != nil {
			return nil, a.tokens.status(ctx, app, err)
		}
		resp.Apps = append(resp.Apps, appProto(st))
	}
	return resp, nil
}

func (a *AdminServer) broker() (*token.Broker, func()) {
	if a.tokens == nil {
		return nil, func() {}
	}
	return a.tokens.brokers.use()
}

func (a *AdminServer) status(ctx context.Context, err error) error {
	if errors.Is(err, redislock.ErrInvalidPageToken) {
		return status.Error(codes.InvalidArgument, "page_token: "+err.Error())
	}
	return toStatus(ctx, a.locks.log, err)
}

func lockInfoProto(ctx context.Context, scope auth.Scope, info redislock.LockInfo) *lockdv1.LockInfo {
	out := &lockdv1.LockInfo{
		Key:              info.Key,
		Kind:             lockdv1.LockKind(info.Kind),
		WaitingWriters:   uint32(info.WaitingWriters),
		LastFencingToken: info.LastFencingToken,
	}
	for _, h := range info.Holders {
		out.Holders = append(out.Holders, holderProto(ctx, scope, h))
	}
	switch info.Kind {
	case redislock.KindElection:
		out.Election = &lockdv1.ElectionState{HasLeader: true, Leader: displayed(ctx, info.Leader.Owner), Term: info.Leader.FencingToken, Value: info.Value}
	case redislock.KindSemaphore:
		out.Semaphore = &lockdv1.SemaphoreState{Limit: uint32(info.Limit), PermitsInUse: uint32(info.Held)}
	}
	return out
}

func holderProto(ctx context.Context, scope auth.Scope, h redislock.Holder) *lockdv1.LockHolder {
	out := &lockdv1.LockHolder{
		Owner:        displayed(ctx, h.Owner),
		Mode:         modeProto(h.Mode),
		HoldCount:    h.HoldCount,
		FencingToken: h.FencingToken,
		ExpireTime:   timestamppb.New(h.ExpireTime),
		TtlLeft:      durationpb.New(h.Left),
		Ttl:          durationpb.New(h.TTL),
	}
	if _, authenticated := auth.FromContext(ctx); authenticated && scope.Admin {
		if client, _, ok := strings.Cut(h.Owner, ":"); ok {
			out.Client = client
		}
	}
	return out
}

func modeProto(m redislock.Mode) lockdv1.LockMode {
	switch m {
	case redislock.Read:
		return lockdv1.LockMode_LOCK_MODE_READ
	case redislock.Permit:
		return lockdv1.LockMode_LOCK_MODE_PERMIT
	}
	return lockdv1.LockMode_LOCK_MODE_WRITE
}

func appProto(st token.AppState) *lockdv1.AppInfo {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	return &lockdv1.AppInfo{
		App:             st.App,
		HasToken:        st.HasToken,
		ExpireTime:      ts(st.ExpireTime),
		LastMintTime:    ts(st.LastMint),
		MintsToday:      st.MintsToday,
		NextRefreshTime: ts(st.NextRefresh),
		LastError:       st.LastError,
		FailedAttempts:  int64(st.FailedAttempts),
		RetryTime:       ts(st.RetryTime),
	}
}
