// Package wechatfake is a fake of the token endpoints lockd mints from:
// WeChat and WeCom, Feishu/Lark, DingTalk and an OAuth2 client-credentials
// server, for tests and local trials. It mints tokens the way the real
// services do, with their windows and limits on an injectable clock, checks
// tokens on validation endpoints, serves JS-SDK tickets, counts every call
// per endpoint, and fails on demand.
//
// WeChat and WeCom endpoints:
//
//	GET  /cgi-bin/token?grant_type=client_credential&appid=&secret=   WeChat classic
//	POST /cgi-bin/stable_token {grant_type, appid, secret, force_refresh}  WeChat stable
//	GET  /cgi-bin/gettoken?corpid=&corpsecret=                         WeCom
//	GET  /cgi-bin/getcallbackip?access_token=                          validation (both)
//	GET  /cgi-bin/get_api_domain_ip?access_token=                      validation (both)
//	GET  /cgi-bin/ticket/getticket?access_token=&type=jsapi|wx_card    WeChat tickets
//	GET  /cgi-bin/get_jsapi_ticket?access_token=                       WeCom jsapi ticket
//	GET  /cgi-bin/ticket/get?access_token=&type=agent_config           WeCom agent_config ticket
//
// The classic API mints a new token on every call (the previous one lives
// on for ClassicGrace); the stable API in normal mode, WeCom and the ticket
// endpoints hand out the same value until it expires (stable: until its
// last StableLastWindow), announcing the life left in whole seconds,
// rounded as Options.Rounding says: rounded down, the last second of a
// token is announced as expires_in 0.
//
// The validation endpoints answer errcode 0 for a valid token, 42001 for a
// token that reached its expires_in, and 40001 (WeCom: 40014) for a token the
// fake never issued, ended early (superseded, forced, revoked) or was told
// to Reject.
//
// The other providers' endpoints (see providers.go):
//
//	POST /open-apis/auth/v3/tenant_access_token/internal {app_id, app_secret}   Feishu/Lark
//	POST /open-apis/auth/v3/app_access_token/internal    {app_id, app_secret}   Feishu/Lark
//	GET  /open-apis/contact/v3/scopes (Authorization: Bearer)                   Feishu validation
//	POST /v1.0/oauth2/accessToken {appKey, appSecret}                           DingTalk
//	GET  /gettoken?appkey=&appsecret=                                           DingTalk (legacy)
//	GET  /v1.0/contact/users/me (x-acs-dingtalk-access-token)                   DingTalk validation
//	POST /oauth2/token grant_type=client_credentials (Basic or body)            OAuth2 (RFC 6749 §4.4)
//	GET  /oauth2/resource (Authorization: Bearer)                               OAuth2 validation
//
// Feishu hands out the current token again while it has FeishuFreshWindow
// or more left, then a new one (the old one lives out its lifetime);
// DingTalk hands out the current token again with its life renewed, and a
// new one once it expired; the OAuth2 server mints a new token on every
// call unless OAuth2Reuse says otherwise.
package wechatfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configures a Server. Zero values take the real services' figures;
// a negative duration or count switches that window or limit off.
type Options struct {
	// Apps maps WeChat appids to their AppSecrets.
	Apps map[string]string
	// Corps maps WeCom corpids to their corpsecrets.
	Corps map[string]string
	// Feishu maps Feishu app_ids to their app_secrets.
	Feishu map[string]string
	// DingTalk maps DingTalk appKeys to their appSecrets.
	DingTalk map[string]string
	// OAuth2 maps OAuth2 client_ids to their client_secrets.
	OAuth2 map[string]string
	// OAuth2Scopes, when set, are the scopes a client may ask for; others
	// are invalid_scope.
	OAuth2Scopes []string
	// OAuth2Audience, when set, is the audience every request must name.
	OAuth2Audience string
	// OAuth2Reuse, when positive, makes the OAuth2 server hand out the
	// current token again while it has more than that left (some servers
	// do); by default every call mints a new token.
	OAuth2Reuse time.Duration
	// FeishuFreshWindow is the life left below which Feishu hands out a new
	// token rather than the current one (default 30 min).
	FeishuFreshWindow time.Duration
	// TicketFreshWindow is the life left below which the ticket endpoints
	// hand out a new ticket rather than the current one (the old one lives
	// out its lifetime); default 0: the same ticket until it expired.
	TicketFreshWindow time.Duration
	// Renew makes every endpoint that hands out the current token again
	// (stable in normal mode, WeCom, Feishu) renew its life to ExpiresIn and
	// announce that, as DingTalk does: an upstream lockd did not write,
	// such as a proxy in front of the real one.
	Renew bool
	// NotWhitelisted lists appids and corpids whose correct calls are
	// refused as coming from an IP outside the whitelist: 40164 (WeCom 60020).
	NotWhitelisted []string
	// ExpiresIn is the lifetime of a new token (default 7200 s; whole
	// seconds, at least one).
	ExpiresIn time.Duration
	// ClassicGrace is how long a classic token stays valid once a newer one
	// was minted (default 5 min).
	ClassicGrace time.Duration
	// StableLastWindow is the remaining lifetime below which the stable API
	// in normal mode mints a new token instead of returning the current one
	// (default 5 min). The previous token then lives out its lifetime.
	StableLastWindow time.Duration
	// ForceRefreshPerDay bounds the stable API's force_refresh calls per app
	// per day (default 20); beyond it the reply is 45009.
	ForceRefreshPerDay int
	// ForceRefreshInterval is the least time between two force_refresh calls
	// of one app (default 30 s); sooner, the reply is 45011.
	ForceRefreshInterval time.Duration
	// DailyQuota bounds the tokens handed out per app per day by the classic
	// API and by WeCom (default 2000); beyond it the reply is 45009.
	DailyQuota int
	// StableDailyQuota is DailyQuota for the stable API (default 500000).
	StableDailyQuota int
	// Rounding is how the life left of a token or ticket handed out again
	// is announced in whole seconds: RoundDown (the default; the last
	// second is expires_in 0) or RoundUp (the announced life may run out
	// up to a second early). A new token always announces ExpiresIn.
	Rounding Rounding
	// Now is the clock of every window and quota (default time.Now). Days
	// turn at midnight Beijing time, as WeChat's quotas do.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	dur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		} else if *d < 0 {
			*d = 0
		}
	}
	count := func(n *int, def int) {
		if *n == 0 {
			*n = def
		} else if *n < 0 {
			*n = 0 // 0 after defaults means unlimited
		}
	}
	dur(&o.ExpiresIn, 7200*time.Second)
	o.ExpiresIn = max(o.ExpiresIn.Truncate(time.Second), time.Second)
	dur(&o.ClassicGrace, 5*time.Minute)
	dur(&o.StableLastWindow, 5*time.Minute)
	dur(&o.FeishuFreshWindow, 30*time.Minute)
	dur(&o.ForceRefreshInterval, 30*time.Second)
	count(&o.ForceRefreshPerDay, 20)
	count(&o.DailyQuota, 2000)
	count(&o.StableDailyQuota, 500000)
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Rounding is how a remaining lifetime becomes whole seconds of expires_in.
type Rounding int

