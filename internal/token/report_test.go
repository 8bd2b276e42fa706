package token_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/clocktest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// hourStart is a clock reading at the start of an hour, so that simulated
// hours line up with the refresh limits' windows.
func hourStart() *clocktest.Clock {
	return clocktest.New(time.Now().Truncate(time.Hour).Add(time.Hour))
}

// TestALoopingClientCannotBurnTheQuota has one client report the current
// classic token every simulated second for hours (the broker's and the
// upstream's clocks advance; Redis's does not need to).
func TestALoopingClientCannotBurnTheQuota(t *testing.T) {
	t.Parallel()
	t.Run("a token the upstream accepts is checked, never replaced", func(t *testing.T) {
		t.Parallel()
		clock := hourStart()
		looper := token.Caller{Name: "looper"}
		fake, f, ctx, cur := startClassic(t, 2, wechatfake.Options{Now: clock.Now}, token.Options{Now: clock.Now}, looper)
		for i := range 3600 {
			got, err := f.brokers[i%2].Refresh(ctx, "classic", cur.AccessToken, looper)
			if err != nil || got.AccessToken != cur.AccessToken {
				t.Fatalf("report %d: %v, %v; want the token back", i, got, err)
			}
			clock.Advance(time.Second)
		}
		checks := fake.Calls("/cgi-bin/getcallbackip")
		t.Logf("an hour of reports: %d mints, %d checks", fake.Mints("wx-classic")-1, checks)
		if n := fake.Mints("wx-classic"); n != 1 {
			t.Fatalf("%d mints, want the first one only", n)
		}
		if checks > 3600/30+10 {
			t.Fatalf("%d checks in an hour, want about one per VerifyInterval (30 s)", checks)
		}
	})
	t.Run("against an upstream refusing every token, one client causes a few mints an hour", func(t *testing.T) {
		t.Parallel()
		clock := hourStart()
		looper := token.Caller{Name: "looper"}
		fake, f, ctx, cur := startClassic(t, 2, wechatfake.Options{Now: clock.Now}, token.Options{Now: clock.Now}, looper)
		limited := 0
		for i := range 2 * 3600 {
			fake.Reject(cur.AccessToken)
			got, err := f.brokers[i%2].Refresh(ctx, "classic", cur.AccessToken, looper)
			var te *token.Error
			switch {
			case err == nil:
				cur = got
			case errors.Is(err, token.ErrClientLimited) && errors.As(err, &te) && te.RetryAfter > 0 && te.RetryAfter <= time.Hour:
				limited++
			default:
				t.Fatalf("report %d: %v", i, err)
			}
			clock.Advance(time.Second)
		}
		mints := fake.Mints("wx-classic") - 1
		t.Logf("two hours of reports: %d mints, %d refused, %d checks", mints, limited, fake.Calls("/cgi-bin/getcallbackip"))
		if mints > 2*token.DefaultRefreshesPerHour {
			t.Fatalf("%d mints in two hours, want at most %d an hour", mints, token.DefaultRefreshesPerHour)
		}
		if mints < token.DefaultRefreshesPerHour {
			t.Fatalf("only %d mints: the tokens the upstream refused were not replaced", mints)
		}
		if strings.Count(f.logs.String(), `"client":"looper"`) == 0 {
			t.Fatal("the mints are not logged with the client that caused them")
		}
	})
}

func TestRefreshLimitsPerClientAndPerApp(t *testing.T) {
	t.Parallel()
	clock := hourStart()
	fake := newFake(t, wechatfake.Options{Now: clock.Now})
	f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{Now: clock.Now, AppRefreshesPerHour: 3})
	ctx := timeout(t, time.Minute)
	b := f.brokers[0]
	cur, err := b.Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	report := func(c token.Caller) error {
		fake.Reject(cur.AccessToken)
		clock.Advance(time.Second)
		got, err := b.Refresh(ctx, "classic", cur.AccessToken, c)
		if err == nil {
			cur = got
		}
		return err
	}
	strict := token.Caller{Name: "strict", RefreshesPerHour: 1}
	if err := report(strict); err != nil {
		t.Fatal(err)
	}
	if err := report(strict); !errors.Is(err, token.ErrClientLimited) {
		t.Fatalf("second report of a client allowed one an hour = %v", err)
	}
	for _, c := range []token.Caller{{Name: "a"}, {Name: "b"}} {
		if err := report(c); err != nil {
			t.Fatal(err)
		}
	}
	// Three report-caused mints this hour: the app's limit.
	err = report(token.Caller{Name: "c"})
	var te *token.Error
	if !errors.Is(err, token.ErrAppRefreshLimited) || !errors.As(err, &te) || te.RetryAfter <= 0 {
		t.Fatalf("fourth report-caused mint of an app allowed three = %v", err)
	}
	if n := fake.Mints("wx-classic"); n != 4 {
		t.Fatalf("%d mints, want 4", n)
	}
	clock.Advance(time.Hour)
	if err := report(strict); err != nil {
		t.Fatalf("a new hour: %v", err)
	}
}

