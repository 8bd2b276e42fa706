package token_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestDescribe tells an app's token state without the token: nothing
// before the first mint, then expiry, mint time, mints today and the next
// refresh, and the upstream's last error once a mint failed.
func TestDescribe(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{})
	b := f.brokers[0]
	ctx := timeout(t, time.Minute)

	st, err := b.Describe(ctx, "classic")
	if err != nil || st.HasToken || st.MintsToday != 0 || st.LastError != "" || st.App != "classic" {
		t.Fatalf("before the first mint: %+v, %v", st, err)
	}
	tok, err := b.Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	st, err = b.Describe(ctx, "classic")
	if err != nil || !st.HasToken || st.MintsToday != 1 || st.LastError != "" {
		t.Fatalf("after a mint: %+v, %v", st, err)
	}
	if d := st.ExpireTime.Sub(tok.ExpireTime); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("expire %v, token's %v", st.ExpireTime, tok.ExpireTime)
	}
	if time.Since(st.LastMint) > 30*time.Second || !st.NextRefresh.After(time.Now()) || !st.NextRefresh.Before(st.ExpireTime) {
		t.Errorf("last mint %v, next refresh %v, expire %v", st.LastMint, st.NextRefresh, st.ExpireTime)
	}

	// A mint the upstream refuses is the last error, with its errcode.
	fake2 := newFake(t, wechatfake.Options{})
	b2 := newFleet(t, redistest.Start(t), 1, apps(fake2)[:1], token.Options{}).brokers[0]
	fake2.FailNext(1, 40001)
	if _, err := b2.Get(ctx, "classic", anyone); err == nil {
		t.Fatal("Get succeeded despite the upstream's refusal")
	}
	st, err = b2.Describe(ctx, "classic")
	if err != nil || st.HasToken || !strings.Contains(st.LastError, "errcode 40001") || st.FailedAttempts != 1 ||
		!st.RetryTime.After(time.Now()) || strings.Contains(st.LastError, classicSecret) {
		t.Errorf("after a failed mint: %+v, %v", st, err)
	}

	if _, err := b.Describe(ctx, "nope"); !errors.Is(err, token.ErrUnknownApp) {
		t.Errorf("unknown app: %v", err)
	}
}