// The roundings of Options.Rounding.
const (
	// RoundDown truncates: 1.9 s left is expires_in 1, 0.9 s is 0.
	RoundDown Rounding = iota
	// RoundUp rounds up: 0.1 s left is expires_in 1.
	RoundUp
)

// seconds announces d as whole seconds, rounded as r says.
func (r Rounding) seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if r == RoundUp {
		return int64((d + time.Second - 1) / time.Second)
	}
	return int64(d / time.Second)
}

// Server is the fake upstream; it is an http.Handler and safe for
// concurrent use.
type Server struct {
	opts Options
	ts   *httptest.Server
	mux  *http.ServeMux

	mu         sync.Mutex
	apps       map[string]*account // WeChat, by appid
	corps      map[string]*account // WeCom, by corpid
	others     map[string]*account // Feishu, DingTalk and OAuth2, by kind:id
	seen       map[string][]string // access tokens the validation endpoints received, by path
	tokens     map[string]*token
	tickets    map[string]*token
	faults     []fault            // for the token endpoints
	pathFaults map[string][]fault // for one path
	latency    time.Duration
	replyDelay time.Duration
	mints      map[string]int
	issued     map[string]int
	forces     map[string]int
	calls      map[string]int // by path
	total      int
	seq        int
}

type account struct {
	id             string
	wecom          bool
	secret         string
	notWhitelisted bool
	current        map[api]*token    // latest token per API
	tickets        map[string]*token // current ticket per type
	day            string            // Beijing date the counters below belong to
	used           map[api]int       // tokens handed out today
	forces         int               // force_refresh calls today
	lastForce      time.Time
}