func TestStableAsksNormalModeBeforeForcing(t *testing.T) {
	t.Parallel()
	clock := newClock()
	fake := newFake(t, wechatfake.Options{Now: clock.Now})
	f := newFleet(t, redistest.Start(t), 1, apps(fake), token.Options{})
	ctx := timeout(t, time.Minute)
	t1, err := f.brokers[0].Get(ctx, "stable", anyone)
	if err != nil {
		t.Fatal(err)
	}
	// Another system sharing the appid forced a refresh a minute ago.
	body, _ := json.Marshal(map[string]any{"grant_type": "client_credential", "appid": "wx-stable", "secret": stableSecret, "force_refresh": true})
	resp, err := http.Post(fake.URL()+"/cgi-bin/stable_token", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var other struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&other)
	resp.Body.Close()
	clock.Advance(time.Minute)

	got, err := f.brokers[0].Refresh(ctx, "stable", t1.AccessToken, anyone)
	if err != nil {
		t.Fatal(err)
	}
	if got.AccessToken != other.AccessToken || fake.Forces("wx-stable") != 1 || !fake.Valid(other.AccessToken) {
		t.Fatalf("lockd forced again (%d forces), or did not take the other system's token (%v)", fake.Forces("wx-stable"), got.AccessToken == other.AccessToken)
	}
}

func TestReportsWhileForceRefreshIsSpentCostNothing(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{ForceRefreshInterval: -1})
	clock := newClock()
	f := newFleet(t, redistest.Start(t), 2, apps(fake), token.Options{Now: clock.Now, ForceRefreshInterval: -1, ForceRefreshPerDay: 1})
	ctx := timeout(t, time.Minute)
	t1, err := f.brokers[0].Get(ctx, "stable", anyone)
	if err != nil {
		t.Fatal(err)
	}
	fake.Reject(t1.AccessToken)
	t2, err := f.brokers[0].Refresh(ctx, "stable", t1.AccessToken, anyone)
	if err != nil || t2.AccessToken == t1.AccessToken {
		t.Fatal(t2, err)
	}
	fake.Reject(t2.AccessToken)
	clock.Advance(time.Minute)
	before := fake.Calls("/cgi-bin/stable_token")
	for i := range 20 {
		if _, err := f.brokers[i%2].Refresh(ctx, "stable", t2.AccessToken, anyone); !errors.Is(err, token.ErrRefreshLimited) {
			t.Fatalf("report %d = %v, want ErrRefreshLimited", i, err)
		}
	}
	calls := fake.Calls("/cgi-bin/stable_token") - before
	mints, _ := f.brokers[0].MintsOn(ctx, "stable", time.Now())
	if calls > 1 || mints != int64(fake.Issued("wx-stable")) {
		t.Fatalf("20 reports while force_refresh is spent: %d upstream calls, %d mints counted for %d tokens", calls, mints, fake.Issued("wx-stable"))
	}
}

func TestAReportThatCannotBeCheckedMintsWithinTheLimits(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{})
	ctx := timeout(t, time.Minute)
	t1, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	fake.FailNextOn("/cgi-bin/getcallbackip", 1, 48001) // the account may not call it
	t2, err := f.brokers[0].Refresh(ctx, "classic", t1.AccessToken, anyone)
	if err != nil || t2.AccessToken == t1.AccessToken {
		t.Fatalf("Refresh = %v, %v; want a new token", t2, err)
	}
	if f.obs.codes["48001"] != 1 {
		t.Fatalf("the check's errcode was not counted: %v", f.obs.codes)
	}
}

// growTrust has a client report the current (valid) classic token until the
// fleet trusts the upstream's word on it for the longest span.
func growTrust(t *testing.T, ctx context.Context, f *fleet, clock *clocktest.Clock, cur token.Token, c token.Caller) {
	t.Helper()
	for span := time.Second; span <= 32*time.Second; span *= 2 {
		got, err := f.brokers[0].Refresh(ctx, "classic", cur.AccessToken, c)
		if err != nil || got.AccessToken != cur.AccessToken {
			t.Fatalf("report of a valid token: %v, %v", got, err)
		}
		clock.Advance(span + time.Millisecond)
	}
	if _, err := f.brokers[0].Refresh(ctx, "classic", cur.AccessToken, c); err != nil {
		t.Fatal(err)
	}
}

// TestARefusalIsBelievedAtOnce grows the fleet's trust in a valid token
// with one client's reports, then has the upstream refuse it: a report
// from another client, or the broker's own ticket call meeting the
// refusal, replaces it at once instead of trusting it on.
func TestARefusalIsBelievedAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("another client's report", func(t *testing.T) {
		t.Parallel()
		clock := hourStart()
		looper := token.Caller{Name: "looper"}
		fake, f, ctx, cur := startClassic(t, 2, wechatfake.Options{Now: clock.Now}, token.Options{Now: clock.Now}, looper)
		growTrust(t, ctx, f, clock, cur, looper)
		fake.Reject(cur.AccessToken)
		got, err := f.brokers[1].Refresh(ctx, "classic", cur.AccessToken, token.Caller{Name: "shop"})
		if err != nil || got.AccessToken == cur.AccessToken || !fake.Valid(got.AccessToken) {
			t.Fatalf("another client's report of a refused token = %v, %v; want a new token", got, err)
		}
	})
	t.Run("the broker's own ticket call", func(t *testing.T) {
		t.Parallel()
		clock := hourStart()
		looper := token.Caller{Name: "looper"}
		fake, f, ctx, cur := startClassic(t, 2, wechatfake.Options{Now: clock.Now}, token.Options{Now: clock.Now}, looper)
		growTrust(t, ctx, f, clock, cur, looper)
		fake.Reject(cur.AccessToken)
		ticket, err := f.brokers[1].Ticket(ctx, "classic", "jsapi", looper)
		if err != nil || !fake.TicketValid(ticket.AccessToken) {
			t.Fatalf("Ticket with a refused token = %v, %v; want the token replaced and a ticket", ticket, err)
		}
		got, err := f.brokers[0].Get(ctx, "classic", looper)
		if err != nil || got.AccessToken == cur.AccessToken {
			t.Fatalf("Get after the ticket call = %v, %v; want the replacement", got, err)
		}
	})
}
