package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/lockd/lockd/internal/auth"
)

// overTLS returns a context of a call over mutual TLS whose verified
// client certificate has subject (none when subject is nil), carrying
// token.
func overTLS(subject *pkix.Name, token string) context.Context {
	info := credentials.TLSInfo{}
	if subject != nil {
		info.State = tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: *subject}}}}
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
	return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
}

// TestTLSSubjectTiesACertificateToAClient: a client with a tls_subject is
// let in only over a connection whose verified client certificate names
// that subject; its token alone, or with another client's certificate,
// is refused. A client without one is let in with any certificate.
func TestTLSSubjectTiesACertificateToAClient(t *testing.T) {
	t.Parallel()
	var refused []string
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: "orders-secret-token", Locks: []string{"orders/"}, TLSSubject: "CN=orders,O=Example"},
		{Name: "billing", Token: "billing-secret-token", Locks: []string{"billing/"}},
	}, auth.OnRefused(func(r string) { refused = append(refused, r) }))
	if err != nil {
		t.Fatal(err)
	}
	orders := pkix.Name{CommonName: "orders", Organization: []string{"Example"}}
	billing := pkix.Name{CommonName: "billing", Organization: []string{"Example"}}
	for _, tt := range []struct {
		name    string
		subject *pkix.Name
		token   string
		want    codes.Code
	}{
		{"orders with its certificate", &orders, "orders-secret-token", codes.OK},
		{"orders's token without a certificate", nil, "orders-secret-token", codes.Unauthenticated},
		{"orders's token with billing's certificate", &billing, "orders-secret-token", codes.Unauthenticated},
		{"billing with any certificate", &orders, "billing-secret-token", codes.OK},
		{"billing without a certificate", nil, "billing-secret-token", codes.OK},
	} {
		md, _ := metadata.FromIncomingContext(overTLS(tt.subject, tt.token))
		_, err := a.TapHandle(overTLS(tt.subject, tt.token), &tap.Info{FullMethodName: "/lockd.v1.LockService/Acquire", Header: md})
		if status.Code(err) != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if len(refused) != 2 || refused[0] != auth.ReasonTLSSubject {
		t.Errorf("refusals counted %q, want two %q", refused, auth.ReasonTLSSubject)
	}
}

// TestMayLockFollowsTheListInForce: a removed client may lock nothing, a
// narrowed one only under its new prefixes.
func TestMayLockFollowsTheListInForce(t *testing.T) {
	t.Parallel()
	a := auth.Open()
	if !a.MayLock("anyone", "k") {
		t.Fatal("without authentication every key may be locked")
	}
	if err := a.Replace([]auth.Client{{Name: "orders", Token: "orders-secret-token", Locks: []string{"orders/"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		client, key string
		want        bool
	}{{"orders", "orders/1", true}, {"orders", "billing/1", false}, {"billing", "billing/1", false}} {
		if got := a.MayLock(tt.client, tt.key); got != tt.want {
			t.Errorf("MayLock(%q, %q) = %v, want %v", tt.client, tt.key, got, tt.want)
		}
	}
}
