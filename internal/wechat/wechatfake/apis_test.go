package wechatfake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

type ticketAnswer struct {
	Errcode   int    `json:"errcode"`
	Errmsg    string `json:"errmsg"`
	Ticket    string `json:"ticket"`
	ExpiresIn int64  `json:"expires_in"`
}

func getTicket(t *testing.T, s *Server, target string) ticketAnswer {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	var a ticketAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("GET %s: %v in %q", target, err, rec.Body.String())
	}
	return a
}

func TestRoundingOfTheLifeLeft(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		rounding Rounding
		left     time.Duration
		want     int64
	}{
		{"rounded down, 1.9 s left is 1", RoundDown, 1900 * time.Millisecond, 1},
		{"rounded down, the last second is 0", RoundDown, 900 * time.Millisecond, 0},
		{"rounded up, 0.1 s left is 1", RoundUp, 100 * time.Millisecond, 1},
		{"rounded up, 1.2 s left is 2", RoundUp, 1200 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := fixture(Options{ExpiresIn: 10 * time.Second, Rounding: tt.rounding})
			first := mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
			c.Advance(10*time.Second - tt.left)
			a := wecom(t, s, "wwcorp", "corpsecret")
			if a.AccessToken != first || a.ExpiresIn != tt.want {
				t.Fatalf("got %+v, want the same token with expires_in %d", a, tt.want)
			}
		})
	}
}

func TestGetCallbackIPValidatesTokens(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{})
	wx := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	ww := mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	probe := func(tok string) int {
		return do(t, s, http.MethodGet, "/cgi-bin/getcallbackip?access_token="+url.QueryEscape(tok), nil).Errcode
	}
	if probe(wx) != 0 || probe(ww) != 0 {
		t.Fatal("a valid token was refused")
	}
	s.Reject(ww)
	if code := probe(ww); code != 40014 {
		t.Fatalf("rejected WeCom token: errcode %d, want 40014", code)
	}
	if got := mustToken(t, wecom(t, s, "wwcorp", "corpsecret")); got != ww {
		t.Fatal("the token endpoint stopped handing out a rejected token; Reject should not tell it")
	}
	c.Advance(2 * time.Hour)
	if code := probe(wx); code != 42001 {
		t.Fatalf("expired token: errcode %d, want 42001", code)
	}
	if n := s.Calls("/cgi-bin/getcallbackip"); n != 4 {
		t.Fatalf("Calls = %d, want 4", n)
	}
}

func TestTicketsAreHandedOutAgainUntilTheyExpire(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{ExpiresIn: 100 * time.Second})
	wx := mustToken(t, stable(t, s, "wxapp", "appsecret", false))
	ww := mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	endpoints := []struct{ name, target string }{
		{"wechat jsapi", "/cgi-bin/ticket/getticket?type=jsapi&access_token=" + url.QueryEscape(wx)},
		{"wechat wx_card", "/cgi-bin/ticket/getticket?type=wx_card&access_token=" + url.QueryEscape(wx)},
		{"wecom jsapi", "/cgi-bin/get_jsapi_ticket?access_token=" + url.QueryEscape(ww)},
		{"wecom agent_config", "/cgi-bin/ticket/get?type=agent_config&access_token=" + url.QueryEscape(ww)},
	}
	first := map[string]string{}
	for _, e := range endpoints {
		a := getTicket(t, s, e.target)
		if a.Errcode != 0 || a.Ticket == "" || a.ExpiresIn != 100 {
			t.Fatalf("%s: %+v", e.name, a)
		}
		first[e.name] = a.Ticket
	}
	c.Advance(40 * time.Second)
	for _, e := range endpoints {
		if a := getTicket(t, s, e.target); a.Ticket != first[e.name] || a.ExpiresIn != 60 {
			t.Fatalf("%s 40 s on: %+v, want the same ticket with 60 s left", e.name, a)
		}
		if !s.TicketValid(first[e.name]) {
			t.Fatalf("%s: TicketValid = false", e.name)
		}
	}
	c.Advance(60 * time.Second)
	if s.TicketValid(first["wecom jsapi"]) {
		t.Fatal("an expired ticket is valid")
	}
	// The tokens expired with the tickets.
	if a := getTicket(t, s, endpoints[2].target); a.Errcode != 42001 {
		t.Fatalf("ticket with an expired token: %+v, want 42001", a)
	}
	ww = mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	a := getTicket(t, s, "/cgi-bin/get_jsapi_ticket?access_token="+url.QueryEscape(ww))
	if a.Errcode != 0 || a.Ticket == first["wecom jsapi"] {
		t.Fatalf("after expiry: %+v, want a new ticket", a)
	}
	if n := s.TicketsIssued("wwcorp"); n != 3 {
		t.Fatalf("TicketsIssued = %d, want 3", n)
	}
}

func TestTicketRejections(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{})
	wx := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	ww := mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	s.Reject(wx)
	tests := []struct {
		name, target string
		want         int
	}{
		{"a rejected WeChat token gets 40001", "/cgi-bin/ticket/getticket?type=jsapi&access_token=" + url.QueryEscape(wx), 40001},
		{"a WeCom token on the WeChat endpoint gets 40001", "/cgi-bin/ticket/getticket?type=jsapi&access_token=" + url.QueryEscape(ww), 40001},
		{"a WeChat token on the WeCom endpoint gets 40014", "/cgi-bin/get_jsapi_ticket?access_token=" + url.QueryEscape(wx), 40014},
		{"an unknown type gets 40097", "/cgi-bin/ticket/get?type=jsapi&access_token=" + url.QueryEscape(ww), 40097},
		{"no token gets 41001", "/cgi-bin/get_jsapi_ticket", 41001},
	}
	for _, tt := range tests {
		if a := getTicket(t, s, tt.target); a.Errcode != tt.want || a.Ticket != "" {
			t.Errorf("%s: %+v", tt.name, a)
		}
	}
}

func TestCallsForcesAndFaultsPerPath(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{})
	s.FailNextOn("/cgi-bin/stable_token", 1, 50002)
	s.FailNext(1, -1)
	if a := stable(t, s, "wxapp", "appsecret", false); a.Errcode != 50002 {
		t.Fatalf("got %+v, want the path's fault first", a)
	}
	if a := stable(t, s, "wxapp", "appsecret", false); a.Errcode != -1 {
		t.Fatalf("got %+v, want the token endpoints' fault", a)
	}
	mustToken(t, stable(t, s, "wxapp", "appsecret", true))
	c.Advance(time.Minute)
	mustToken(t, stable(t, s, "wxapp", "appsecret", true))
	if n := s.Calls("/cgi-bin/stable_token"); n != 4 {
		t.Fatalf("Calls = %d, want 4", n)
	}
	if n := s.Forces("wxapp"); n != 2 {
		t.Fatalf("Forces = %d, want 2", n)
	}
	if n := s.Calls("/cgi-bin/token"); n != 0 {
		t.Fatalf("classic Calls = %d, want 0", n)
	}
}
