package wechat

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func TestMintAcceptsATokenInItsLastSecond(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, serve(t, body(`{"access_token":"tok","expires_in":0}`)), ProviderWeCom, "", nil)
	tok, err := c.Mint(t.Context(), false)
	if err != nil || tok.AccessToken != "tok" || tok.ExpiresIn != 0 {
		t.Fatalf("Mint = %v, %v; want the token with expires_in 0", tok, err)
	}
}

func TestFreshWindowPerAPI(t *testing.T) {
	t.Parallel()
	for _, f := range flavours {
		c := newTestClient(t, "https://example.com", f.provider, f.api, nil)
		want := map[string]time.Duration{"wechat classic": -1, "wechat stable": StableWindow, "wecom": 0}[f.name]
		if got := c.FreshWindow(); got != want {
			t.Errorf("%s: FreshWindow = %v, want %v", f.name, got, want)
		}
	}
}

func TestProbeTellsValidFromRejected(t *testing.T) {
	t.Parallel()
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{})
			c := newTestClient(t, fake.URL(), f.provider, f.api, nil)
			tok, err := c.Mint(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := c.Probe(t.Context(), tok.AccessToken); !ok || err != nil {
				t.Fatalf("Probe of a valid token = %v, %v", ok, err)
			}
			fake.Reject(tok.AccessToken)
			if ok, err := c.Probe(t.Context(), tok.AccessToken); ok || err != nil {
				t.Fatalf("Probe of a rejected token = %v, %v", ok, err)
			}
			fake.FailNextOn("/cgi-bin/getcallbackip", 1, 48001)
			ok, err := c.Probe(t.Context(), tok.AccessToken)
			var we *Error
			if ok || !errors.As(err, &we) || we.Errcode != 48001 || !strings.HasSuffix(we.Endpoint, "/cgi-bin/getcallbackip") {
				t.Fatalf("Probe answered 48001 = %v, %v; want an *Error", ok, err)
			}
		})
	}
}

func TestTickets(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	for _, f := range flavours {
		c := newTestClient(t, fake.URL(), f.provider, f.api, nil)
		tok, err := c.Mint(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range c.TicketTypes() {
			ticket, err := c.Ticket(t.Context(), tok.AccessToken, kind)
			if err != nil || !fake.TicketValid(ticket.AccessToken) || ticket.ExpiresIn < 7100*time.Second {
				t.Fatalf("%s %s: %v, %v", f.name, kind, ticket, err)
			}
			again, err := c.Ticket(t.Context(), tok.AccessToken, kind)
			if err != nil || again.AccessToken != ticket.AccessToken {
				t.Fatalf("%s %s again: %v, %v; want the same ticket", f.name, kind, again, err)
			}
		}
	}
	wx := newTestClient(t, fake.URL(), ProviderWeChat, TokenAPIClassic, nil)
	if _, err := wx.Ticket(t.Context(), "x", TicketAgentConfig); !errors.Is(err, ErrTicketType) {
		t.Fatalf("agent_config on WeChat = %v, want ErrTicketType", err)
	}
	ww := newTestClient(t, fake.URL(), ProviderWeCom, "", nil)
	if _, err := ww.Ticket(t.Context(), "x", TicketWXCard); !errors.Is(err, ErrTicketType) {
		t.Fatalf("wx_card on WeCom = %v, want ErrTicketType", err)
	}
}

func TestTicketWithARejectedTokenSaysSo(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	c := newTestClient(t, fake.URL(), ProviderWeCom, "", nil)
	tok, err := c.Mint(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	fake.Reject(tok.AccessToken)
	_, err = c.Ticket(t.Context(), tok.AccessToken, TicketAgentConfig)
	var we *Error
	if !errors.Is(err, ErrTokenRejected) || !errors.Is(err, ErrUnavailable) || !errors.As(err, &we) || we.Errcode != 40014 {
		t.Fatalf("Ticket with a rejected token = %v; want ErrTokenRejected with errcode 40014", err)
	}
	if strings.Contains(err.Error(), tok.AccessToken) {
		t.Fatalf("the error shows the access token: %v", err)
	}
}

func TestProbeAndTicketFailuresHideTheToken(t *testing.T) {
	t.Parallel()
	const accessToken = "AT/secret+token&x=1"
	c := newTestClient(t, closedURL(t), ProviderWeChat, TokenAPIClassic, nil)
	_, err := c.Probe(t.Context(), accessToken)
	_, terr := c.Ticket(t.Context(), accessToken, TicketJSAPI)
	for _, err := range []error{err, terr} {
		assertNoSecret(t, err)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want ErrUnavailable", err)
		}
		for _, form := range []string{accessToken, "secret+token", "secret%2Btoken"} {
			if strings.Contains(err.Error(), form) {
				t.Fatalf("%q in %v", form, err)
			}
		}
	}
	echo := newTestClient(t, serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"errcode":40097,"errmsg":"bad token ` + r.URL.Query().Get("access_token") + `"}`))
	}), ProviderWeChat, TokenAPIClassic, nil)
	_, err = echo.Ticket(t.Context(), "plain-token-value", TicketJSAPI)
	if err == nil || strings.Contains(err.Error(), "plain-token-value") {
		t.Fatalf("an errmsg echoing the token is not masked: %v", err)
	}
}
