package token_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// scripted is a WeChat upstream whose token endpoint answers its calls in
// turn from a script, repeating the last answer, and that refuses every
// token it is asked to check.
type scripted struct {
	mu      sync.Mutex
	answers []string // the JSON bodies; "" is an HTTP 500
	calls   int
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/cgi-bin/token" {
		fmt.Fprint(w, `{"errcode":40001,"errmsg":"invalid credential"}`)
		return
	}
	s.mu.Lock()
	body := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	s.mu.Unlock()
	if body == "" {
		http.Error(w, "busy", http.StatusInternalServerError)
		return
	}
	fmt.Fprint(w, body)
}

func (s *scripted) called() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestEveryFetchIsCountedByOutcome drives an upstream through each outcome
// of a call: an error, a new token handed out in its last second (no life
// left to serve), the same token again, that token renewed, and then a
// call the hour's bound holds back. The observer is told each, by app,
// value and outcome, and nothing more than the upstream saw.
func TestEveryFetchIsCountedByOutcome(t *testing.T) {
	t.Parallel()
	up := &scripted{answers: []string{
		"",
		`{"access_token":"counted-1","expires_in":0}`,
		`{"access_token":"counted-1","expires_in":0}`,
		`{"access_token":"counted-1","expires_in":7200}`,
	}}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	app := token.App{Name: "counted", Upstream: wechat.Config{Provider: wechat.ProviderWeChat, APIBase: srv.URL, AppID: "wx-counted", Secret: classicSecret}}
	f := newFleet(t, redistest.Start(t), 2, []token.App{app}, token.Options{
		FetchesPerHour: len(up.answers), FetchInterval: 20 * time.Millisecond, UnavailableHold: time.Millisecond})
	ctx := timeout(t, time.Minute)

	var tok token.Token
	waitFor(t, "a token with life left", func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		tok, err = f.brokers[up.called()%2].Get(c, "counted", anyone)
		return err == nil
	})
	if tok.AccessToken != "counted-1" || up.called() != len(up.answers) {
		t.Fatalf("got %v after %d upstream calls, want counted-1 after %d", tok, up.called(), len(up.answers))
	}
	// A report of the token, which the upstream refuses, needs one more
	// call: the hour's bound holds it back.
	if got, err := f.brokers[0].Refresh(ctx, "counted", tok.AccessToken, anyone); !errors.Is(err, token.ErrFetchLimited) {
		t.Fatalf("Refresh = %v, %v beyond the hour's bound; want ErrFetchLimited", got, err)
	}
	if n := up.called(); n != len(up.answers) {
		t.Fatalf("the upstream was called %d times, want %d", n, len(up.answers))
	}
	for outcome, want := range map[string]int{"error": 1, "new": 1, "same": 1, "renewed": 1, "paced": 1} {
		if n := f.obs.fetched("counted", "access_token", outcome); n != want {
			t.Errorf("%d fetches with outcome %q, want %d", n, outcome, want)
		}
	}
	if n := f.obs.possiblyMinted("counted"); n != 0 {
		t.Errorf("%d possible mints, want none: every call was answered", n)
	}
}

// TestATicketFetchIsCountedApart fetches a jsapi ticket: the observer
// counts the ticket's call under its type, beside the token's.
func TestATicketFetchIsCountedApart(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 2, apps(fake)[:1], token.Options{})
	ctx := timeout(t, time.Minute)
	for _, b := range f.brokers {
		if _, err := b.Ticket(ctx, "classic", "jsapi", anyone); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.obs.fetched("classic", "jsapi", "new"); n != 1 {
		t.Fatalf("%d new jsapi tickets counted, want 1", n)
	}
	if n := f.obs.fetched("classic", "access_token", "new"); n != 1 {
		t.Fatalf("%d new access tokens counted, want 1", n)
	}
}

// TestATimedOutTicketFetchIsNotAPossibleTokenMint has the upstream hand
// out a ticket but lose its answer past lockd's timeout: the call is
// counted as the ticket's failed fetch, not as a possible mint of the
// app's token, whose count it would inflate.
func TestATimedOutTicketFetchIsNotAPossibleTokenMint(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{MintTimeout: 300 * time.Millisecond, UnavailableHold: 50 * time.Millisecond})
	ctx := timeout(t, time.Minute)
	b := f.brokers[0]
	if _, err := b.Get(ctx, "classic", anyone); err != nil {
		t.Fatal(err)
	}
	fake.SetReplyDelay(2 * time.Second)
	if got, err := b.Ticket(ctx, "classic", "jsapi", anyone); err == nil {
		t.Fatalf("Ticket = %v with the answer lost", got)
	}
	waitFor(t, "the upstream's ticket", func() bool { return fake.TicketsIssued("wx-classic") == 1 })
	if n := f.obs.fetched("classic", "jsapi", "error"); n != 1 {
		t.Fatalf("%d failed jsapi fetches counted, want 1", n)
	}
	if n := f.obs.possiblyMinted("classic"); n != 0 {
		t.Fatalf("the observer was told of %d possible token mints, want none: only a ticket call went unanswered", n)
	}
	if n, err := b.MintsOn(ctx, "classic", time.Now()); err != nil || n != 1 {
		t.Fatalf("MintsOn = %d, %v; want 1: the app's token was minted once", n, err)
	}
}