type api string

const (
	apiClassic      api = "classic"
	apiStable       api = "stable"
	apiWeCom        api = "wecom"
	apiFeishuTenant api = "feishu-tenant"
	apiFeishuApp    api = "feishu-app"
	apiDingTalk     api = "dingtalk"
	apiOAuth2       api = "oauth2"
)

type token struct {
	value   string
	owner   string // appid or corpid
	kind    api
	wecom   bool
	expires time.Time
	early   bool // ended before its lifetime: superseded, forced or revoked
	// rejected: refused by the validation and ticket endpoints, though
	// the token endpoints may still hand it out (Reject).
	rejected bool
	grant    grant // what an OAuth2 token was asked for
}

// grant is the scope and audience an OAuth2 token was asked for.
type grant struct{ scope, audience string }

type fault struct{ errcode, status int }

// New returns a Server listening on a loopback port; call Close when done.
func New(opts Options) *Server {
	s := NewHandler(opts)
	s.ts = httptest.NewServer(s)
	return s
}

// NewHandler returns a Server that does not listen: serve it with your own
// http.Server or httptest.Server. Its URL is empty.
func NewHandler(opts Options) *Server {
	s := &Server{
		opts:       opts.withDefaults(),
		apps:       map[string]*account{},
		corps:      map[string]*account{},
		others:     map[string]*account{},
		seen:       map[string][]string{},
		tokens:     map[string]*token{},
		tickets:    map[string]*token{},
		pathFaults: map[string][]fault{},
		mints:      map[string]int{},
		issued:     map[string]int{},
		forces:     map[string]int{},
		calls:      map[string]int{},
		mux:        http.NewServeMux(),
	}
	for id, secret := range opts.Apps {
		s.AddApp(id, secret)
	}
	for id, secret := range opts.Corps {
		s.AddCorp(id, secret)
	}
	for kind, m := range map[api]map[string]string{apiFeishuTenant: opts.Feishu, apiDingTalk: opts.DingTalk, apiOAuth2: opts.OAuth2} {
		for id, secret := range m {
			s.addOther(kind, id, secret)
		}
	}
	for _, id := range opts.NotWhitelisted {
		s.SetWhitelisted(id, false)
	}
	s.mux.HandleFunc("/cgi-bin/token", s.classic)
	s.mux.HandleFunc("/cgi-bin/stable_token", s.stable)
	s.mux.HandleFunc("/cgi-bin/gettoken", s.wecom)
	s.mux.HandleFunc("/cgi-bin/get_api_domain_ip", s.validate)
	s.mux.HandleFunc("/cgi-bin/getcallbackip", s.validate)
	s.mux.HandleFunc("/cgi-bin/ticket/getticket", s.wechatTicket)
	s.mux.HandleFunc("/cgi-bin/get_jsapi_ticket", s.wecomJSAPITicket)
	s.mux.HandleFunc("/cgi-bin/ticket/get", s.wecomTicket)
	s.mux.HandleFunc("/open-apis/auth/v3/tenant_access_token/internal", s.feishuToken(apiFeishuTenant))
	s.mux.HandleFunc("/open-apis/auth/v3/app_access_token/internal", s.feishuToken(apiFeishuApp))
	s.mux.HandleFunc("/open-apis/contact/v3/scopes", s.feishuScopes)
	s.mux.HandleFunc("/v1.0/oauth2/accessToken", s.dingtalkToken)
	s.mux.HandleFunc("/gettoken", s.dingtalkLegacyToken)
	s.mux.HandleFunc("/v1.0/contact/users/me", s.dingtalkMe)
	s.mux.HandleFunc("/oauth2/token", s.oauth2Token)
	s.mux.HandleFunc("/oauth2/resource", s.oauth2Resource)
	return s
}

// URL returns the base URL of a Server made by New, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// Close stops a Server made by New; it does nothing for NewHandler's.
func (s *Server) Close() {
	if s.ts != nil {
		s.ts.Close()
	}
}

