package wechatfake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// AddFeishu registers a Feishu app, or changes its secret.
func (s *Server) AddFeishu(appID, secret string) { s.addOther(apiFeishuTenant, appID, secret) }

// AddDingTalk registers a DingTalk app, or changes its secret.
func (s *Server) AddDingTalk(appKey, secret string) { s.addOther(apiDingTalk, appKey, secret) }

// AddOAuth2 registers an OAuth2 client, or changes its secret.
func (s *Server) AddOAuth2(clientID, secret string) { s.addOther(apiOAuth2, clientID, secret) }

func (s *Server) addOther(kind api, id, secret string) {
	if kind == apiFeishuApp {
		kind = apiFeishuTenant
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := string(kind) + ":" + id
	if a, ok := s.others[key]; ok {
		a.secret = secret
		return
	}
	s.others[key] = &account{id: id, secret: secret, current: map[api]*token{}, tickets: map[string]*token{}, used: map[api]int{}}
}

// other returns the account of kind and id, under s.mu.
func (s *Server) other(kind api, id string) *account {
	if kind == apiFeishuApp {
		kind = apiFeishuTenant
	}
	return s.others[string(kind)+":"+id]
}

func replyStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// handOut hands out a's token of kind under s.mu: the current one while it
// has more than keep left (renewed to ExpiresIn when renew), else a new
// one, the old one living out its lifetime. It returns the token and the
// life it announces.
func (s *Server) handOut(a *account, kind api, keep time.Duration, renew bool) (*token, time.Duration) {
	return s.handOutFor(a, kind, grant{}, keep, renew)
}

// handOutFor is handOut for one grant of an OAuth2 client: each scope and
// audience has a current token of its own.
func (s *Server) handOutFor(a *account, kind api, g grant, keep time.Duration, renew bool) (*token, time.Duration) {
	now := s.opts.Now()
	if day := beijingDate(now); a.day != day {
		a.day, a.used, a.forces = day, map[api]int{}, 0
	}
	a.used[kind]++
	slot := kind
	if g != (grant{}) {
		slot = kind + api("\x00"+g.scope+"\x00"+g.audience)
	}
	if cur := a.current[slot]; cur != nil && !cur.early && cur.expires.Sub(now) > keep && now.Before(cur.expires) {
		if renew || s.opts.Renew {
			cur.expires = now.Add(s.opts.ExpiresIn)
		}
		return cur, time.Duration(s.opts.Rounding.seconds(cur.expires.Sub(now))) * time.Second
	}
	t := s.newToken(a, kind, now)
	t.grant = g
	a.current[slot] = t
	return t, s.opts.ExpiresIn
}

// beginOther counts a token request for id and applies latency and faults;
// it reports whether the request was answered.
func (s *Server) beginOther(w http.ResponseWriter, r *http.Request, id string) bool {
	return s.begin(w, r, id)
}

// feishuToken serves Feishu's internal-app token endpoints.
func (s *Server) feishuToken(kind api) http.HandlerFunc {
	field := "tenant_access_token"
	if kind == apiFeishuApp {
		field = "app_access_token"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			AppID     string `json:"app_id"`
			AppSecret string `json:"app_secret"`
		}
		decodeErr := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req)
		if s.beginOther(w, r, req.AppID) {
			return
		}
		fail := func(code int, msg string) {
			replyStatus(w, http.StatusBadRequest, map[string]any{"code": code, "msg": msg})
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		a := s.other(kind, req.AppID)
		switch {
		case r.Method != http.MethodPost:
			replyStatus(w, http.StatusMethodNotAllowed, map[string]any{"code": 10003, "msg": "method not allowed"})
		case decodeErr != nil || req.AppID == "" || req.AppSecret == "" || a == nil:
			fail(10003, "invalid param")
		case req.AppSecret != a.secret:
			fail(10014, "app secret invalid")
		default:
			t, life := s.handOut(a, kind, s.opts.FeishuFreshWindow, false)
			reply(w, map[string]any{"code": 0, "msg": "ok", field: t.value, "expire": int64(life / time.Second)})
		}
	}
}

