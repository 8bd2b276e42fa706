package token_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func TestTicketsAreFetchedOnceForTheFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	fake.SetLatency(50 * time.Millisecond) // the token's mint: callers pile up
	f := newFleet(t, srv, 3, apps(fake), token.Options{})
	ctx := timeout(t, 30*time.Second)
	for _, p := range providers {
		for kind, path := range ticketPaths[p.name] {
			t.Run(fmt.Sprintf("%s %s", p.name, kind), func(t *testing.T) {
				before := fake.Calls(path)
				got := oneToken(t, "100 Ticket calls", f.concurrently(100, func(b *token.Broker) (token.Token, error) {
					return b.Ticket(ctx, p.name, kind, anyone)
				}))
				if !fake.TicketValid(got.AccessToken) || time.Until(got.ExpireTime) < 7100*time.Second {
					t.Fatalf("ticket %v: not valid, or not for two hours", got)
				}
				if n := fake.Calls(path) - before; n != 1 {
					t.Fatalf("%d ticket calls, want 1", n)
				}
			})
		}
		if n := fake.Issued(p.id); n != 1 {
			t.Fatalf("%s: %d tokens minted for its tickets, want 1", p.name, n)
		}
	}
}

func TestATicketCallWithARefusedTokenReplacesTheTokenOnce(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 2, apps(fake)[:1], token.Options{})
	ctx := timeout(t, 30*time.Second)
	t1, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	fake.Reject(t1.AccessToken)
	ticket, err := f.brokers[1].Ticket(ctx, "classic", "jsapi", anyone)
	if err != nil || !fake.TicketValid(ticket.AccessToken) {
		t.Fatalf("Ticket = %v, %v", ticket, err)
	}
	t2, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil || t2.AccessToken == t1.AccessToken || !fake.Valid(t2.AccessToken) {
		t.Fatalf("the refused token was not replaced: %v, %v", t2, err)
	}
	if n, c := fake.Mints("wx-classic"), fake.Calls("/cgi-bin/ticket/getticket"); n != 2 || c != 2 {
		t.Fatalf("%d token mints and %d ticket calls, want 2 and 2", n, c)
	}
}

func TestIdleAppsStopRefreshing(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{ExpiresIn: 4 * time.Second})
	// Nobody asks again within a second of the first call: by the time the
	// token is due for renewal (a second before it expires), the app is idle.
	f := newFleet(t, redistest.Start(t), 2, apps(fake)[:1], token.Options{IdleAfter: time.Second})
	f.refresh(t)
	ctx := timeout(t, time.Minute)
	t1, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the token to expire", func() bool { return !fake.Valid(t1.AccessToken) })
	time.Sleep(500 * time.Millisecond) // the refreshers' chance to err
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d mints for an app nobody asked for since the first, want 1", n)
	}
	t2, err := f.brokers[1].Get(ctx, "classic", anyone)
	if err != nil || t2.AccessToken == t1.AccessToken || fake.Mints("wx-classic") != 2 {
		t.Fatalf("the next caller: %v, %v; %d mints", t2, err, fake.Mints("wx-classic"))
	}
}

// TestTicketsAreRenewedAhead runs two replicas with their refreshers and
// callers asking for a jsapi ticket through several of its lifetimes, from
// an upstream that hands out a new ticket in the current one's last
// seconds: no caller gets a ticket with less than the margin left (too
// late for a browser's wx.config), and none fails.
func TestTicketsAreRenewedAhead(t *testing.T) {
	t.Parallel()
	const life, cycles, margin = 5 * time.Second, 3, time.Second
	fake := newFake(t, wechatfake.Options{ExpiresIn: life, TicketFreshWindow: 3 * time.Second})
	f := newFleet(t, redistest.Start(t), 2, apps(fake)[:1], token.Options{Margin: margin, RefreshAhead: 2 * time.Second})
	f.refresh(t)
	ctx := timeout(t, time.Minute)
	stop := make(chan struct{})
	time.AfterFunc(cycles*life, func() { close(stop) })
	var loop servedLoop
	loop.run(f, 4, stop, margin, fake.TicketValidAt, func(b *token.Broker) (token.Token, error) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return b.Ticket(c, "classic", "jsapi", anyone)
	})
	t.Logf("%d Ticket calls: %d failed, %d refused, %d with less than %v left; %d tickets issued",
		loop.calls.Load(), loop.failed.Load(), loop.refused.Load(), loop.short.Load(), margin, fake.TicketsIssued("wx-classic"))
	if loop.failed.Load()+loop.refused.Load()+loop.short.Load() > 0 {
		t.Fatalf("tickets not renewed ahead (first error: %v)", loop.firstErr.Load())
	}
	if n := fake.TicketsIssued("wx-classic"); n < cycles {
		t.Fatalf("%d tickets over %d lifetimes", n, cycles)
	}
}