// ServeHTTP serves the endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	delay := s.replyDelay
	s.mu.Unlock()
	if delay <= 0 {
		s.mux.ServeHTTP(w, r)
		return
	}
	// The request is served (a token minted) at once; the answer waits.
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, r)
	select {
	case <-time.After(delay):
	case <-r.Context().Done():
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// AddApp registers a WeChat app, or changes its secret.
func (s *Server) AddApp(appid, secret string) { s.add(s.apps, appid, secret, false) }

// AddCorp registers a WeCom corp, or changes its secret.
func (s *Server) AddCorp(corpid, secret string) { s.add(s.corps, corpid, secret, true) }

func (s *Server) add(m map[string]*account, id, secret string, wecom bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := m[id]; ok {
		a.secret = secret
		return
	}
	m[id] = &account{id: id, wecom: wecom, secret: secret, current: map[api]*token{}, tickets: map[string]*token{}, used: map[api]int{}}
}

// errmsgs holds the real services' messages for the errcodes the fake uses.
var errmsgs = map[int]string{
	-1:       "system error",
	40001:    "invalid credential, access_token is invalid or not latest",
	40097:    "invalid args",
	40002:    "invalid grant_type",
	40013:    "invalid appid",
	40014:    "invalid access_token",
	40125:    "invalid appsecret",
	40164:    "invalid ip 127.0.0.1, not in whitelist",
	41001:    "access_token missing",
	41002:    "appid missing",
	41004:    "appsecret missing",
	42001:    "access_token expired",
	43001:    "require GET method",
	43002:    "require POST method",
	45009:    "reach max api daily quota limit",
	45011:    "api minute-quota reach limit  mustslower  retry next minute",
	99991400: "request trigger frequency limit",
	47001:    "data format error",
	50002:    "user limited",
	60020:    "not allow to access from your ip",
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func replyErr(w http.ResponseWriter, errcode int) {
	msg, ok := errmsgs[errcode]
	if !ok {
		msg = "fake error"
	}
	reply(w, map[string]any{"errcode": errcode, "errmsg": msg})
}

// begin counts a token request, applies latency and pops a fault; it
// reports whether the request was answered.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, id string) bool {
	s.mu.Lock()
	s.total++
	if id != "" {
		s.mints[id]++
	}
	delay := s.latency
	s.mu.Unlock()
	return s.answerFault(w, r, true, delay)
}

// answerFault counts a call of r's path, waits delay and answers an
// injected fault for the path (or, for token endpoints, for every token
// endpoint); it reports whether the request was answered.
func (s *Server) answerFault(w http.ResponseWriter, r *http.Request, tokenEndpoint bool, delay time.Duration) bool {
	s.mu.Lock()
	s.calls[r.URL.Path]++
	var f *fault
	if q := s.pathFaults[r.URL.Path]; len(q) > 0 {
		f = &q[0]
		s.pathFaults[r.URL.Path] = q[1:]
	} else if tokenEndpoint && len(s.faults) > 0 {
		f = &s.faults[0]
		s.faults = s.faults[1:]
	}
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return true
		}
	}
	switch {
	case f == nil:
		return false
	case f.status != 0:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, "<html><body>%d %s</body></html>\n", f.status, http.StatusText(f.status))
	default:
		replyFault(w, r.URL.Path, f.errcode)
	}
	return true
}

// replyFault answers an injected errcode in the shape of path's provider.
func replyFault(w http.ResponseWriter, path string, errcode int) {
	msg, ok := errmsgs[errcode]
	if !ok {
		msg = "fake error"
	}
	switch {
	case strings.HasPrefix(path, "/open-apis/"):
		replyStatus(w, http.StatusBadRequest, map[string]any{"code": errcode, "msg": msg})
	case strings.HasPrefix(path, "/v1.0/"):
		replyStatus(w, http.StatusBadRequest, map[string]any{"code": strconv.Itoa(errcode), "message": msg, "requestid": "fake"})
	case strings.HasPrefix(path, "/oauth2/"):
		replyStatus(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "error_description": fmt.Sprintf("%s (%d)", msg, errcode)})
	default:
		replyErr(w, errcode)
	}
}

func (s *Server) classic(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if s.begin(w, r, q.Get("appid")) {
		return
	}
	switch {
	case r.Method != http.MethodGet:
		replyErr(w, 43001)
	case q.Get("grant_type") != "client_credential":
		replyErr(w, 40002)
	default:
		s.mintWeChat(w, q.Get("appid"), q.Get("secret"), apiClassic, false)
	}
}

