package wechatfake

import "time"

// SetWhitelisted sets whether calls for an appid or corpid come from a
// whitelisted IP; when not, correct calls get 40164 (WeCom 60020).
func (s *Server) SetWhitelisted(id string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []map[string]*account{s.apps, s.corps} {
		if a := m[id]; a != nil {
			a.notWhitelisted = !ok
		}
	}
}

// FailNext makes the next n token requests, of any app, answer errcode.
// Injected failures queue behind earlier ones.
func (s *Server) FailNext(n, errcode int) { s.inject("", n, fault{errcode: errcode}) }

// FailHTTPNext makes the next n token requests answer HTTP status (e.g. 502)
// with a non-JSON body.
func (s *Server) FailHTTPNext(n, status int) { s.inject("", n, fault{status: status}) }

// FailNextOn makes the next n requests to path (e.g. "/cgi-bin/getcallbackip"
// or "/cgi-bin/gettoken") answer errcode. They are served before the
// failures FailNext queued for every token endpoint.
func (s *Server) FailNextOn(path string, n, errcode int) { s.inject(path, n, fault{errcode: errcode}) }

func (s *Server) inject(path string, n int, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		if path == "" {
			s.faults = append(s.faults, f)
		} else {
			s.pathFaults[path] = append(s.pathFaults[path], f)
		}
	}
}

// SetLatency delays every later token request by d of real time (not the
// injected clock), or until the client gives up.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// SetReplyDelay has every later request served at once (a token minted)
// but answered only after d of real time, or not at all if the client
// gives up first: an upstream whose answers are lost after it acted.
func (s *Server) SetReplyDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replyDelay = d
}

// Mints returns how many token requests named the appid or corpid id,
// whatever their outcome: what the upstream's own call counter would show.
func (s *Server) Mints(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mints[id]
}

// TotalMints returns how many token requests the Server received.
func (s *Server) TotalMints() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Calls returns how many requests path (e.g. "/cgi-bin/gettoken") received,
// whatever their outcome.
func (s *Server) Calls(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[path]
}

// Forces returns how many stable force_refresh calls of the appid id were
// accepted.
func (s *Server) Forces(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forces[id]
}

// Issued returns how many distinct tokens were minted for id; the stable API
// and WeCom hand out the same token again without minting.
func (s *Server) Issued(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued[id]
}

// Reject makes the validation and ticket endpoints refuse tok as invalid
// from now on (40001, WeCom 40014) while the token endpoints, which do not
// know, may still hand it out: an upstream that dropped a token on one side.
func (s *Server) Reject(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tokens[tok]; t != nil {
		t.rejected = true
	}
}

// RevokeTokens ends every token of the appid or corpid id at once, as the
// upstream may do on its own; the next mint returns a new one.
func (s *Server) RevokeTokens(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	for _, t := range s.tokens {
		if t.owner == id {
			t.end(now)
		}
	}
	for _, m := range []map[string]*account{s.apps, s.corps} {
		if a := m[id]; a != nil {
			clear(a.current)
		}
	}
	for _, a := range s.others {
		if a.id == id {
			clear(a.current)
		}
	}
}

func (t *token) end(now time.Time) {
	if now.Before(t.expires) {
		t.expires, t.early = now, true
	}
}
