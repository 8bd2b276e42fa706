package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/upstream"
)

// TokenErrorDomain is the domain of the google.rpc.ErrorInfo details that
// TokenService errors carry.
const TokenErrorDomain = "lockd"

// The reasons of TokenService's ErrorInfo details besides those of
// (*upstream.Error).ErrorInfo (<PROVIDER>_CREDENTIALS_REJECTED,
// <PROVIDER>_QUOTA_EXHAUSTED, <PROVIDER>_UNAVAILABLE for WECHAT, FEISHU,
// DINGTALK and OAUTH2).
const (
	// ReasonUnknownApp is the reason of NOT_FOUND for an app that is not
	// in lockd's configuration.
	ReasonUnknownApp = "UNKNOWN_APP"
	// ReasonForceRefreshLimited is the reason of RESOURCE_EXHAUSTED when
	// the reported token could be replaced only by a stable force_refresh
	// and WeChat's limits on those do not allow one now.
	ReasonForceRefreshLimited = "FORCE_REFRESH_LIMITED"
	// ReasonAppRefreshLimited is the reason of RESOURCE_EXHAUSTED when
	// reports of refused tokens minted as many tokens for the app within
	// the hour as lockd allows.
	ReasonAppRefreshLimited = "APP_REFRESH_LIMITED"
	// ReasonClientRefreshLimited is the reason of RESOURCE_EXHAUSTED when
	// the calling client reported as many current tokens within the hour
	// as its refreshes_per_hour allows.
	ReasonClientRefreshLimited = "CLIENT_REFRESH_LIMITED"
	// ReasonUpstreamCallsLimited is the reason of RESOURCE_EXHAUSTED when
	// the app's token (or ticket) is needed and the fleet called the
	// upstream as often as its hourly bound allows, whatever it answered.
	ReasonUpstreamCallsLimited = "UPSTREAM_CALLS_LIMITED"
)

const (
	maxAppBytes   = 128
	maxTokenBytes = 4096
)

// TokenServer serves lockd.v1.TokenService on a token broker.
type TokenServer struct {
	lockdv1.UnimplementedTokenServiceServer

	broker  tokenBroker
	brokers *swapBroker
	log     *slog.Logger

	// draining is canceled by Drain: open watches end on it without a
	// goroutine of their own.
	draining   context.Context
	drain      context.CancelFunc
	maxWatches int
	watches    atomic.Int64
	clients    perClient
}

// TokenOption tunes a TokenServer.
type TokenOption func(*TokenServer)

// WithMaxWatches bounds the WatchAccessToken streams open at once on the
// TokenServer; 0 means no bound.
func WithMaxWatches(n int) TokenOption {
	return func(s *TokenServer) { s.maxWatches = n }
}

// NewTokenServer returns a TokenServer on broker; a nil broker serves no
// apps, so every call is NOT_FOUND. SetBroker replaces it.
func NewTokenServer(broker *token.Broker, log *slog.Logger, opts ...TokenOption) *TokenServer {
	s := &TokenServer{brokers: newSwapBroker(broker), log: log}
	s.draining, s.drain = context.WithCancel(context.Background())
	s.broker = s.brokers
	for _, o := range opts {
		o(s)
	}
	return s
}

// Drain ends every open WatchAccessToken stream with UNAVAILABLE, so that
// clients resume on another replica and a graceful stop need not wait for
// them.
func (s *TokenServer) Drain() {
	s.drain()
}

// takeWatch counts an open WatchAccessToken stream against the replica's
// bound and the client's own (see watchLimit).
func (s *TokenServer) takeWatch(ctx context.Context) (func(), error) {
	return take(ctx, &s.watches, s.maxWatches,
		func(c *clientCounts) *atomic.Int64 { return &c.watches },
		watchLimit, &s.clients, "WatchAccessToken streams")
}

// caller is the authenticated client of ctx, as the broker limits and logs
// it; without auth, every caller is the same anonymous one.
func caller(ctx context.Context) token.Caller {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return token.Caller{}
	}
	return token.Caller{Name: id.Name, RefreshesPerHour: id.Limits.RefreshesPerHour}
}

