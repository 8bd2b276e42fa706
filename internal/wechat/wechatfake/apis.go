package wechatfake

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// The ticket types each endpoint serves.
var (
	wechatTicketTypes = map[string]bool{"jsapi": true, "wx_card": true}
	wecomTicketTypes  = map[string]bool{"agent_config": true}
)

// validate serves getcallbackip and get_api_domain_ip: errcode 0 and an
// IP list for a valid token, else why not.
func (s *Server) validate(w http.ResponseWriter, r *http.Request) {
	if s.answerFault(w, r, false, 0) {
		return
	}
	tok := r.URL.Query().Get("access_token")
	s.mu.Lock()
	s.seen[r.URL.Path] = append(s.seen[r.URL.Path], tok)
	code := s.check(tok)
	s.mu.Unlock()
	if code != 0 {
		replyErr(w, code)
		return
	}
	reply(w, map[string]any{"errcode": 0, "errmsg": "ok", "ip_list": []string{"127.0.0.1"}})
}

// check returns the validation errcode of tok now, under s.mu.
func (s *Server) check(tok string) int { return s.checkAt(tok, s.opts.Now()) }

// checkAt returns the validation errcode of tok at t, under s.mu.
func (s *Server) checkAt(tok string, at time.Time) int {
	if tok == "" {
		return 41001
	}
	t := s.tokens[tok]
	switch {
	case t == nil:
		return 40001
	case t.rejected && t.wecom:
		return 40014
	case t.rejected:
		return 40001
	case at.Before(t.expires):
		return 0
	case !t.early:
		return 42001
	case t.wecom:
		return 40014
	default:
		return 40001
	}
}

// Valid reports whether the validation endpoints would accept tok now.
func (s *Server) Valid(tok string) bool { return s.ValidAt(tok, s.opts.Now()) }

// ValidAt reports whether the validation endpoints would have accepted tok
// at t (of the Server's clock); a token told to Reject is refused at any t.
func (s *Server) ValidAt(tok string, t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkAt(tok, t) == 0
}

// TicketValid reports whether ticket was handed out and has not expired.
func (s *Server) TicketValid(ticket string) bool { return s.TicketValidAt(ticket, s.opts.Now()) }

// TicketValidAt reports whether ticket was handed out and not expired at t.
func (s *Server) TicketValidAt(ticket string, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tickets[ticket]
	return t != nil && at.Before(t.expires)
}

// TicketsIssued returns how many distinct tickets were minted for the appid
// or corpid id; a ticket is handed out again while it is valid.
func (s *Server) TicketsIssued(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tickets {
		if t.owner == id {
			n++
		}
	}
	return n
}

func (s *Server) wechatTicket(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.ticket(w, r, false, q.Get("type"), wechatTicketTypes)
}

func (s *Server) wecomJSAPITicket(w http.ResponseWriter, r *http.Request) {
	s.ticket(w, r, true, "jsapi", map[string]bool{"jsapi": true})
}

func (s *Server) wecomTicket(w http.ResponseWriter, r *http.Request) {
	s.ticket(w, r, true, r.URL.Query().Get("type"), wecomTicketTypes)
}

// ticket hands out the current ticket of kind for the account of the
// request's access_token, minting one when there is none or it expired.
func (s *Server) ticket(w http.ResponseWriter, r *http.Request, wecom bool, kind string, kinds map[string]bool) {
	if s.answerFault(w, r, false, 0) {
		return
	}
	if r.Method != http.MethodGet {
		replyErr(w, 43001)
		return
	}
	tok := r.URL.Query().Get("access_token")
	s.mu.Lock()
	defer s.mu.Unlock()
	invalid := 40001
	if wecom {
		invalid = 40014
	}
	code := s.check(tok)
	t := s.tokens[tok]
	switch {
	case code == 41001:
		replyErr(w, code)
		return
	case code == 42001:
		replyErr(w, 42001)
		return
	case code != 0 || t.wecom != wecom:
		replyErr(w, invalid)
		return
	case !kinds[kind]:
		replyErr(w, 40097)
		return
	}
	m := s.apps
	if wecom {
		m = s.corps
	}
	a := m[t.owner]
	if a == nil {
		replyErr(w, invalid)
		return
	}
	now := s.opts.Now()
	cur := a.tickets[kind]
	var answer map[string]any
	if cur != nil && now.Before(cur.expires) && cur.expires.Sub(now) > s.opts.TicketFreshWindow {
		answer = map[string]any{"ticket": cur.value, "expires_in": s.opts.Rounding.seconds(cur.expires.Sub(now))}
	} else {
		s.seq++
		var b [12]byte
		_, _ = rand.Read(b[:])
		cur = &token{value: fmt.Sprintf("fake.ticket.%s.%d.%s", kind, s.seq, hex.EncodeToString(b[:])),
			owner: a.id, wecom: wecom, expires: now.Add(s.opts.ExpiresIn)}
		a.tickets[kind] = cur
		s.tickets[cur.value] = cur
		answer = map[string]any{"ticket": cur.value, "expires_in": int64(s.opts.ExpiresIn / time.Second)}
	}
	answer["errcode"], answer["errmsg"] = 0, "ok"
	reply(w, answer)
}