// feishuScopes serves GET /open-apis/contact/v3/scopes: an API call with a
// tenant_access_token, for checking which token a client used.
func (s *Server) feishuScopes(w http.ResponseWriter, r *http.Request) {
	if s.answerFault(w, r, false, 0) {
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	s.seen[r.URL.Path] = append(s.seen[r.URL.Path], tok)
	valid := ok && s.validOf(tok, apiFeishuTenant, apiFeishuApp)
	s.mu.Unlock()
	switch {
	case !ok || tok == "":
		replyStatus(w, http.StatusBadRequest, map[string]any{"code": 99991661, "msg": "Missing access token for authorization."})
	case !valid:
		replyStatus(w, http.StatusBadRequest, map[string]any{"code": 99991663, "msg": "Invalid access token for authorization."})
	default:
		reply(w, map[string]any{"code": 0, "msg": "success", "data": map[string]any{"department_ids": []string{"0"}, "user_ids": []string{}, "group_ids": []string{}}})
	}
}

// validOf reports whether tok is a valid token of one of kinds now, under s.mu.
func (s *Server) validOf(tok string, kinds ...api) bool {
	t := s.tokens[tok]
	return t != nil && slices.Contains(kinds, t.kind) && s.checkAt(tok, s.opts.Now()) == 0
}

// dingtalkToken serves DingTalk's POST /v1.0/oauth2/accessToken.
func (s *Server) dingtalkToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppKey    string `json:"appKey"`
		AppSecret string `json:"appSecret"`
	}
	decodeErr := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req)
	if s.beginOther(w, r, req.AppKey) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.other(apiDingTalk, req.AppKey)
	switch {
	case r.Method != http.MethodPost:
		replyStatus(w, http.StatusMethodNotAllowed, map[string]any{"code": "MethodNotAllowed", "message": "POST required", "requestid": "fake"})
	case decodeErr != nil || req.AppKey == "" || req.AppSecret == "":
		replyStatus(w, http.StatusBadRequest, map[string]any{"code": "MissingParameter", "message": "appKey and appSecret are required", "requestid": "fake"})
	case a == nil || req.AppSecret != a.secret:
		replyStatus(w, http.StatusBadRequest, map[string]any{"code": "invalidClientIdOrSecret", "message": "无效的clientId或者clientSecret", "requestid": "fake"})
	default:
		t, life := s.handOut(a, apiDingTalk, 0, true)
		reply(w, map[string]any{"accessToken": t.value, "expireIn": int64(life / time.Second)})
	}
}

// dingtalkLegacyToken serves DingTalk's GET /gettoken.
func (s *Server) dingtalkLegacyToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if s.beginOther(w, r, q.Get("appkey")) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.other(apiDingTalk, q.Get("appkey"))
	switch {
	case r.Method != http.MethodGet:
		reply(w, map[string]any{"errcode": 43001, "errmsg": "需要GET请求"})
	case a == nil || q.Get("appsecret") != a.secret:
		reply(w, map[string]any{"errcode": 40089, "errmsg": "不合法的appKey或appSecret"})
	default:
		t, life := s.handOut(a, apiDingTalk, 0, true)
		reply(w, map[string]any{"errcode": 0, "errmsg": "ok", "access_token": t.value, "expires_in": int64(life / time.Second)})
	}
}

// dingtalkMe serves GET /v1.0/contact/users/me: an API call with the
// x-acs-dingtalk-access-token header.
func (s *Server) dingtalkMe(w http.ResponseWriter, r *http.Request) {
	if s.answerFault(w, r, false, 0) {
		return
	}
	tok := r.Header.Get("x-acs-dingtalk-access-token")
	s.mu.Lock()
	s.seen[r.URL.Path] = append(s.seen[r.URL.Path], tok)
	valid := s.validOf(tok, apiDingTalk)
	s.mu.Unlock()
	if !valid {
		replyStatus(w, http.StatusUnauthorized, map[string]any{"code": "InvalidAuthentication", "message": "不合法的access_token", "requestid": "fake"})
		return
	}
	reply(w, map[string]any{"nick": "fake", "unionId": "fake-union"})
}

