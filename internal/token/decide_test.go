package token

import (
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/wechat"
)

func TestDecisionsOnTheCachedToken(t *testing.T) {
	t.Parallel()
	b := &Broker{opts: Options{}.withDefaults()}
	v := &value{b: b}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cached := func(left time.Duration, edit ...func(*state)) state {
		st := state{at: time.Now(), now: now, token: "T", expire: now.Add(left), hi: now.Add(left + 2*time.Second),
			lifetime: 2 * time.Hour, written: now.Add(-2*time.Hour + left)}
		for _, e := range edit {
			e(&st)
		}
		return st
	}
	// nothingFresher: the upstream hands out the same token until it
	// expires (WeCom).
	nothingFresher := func(st *state) { st.renew = st.hi }
	failing := func(st *state) { st.failure = &Error{Err: &wechat.Error{Class: wechat.ClassUnavailable}} }
	tests := []struct {
		name string
		st   state
		ok   bool
	}{
		{"a token with more than the margin left is served", cached(2 * time.Minute), true},
		{"a token within the margin is not served while a fresher one can be had", cached(30 * time.Second), false},
		{"a token within the margin is served while the upstream has nothing fresher", cached(30*time.Second, nothingFresher), true},
		{"a token within the least margin is not served even then", cached(400*time.Millisecond, nothingFresher), false},
		{"a token within the margin is served while the upstream is failing", cached(30*time.Second, failing), true},
		{"an expired token is never served", cached(0, nothingFresher, failing), false},
		{"no token is no answer", state{at: time.Now(), now: now}, false},
	}
	for _, tt := range tests {
		// Not parallel: the states were read "now", and a subtest that
		// waits for a free slot would find their tokens older.
		t.Run(tt.name, func(t *testing.T) {
			if got := v.servable(tt.st); got != tt.ok {
				t.Fatalf("servable = %v, want %v", got, tt.ok)
			}
		})
	}
}

func TestLifeLeftCountsTheTimeSinceTheRead(t *testing.T) {
	t.Parallel()
	now := time.Now()
	st := state{at: now.Add(-3 * time.Second), now: now, token: "T", expire: now.Add(2 * time.Second)}
	if left := st.left(); left != 0 {
		t.Fatalf("a token read with 2s left, 3s ago, has %v left; want 0", left)
	}
}

func TestRenewalIsDueAheadButNotBeforeAFresherTokenCanBeHad(t *testing.T) {
	t.Parallel()
	b := &Broker{opts: Options{}.withDefaults()}
	v := &value{b: b}
	now := time.Now()
	at := func(d time.Duration) time.Time { return now.Add(d) }
	tests := []struct {
		name string
		st   state
		due  time.Duration
	}{
		{"classic: five minutes before expiry", state{token: "T", expire: at(time.Hour), lifetime: 2 * time.Hour}, 55 * time.Minute},
		{"stable: when its last five minutes start", state{token: "T", expire: at(time.Hour), renew: at(56 * time.Minute), lifetime: 2 * time.Hour}, 56 * time.Minute},
		{"WeCom: once it has surely expired", state{token: "T", expire: at(time.Hour), renew: at(time.Hour + time.Second), lifetime: 2 * time.Hour}, time.Hour + time.Second},
		{"no token: now", state{}, 0},
	}
	for _, tt := range tests {
		tt.st.at, tt.st.now = now, now
		if got := v.dueIn(tt.st); got.Round(time.Second) != tt.due {
			t.Errorf("%s: due in %v, want %v", tt.name, got, tt.due)
		}
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

func TestHoldsBackOffExponentiallyAndQuotaWaitsForTheDay(t *testing.T) {
	t.Parallel()
	v := &value{b: &Broker{opts: Options{}.withDefaults()}}
	noon := time.Date(2026, 3, 1, 4, 0, 0, 0, time.UTC) // 12:00 in Beijing
	unknown := &wechat.Error{Class: wechat.ClassUnavailable, Errcode: 50002}
	var last time.Duration
	for attempts := 1; attempts <= 12; attempts++ {
		d := v.hold(unknown, attempts, noon)
		base := min(2*time.Second<<(attempts-1), 10*time.Minute)
		if d < base || d > base+base/5 {
			t.Fatalf("hold after %d failures = %v, want %v plus up to a fifth", attempts, d, base)
		}
		if d < last && base < 10*time.Minute {
			t.Fatalf("hold shrank: %v after %v", d, last)
		}
		last = d
	}
	creds := v.hold(&wechat.Error{Class: wechat.ClassCredentials, Errcode: 40164}, 1, noon)
	if creds < time.Minute {
		t.Fatalf("credentials hold %v, want at least a minute", creds)
	}
	daily := &wechat.Error{Class: wechat.ClassQuota, Errcode: 45009}
	if d := v.hold(daily, 1, noon); d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("daily quota at noon: hold %v, want a probe an hour later", d)
	}
	lateNight := time.Date(2026, 3, 1, 15, 50, 0, 0, time.UTC) // 23:50 in Beijing
	if d := v.hold(daily, 1, lateNight); d < 10*time.Minute || d > 11*time.Minute {
		t.Fatalf("daily quota at 23:50: hold %v, want until midnight", d)
	}
	minute := v.hold(&wechat.Error{Class: wechat.ClassQuota, Errcode: 45011}, 1, noon)
	if minute < time.Minute || minute > 72*time.Second {
		t.Fatalf("minute quota: hold %v", minute)
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

func TestKeysNameTheAccountNeverTheSecret(t *testing.T) {
	t.Parallel()
	classic := wechat.Config{Provider: wechat.ProviderWeChat, AppID: "wx1", Secret: "s3cret"}
	stable := classic
	stable.TokenAPI = wechat.TokenAPIStable
	corpA := wechat.Config{Provider: wechat.ProviderWeCom, AppID: "ww1", Secret: "agent-a"}
	corpB := corpA
	corpB.Secret = "agent-b"
	ids := map[string]bool{}
	for _, cfg := range []wechat.Config{classic, stable, corpA, corpB} {
		id := Identity(cfg)
		if ids[id] {
			t.Fatalf("two accounts share the identity %q", id)
		}
		ids[id] = true
		for _, k := range []string{id, fingerprint("credentials", cfg)} {
			if strings.Contains(k, cfg.Secret) {
				t.Fatalf("%q holds the secret", k)
			}
		}
	}
	if !strings.HasPrefix(Identity(classic), "wechat:classic:wx1:") || !strings.HasPrefix(Identity(stable), "wechat:stable:wx1:") {
		t.Fatalf("identities %q, %q", Identity(classic), Identity(stable))
	}
	rotated := classic
	rotated.Secret = "rotated"
	if Identity(rotated) == Identity(classic) || fingerprint("credentials", rotated) == fingerprint("credentials", classic) {
		t.Fatal("another secret must key another cache and scope other failure records")
	}
	// Every replica, of every version, must key the account alike.
	if got := Identity(classic); got != "wechat:classic:wx1:a418dcd60039" {
		t.Fatalf("Identity(classic) = %q: replicas of another version would not share the cache", got)
	}
}