// GetAccessToken returns the app's cached token, or one minted for it by
// exactly one caller in the fleet.
func (s *TokenServer) GetAccessToken(ctx context.Context, req *lockdv1.GetAccessTokenRequest) (*lockdv1.GetAccessTokenResponse, error) {
	if err := validApp(req.GetApp()); err != nil {
		return nil, err
	}
	if s.broker == nil {
		return nil, s.status(ctx, req.GetApp(), token.ErrUnknownApp)
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	tok, err := s.broker.Get(bctx, req.GetApp(), caller(ctx))
	if err != nil {
		return nil, s.status(ctx, req.GetApp(), err)
	}
	return &lockdv1.GetAccessTokenResponse{AccessToken: tok.AccessToken, ExpireTime: timestamppb.New(tok.ExpireTime)}, nil
}

// RefreshAccessToken takes a token the upstream rejected and returns the one
// to use: the cached token if it is another, else one minted once for every
// concurrent reporter.
func (s *TokenServer) RefreshAccessToken(ctx context.Context, req *lockdv1.RefreshAccessTokenRequest) (*lockdv1.RefreshAccessTokenResponse, error) {
	if err := validApp(req.GetApp()); err != nil {
		return nil, err
	}
	if req.GetInvalidToken() == "" {
		return nil, invalid("invalid_token must not be empty: pass the token the upstream rejected")
	}
	if err := validText("invalid_token", req.GetInvalidToken(), maxTokenBytes); err != nil {
		return nil, err
	}
	if s.broker == nil {
		return nil, s.status(ctx, req.GetApp(), token.ErrUnknownApp)
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	tok, err := s.broker.Refresh(bctx, req.GetApp(), req.GetInvalidToken(), caller(ctx))
	if err != nil {
		return nil, s.status(ctx, req.GetApp(), err)
	}
	return &lockdv1.RefreshAccessTokenResponse{AccessToken: tok.AccessToken, ExpireTime: timestamppb.New(tok.ExpireTime)}, nil
}

// ticketTypes maps the wire's ticket types to the upstream's.
var ticketTypes = map[lockdv1.TicketType]upstream.TicketType{
	lockdv1.TicketType_TICKET_TYPE_JSAPI:        upstream.TicketJSAPI,
	lockdv1.TicketType_TICKET_TYPE_WX_CARD:      upstream.TicketWXCard,
	lockdv1.TicketType_TICKET_TYPE_AGENT_CONFIG: upstream.TicketAgentConfig,
}

// GetTicket returns one of the app's JS-SDK tickets, cached and minted like
// its token.
func (s *TokenServer) GetTicket(ctx context.Context, req *lockdv1.GetTicketRequest) (*lockdv1.GetTicketResponse, error) {
	if err := validApp(req.GetApp()); err != nil {
		return nil, err
	}
	kind, ok := ticketTypes[req.GetType()]
	if !ok {
		return nil, invalid("type must be TICKET_TYPE_JSAPI or TICKET_TYPE_WX_CARD (WeChat), or TICKET_TYPE_JSAPI or TICKET_TYPE_AGENT_CONFIG (WeCom)")
	}
	if s.broker == nil {
		return nil, s.status(ctx, req.GetApp(), token.ErrUnknownApp)
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	tok, err := s.broker.Ticket(bctx, req.GetApp(), kind, caller(ctx))
	if err != nil {
		return nil, s.status(ctx, req.GetApp(), err)
	}
	return &lockdv1.GetTicketResponse{Ticket: tok.AccessToken, ExpireTime: timestamppb.New(tok.ExpireTime)}, nil
}

// WatchAccessToken streams the app's current token, then each new one,
// until the client leaves or the server drains.
func (s *TokenServer) WatchAccessToken(req *lockdv1.WatchAccessTokenRequest, stream lockdv1.TokenService_WatchAccessTokenServer) error {
	if err := validApp(req.GetApp()); err != nil {
		return err
	}
	ctx := stream.Context()
	if s.broker == nil {
		return s.status(ctx, req.GetApp(), token.ErrUnknownApp)
	}
	done, err := s.takeWatch(ctx)
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	defer done()
	// A watch ends when the server drains, through a callback rather than
	// a goroutine per stream: watches are many and long-lived.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.draining, func() { cancel(errShuttingDown) })
	defer stop()
	err = s.broker.Watch(wctx, req.GetApp(), caller(ctx), func(tok token.Token) error {
		return stream.Send(&lockdv1.WatchAccessTokenResponse{AccessToken: tok.AccessToken, ExpireTime: timestamppb.New(tok.ExpireTime)})
	})
	if context.Cause(wctx) == errShuttingDown {
		err = errShuttingDown
	}
	return s.status(ctx, req.GetApp(), err)
}

// public is err's message as callers may read it: a transport failure's
// network detail (addresses, DNS names, resolvers) goes to the log only.
func (s *TokenServer) public(ctx context.Context, app string, err error, we *upstream.Error) string {
	msg := err.Error()
	if we == nil || !we.Transport {
		return msg
	}
	s.log.DebugContext(ctx, "token: upstream unreachable", "app", app, "err", err)
	if full := we.Error(); strings.Contains(msg, full) {
		return strings.ReplaceAll(msg, full, we.Public())
	}
	return fmt.Sprintf("token: app %q: %s", app, we.Public())
}

func validApp(app string) error {
	if app == "" {
		return invalid("app must not be empty")
	}
	return validText("app", app, maxAppBytes)
}

// status maps the broker's errors to gRPC (SPEC §3), alike for every
// provider: unknown app NOT_FOUND, rejected credentials
// FAILED_PRECONDITION, quota (and lockd's own bounds) RESOURCE_EXHAUSTED,
// everything transient UNAVAILABLE, with a google.rpc.ErrorInfo detail
// carrying the provider's code and a google.rpc.RetryInfo detail when the
// fleet's next attempt is known. The rest goes through toStatus. ctx is the
// caller's: the broker runs on a bound a little shorter (see bounded), and
// running out of it while the caller still waits is UNAVAILABLE.
func (s *TokenServer) status(ctx context.Context, app string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return status.Errorf(codes.Unavailable, "token: app %q: the token was not ready in time: Redis or the upstream is slow", app)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return toStatus(ctx, s.log, err)
	}
	var we *upstream.Error
	fromUpstream := errors.As(err, &we)
	meta := map[string]string{"app": app}
	var (
		code   codes.Code
		reason string
	)
	switch {
	case errors.Is(err, token.ErrUnknownApp):
		code, reason = codes.NotFound, ReasonUnknownApp
	case errors.Is(err, token.ErrTicketType):
		return status.Error(codes.InvalidArgument, "type: "+err.Error())
	case errors.Is(err, token.ErrFetchLimited):
		code, reason = codes.ResourceExhausted, ReasonUpstreamCallsLimited
	case errors.Is(err, token.ErrRefreshLimited), errors.Is(err, token.ErrAppRefreshLimited), errors.Is(err, token.ErrClientLimited):
		code, reason = codes.ResourceExhausted, ReasonForceRefreshLimited
		switch {
		case errors.Is(err, token.ErrAppRefreshLimited):
			reason = ReasonAppRefreshLimited
		case errors.Is(err, token.ErrClientLimited):
			reason = ReasonClientRefreshLimited
		}
		if fromUpstream {
			_, m := we.ErrorInfo()
			maps.Copy(meta, m)
		}
	case fromUpstream:
		var m map[string]string
		reason, m = we.ErrorInfo()
		maps.Copy(meta, m)
		switch we.Class {
		case upstream.ClassCredentials:
			code = codes.FailedPrecondition
		case upstream.ClassQuota:
			code = codes.ResourceExhausted
		default:
			code = codes.Unavailable
		}
	case errors.Is(err, token.ErrTimeout), errors.Is(err, token.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	default:
		return toStatus(ctx, s.log, err)
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: TokenErrorDomain, Metadata: meta}}
	var te *token.Error
	if errors.As(err, &te) && te.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(te.RetryAfter)})
	}
	st := status.New(code, s.public(ctx, app, err, we))
	if withDetails, derr := st.WithDetails(details...); derr == nil {
		st = withDetails
	}
	return st.Err()
}