// oauth2Token serves an RFC 6749 §4.4 token endpoint.
func (s *Server) oauth2Token(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, desc string) {
		w.Header().Set("Cache-Control", "no-store")
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		}
		replyStatus(w, status, map[string]string{"error": code, "error_description": desc})
	}
	if r.Method != http.MethodPost {
		s.beginOther(w, r, "")
		fail(http.StatusMethodNotAllowed, "invalid_request", "POST required")
		return
	}
	_ = r.ParseForm()
	form := r.PostForm
	id, secret, basic := r.BasicAuth()
	if basic {
		// RFC 6749 §2.3.1: form-urlencoded before Basic encoding.
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	}
	inBody := form.Has("client_secret")
	if !basic {
		id, secret = form.Get("client_id"), form.Get("client_secret")
	}
	if s.beginOther(w, r, id) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.other(apiOAuth2, id)
	switch {
	case basic && inBody:
		fail(http.StatusBadRequest, "invalid_request", "more than one client authentication method")
	case form.Get("grant_type") != "client_credentials":
		fail(http.StatusBadRequest, "unsupported_grant_type", "only client_credentials is served")
	case a == nil || secret != a.secret:
		fail(http.StatusUnauthorized, "invalid_client", "client authentication failed")
	case s.opts.OAuth2Audience != "" && form.Get("audience") != s.opts.OAuth2Audience:
		fail(http.StatusBadRequest, "invalid_request", "unknown or missing audience")
	case !s.scopesAllowed(form.Get("scope")):
		fail(http.StatusBadRequest, "invalid_scope", "the requested scope is not allowed")
	default:
		g := grant{scope: form.Get("scope"), audience: form.Get("audience")}
		t, life := s.handOutFor(a, apiOAuth2, g, s.oauth2Keep(), false)
		w.Header().Set("Cache-Control", "no-store")
		answer := map[string]any{"access_token": t.value, "token_type": "Bearer", "expires_in": int64(life / time.Second)}
		if sc := form.Get("scope"); sc != "" {
			answer["scope"] = sc
		}
		reply(w, answer)
	}
}

// oauth2Keep is the life left above which the OAuth2 server hands out the
// current token again: never, unless OAuth2Reuse is set.
func (s *Server) oauth2Keep() time.Duration {
	if s.opts.OAuth2Reuse > 0 {
		return s.opts.OAuth2Reuse
	}
	return s.opts.ExpiresIn + time.Hour
}

func (s *Server) scopesAllowed(scope string) bool {
	if len(s.opts.OAuth2Scopes) == 0 {
		return true
	}
	for _, sc := range strings.Fields(scope) {
		if !slices.Contains(s.opts.OAuth2Scopes, sc) {
			return false
		}
	}
	return true
}

// oauth2Resource serves GET /oauth2/resource, a protected resource that
// wants a valid bearer token of the OAuth2 server.
func (s *Server) oauth2Resource(w http.ResponseWriter, r *http.Request) {
	if s.answerFault(w, r, false, 0) {
		return
	}
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	s.seen[r.URL.Path] = append(s.seen[r.URL.Path], tok)
	valid := s.validOf(tok, apiOAuth2)
	s.mu.Unlock()
	if !valid {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		replyStatus(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
		return
	}
	reply(w, map[string]string{"ok": "yes"})
}

// Grant returns the scope and audience the OAuth2 request that minted tok
// asked for (empty when it named none), and whether tok is an OAuth2 token
// the server issued.
func (s *Server) Grant(tok string) (scope, audience string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[tok]
	if t == nil || t.kind != apiOAuth2 {
		return "", "", false
	}
	return t.grant.scope, t.grant.audience, true
}

// Seen returns the access tokens the validation endpoint at path (e.g.
// "/open-apis/contact/v3/scopes", "/cgi-bin/getcallbackip") received, in
// order.
func (s *Server) Seen(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen[path]...)
}
