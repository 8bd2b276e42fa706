package token

import (
	"testing"
	"time"

	"github.com/lockd/lockd/internal/wechat"
)

func TestDecisionsOnTheCachedToken(t *testing.T) {
	t.Parallel()
	a := &app{b: &Broker{opts: Options{}.withDefaults()}}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cached := func(left time.Duration, edit ...func(*state)) state {
		st := state{now: now, token: "T", expire: now.Add(left), lifetime: 2 * time.Hour,
			written: now.Add(-2*time.Hour + left), cause: CauseDemand}
		for _, e := range edit {
			e(&st)
		}
		return st
	}
	same := func(st *state) { st.same = true }
	failing := func(st *state) { st.failure = &Error{Err: &wechat.Error{Class: wechat.ClassUnavailable}} }
	refreshed := func(ago time.Duration) func(*state) {
		return func(st *state) { st.cause, st.written = CauseInvalid, now.Add(-ago) }
	}
	get := want{cause: CauseDemand}
	report := func(tok string) want { return want{cause: CauseInvalid, invalid: tok} }
	ahead := want{cause: CauseAhead}
	tests := []struct {
		name string
		st   state
		w    want
		ok   bool
	}{
		{"a token with more than the margin left is served", cached(2 * time.Minute), get, true},
		{"a token within the margin is not served", cached(30 * time.Second), get, false},
		{"a token within the margin is served when the upstream handed it back unchanged", cached(30*time.Second, same), get, true},
		{"a token within the margin is served while the upstream is failing", cached(30*time.Second, failing), get, true},
		{"an expired token is never served", cached(0, same, failing), get, false},
		{"no token is no answer", state{now: now}, get, false},
		{"a report of a stale token gets the cached one", cached(time.Hour), report("old"), true},
		{"a report of a stale token while the cached one is expiring needs a mint", cached(30 * time.Second), report("old"), false},
		{"a report of the cached token needs a mint", cached(time.Hour), report("T"), false},
		{"a report of a token just minted for a refresh gets it back", cached(time.Hour, refreshed(5*time.Second)), report("T"), true},
		{"a report of a token minted for a refresh after the cooldown needs a mint", cached(time.Hour, refreshed(20*time.Second)), report("T"), false},
		{"a token with more than refresh-ahead left needs no renewal", cached(6 * time.Minute), ahead, true},
		{"a token within refresh-ahead needs a renewal", cached(4 * time.Minute), ahead, false},
		{"a token the upstream handed back unchanged is not renewed before it expires", cached(time.Minute, same), ahead, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, ok := a.satisfies(tt.st, tt.w)
			if ok != tt.ok {
				t.Fatalf("satisfies = %v, want %v", ok, tt.ok)
			}
			if ok && (tok.AccessToken != tt.st.token || !tok.ExpireTime.Equal(tt.st.expire)) {
				t.Fatalf("satisfies returned %v", tok)
			}
		})
	}
}

func TestMarginAndRefreshAheadScaleWithTheLifetime(t *testing.T) {
	t.Parallel()
	def := &Broker{opts: Options{}.withDefaults()}
	custom := &Broker{opts: Options{Margin: 500 * time.Millisecond, RefreshAhead: 5 * time.Second}.withDefaults()}
	tests := []struct {
		name          string
		b             *Broker
		life          time.Duration
		margin, ahead time.Duration
	}{
		{"WeChat's two hours: a minute of margin, renewal five minutes ahead", def, 2 * time.Hour, time.Minute, 5 * time.Minute},
		{"a short lifetime scales both down", def, 10 * time.Second, time.Second, 2500 * time.Millisecond},
		{"set values apply", custom, 10 * time.Second, 500 * time.Millisecond, 5 * time.Second},
		{"set values are capped by the lifetime", custom, 2 * time.Second, 500 * time.Millisecond, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if m, a := tt.b.margin(tt.life), tt.b.ahead(tt.life); m != tt.margin || a != tt.ahead {
				t.Fatalf("margin %v, ahead %v; want %v, %v", m, a, tt.margin, tt.ahead)
			}
		})
	}
}

func TestWeChatsDayIsBeijingTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		at   time.Time
		day  string
		next time.Duration
	}{
		{"a second before midnight in Beijing is the old day", time.Date(2026, 3, 1, 15, 59, 59, 0, time.UTC), "2026-03-01", time.Second},
		{"midnight in Beijing starts the new day", time.Date(2026, 3, 1, 16, 0, 0, 0, time.UTC), "2026-03-02", 24 * time.Hour},
		{"the last day of a year turns into the next", time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), "2027-01-01", 17 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Day(tt.at); got != tt.day {
				t.Fatalf("Day = %s, want %s", got, tt.day)
			}
			if got := untilNextDay(tt.at); got != tt.next {
				t.Fatalf("untilNextDay = %v, want %v", got, tt.next)
			}
		})
	}
}

func TestFailureRecordsRoundTripWithoutLosingTheClass(t *testing.T) {
	t.Parallel()
	for _, e := range []*wechat.Error{
		{Class: wechat.ClassCredentials, Errcode: 40164, Errmsg: "invalid ip", Endpoint: "api.weixin.qq.com/cgi-bin/token"},
		{Class: wechat.ClassQuota, Errcode: 45009, Endpoint: "api.weixin.qq.com/cgi-bin/stable_token"},
		{Class: wechat.ClassUnavailable, HTTPStatus: 502, Endpoint: "qyapi.weixin.qq.com/cgi-bin/gettoken"},
	} {
		got := decodeFailure(encodeFailure(e))
		if got.Error() != e.Error() || got.Class != e.Class {
			t.Fatalf("round trip of %v gave %v", e, got)
		}
	}
}