func (s *Server) stable(w http.ResponseWriter, r *http.Request) {
	var req struct {
		GrantType    string `json:"grant_type"`
		AppID        string `json:"appid"`
		Secret       string `json:"secret"`
		ForceRefresh bool   `json:"force_refresh"`
	}
	decodeErr := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req)
	if s.begin(w, r, req.AppID) {
		return
	}
	switch {
	case r.Method != http.MethodPost:
		replyErr(w, 43002)
	case decodeErr != nil:
		replyErr(w, 47001)
	case req.GrantType != "client_credential":
		replyErr(w, 40002)
	default:
		s.mintWeChat(w, req.AppID, req.Secret, apiStable, req.ForceRefresh)
	}
}

func (s *Server) mintWeChat(w http.ResponseWriter, appid, secret string, which api, force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[appid]
	switch {
	case appid == "":
		replyErr(w, 41002)
	case secret == "":
		replyErr(w, 41004)
	case a == nil:
		replyErr(w, 40013)
	case secret != a.secret:
		replyErr(w, 40125)
	case a.notWhitelisted:
		replyErr(w, 40164)
	default:
		tok, errcode := s.mint(a, which, force)
		if errcode != 0 {
			replyErr(w, errcode)
			return
		}
		reply(w, tok)
	}
}

func (s *Server) wecom(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	corpid, secret := q.Get("corpid"), q.Get("corpsecret")
	if s.begin(w, r, corpid) {
		return
	}
	if r.Method != http.MethodGet {
		replyErr(w, 43001)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.corps[corpid]
	switch {
	case corpid == "":
		replyErr(w, 41002)
	case secret == "":
		replyErr(w, 41004)
	case a == nil:
		replyErr(w, 40013)
	case secret != a.secret:
		replyErr(w, 40001)
	case a.notWhitelisted:
		replyErr(w, 60020)
	default:
		tok, errcode := s.mint(a, apiWeCom, false)
		if errcode != 0 {
			replyErr(w, errcode)
			return
		}
		tok["errcode"], tok["errmsg"] = 0, "ok"
		reply(w, tok)
	}
}

// mint hands out a token of a for one API, under s.mu, or an errcode.
func (s *Server) mint(a *account, which api, force bool) (map[string]any, int) {
	now := s.opts.Now()
	if day := beijingDate(now); a.day != day {
		a.day, a.used, a.forces = day, map[api]int{}, 0
	}
	quota := s.opts.DailyQuota
	if which == apiStable {
		quota = s.opts.StableDailyQuota
	}
	if quota > 0 && a.used[which] >= quota {
		return nil, 45009
	}
	cur := a.current[which]
	if cur != nil && !now.Before(cur.expires) {
		cur = nil
	}
	if force {
		if n := s.opts.ForceRefreshPerDay; n > 0 && a.forces >= n {
			return nil, 45009
		}
		if d := s.opts.ForceRefreshInterval; d > 0 && !a.lastForce.IsZero() && now.Sub(a.lastForce) < d {
			return nil, 45011
		}
		a.forces++
		a.lastForce = now
		s.forces[a.id]++
	}
	a.used[which]++
	reuse := cur != nil && !force
	switch which {
	case apiClassic:
		reuse = false
	case apiStable:
		reuse = reuse && cur.expires.Sub(now) > s.opts.StableLastWindow
	}
	if reuse {
		if s.opts.Renew {
			cur.expires = now.Add(s.opts.ExpiresIn)
		}
		return map[string]any{"access_token": cur.value, "expires_in": s.opts.Rounding.seconds(cur.expires.Sub(now))}, 0
	}
	if cur != nil {
		switch {
		case force:
			cur.end(now)
		case which == apiClassic:
			cur.end(now.Add(s.opts.ClassicGrace))
		}
	}
	t := s.newToken(a, which, now)
	a.current[which] = t
	return map[string]any{"access_token": t.value, "expires_in": int64(s.opts.ExpiresIn / time.Second)}, 0
}

func (s *Server) newToken(a *account, which api, now time.Time) *token {
	s.seq++
	var b [16]byte
	_, _ = rand.Read(b[:])
	t := &token{
		value:   fmt.Sprintf("fake.%s.%d.%s", which, s.seq, hex.EncodeToString(b[:])),
		owner:   a.id,
		kind:    which,
		wecom:   a.wecom,
		expires: now.Add(s.opts.ExpiresIn),
	}
	s.tokens[t.value] = t
	s.issued[a.id]++
	return t
}

var beijing = time.FixedZone("CST", 8*3600)

func beijingDate(t time.Time) string { return t.In(beijing).Format(time.DateOnly) }
