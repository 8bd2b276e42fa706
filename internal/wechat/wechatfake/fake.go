// Package wechatfake is a fake of the WeChat and WeCom token endpoints for
// tests and local trials. It mints tokens the way the real services do,
// with their windows and limits on an injectable clock, checks tokens on a
// validation endpoint, counts mints, and fails on demand.
//
// Endpoints:
//
//	GET  /cgi-bin/token?grant_type=client_credential&appid=&secret=   WeChat classic
//	POST /cgi-bin/stable_token {grant_type, appid, secret, force_refresh}  WeChat stable
//	GET  /cgi-bin/gettoken?corpid=&corpsecret=                         WeCom
//	GET  /cgi-bin/get_api_domain_ip?access_token=                      validation
//
// The validation endpoint answers errcode 0 for a valid token, 42001 for a
// token that reached its expires_in, and 40001 (WeCom: 40014) for a token the
// fake never issued or ended early (superseded, forced, revoked).
package wechatfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	dur(&o.ForceRefreshInterval, 30*time.Second)
	count(&o.ForceRefreshPerDay, 20)
	count(&o.DailyQuota, 2000)
	count(&o.StableDailyQuota, 500000)
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Server is the fake upstream; it is an http.Handler and safe for
// concurrent use.
type Server struct {
	opts Options
	ts   *httptest.Server
	mux  *http.ServeMux

	mu      sync.Mutex
	apps    map[string]*account // WeChat, by appid
	corps   map[string]*account // WeCom, by corpid
	tokens  map[string]*token
	faults  []fault
	latency time.Duration
	mints   map[string]int
	issued  map[string]int
	total   int
	seq     int
}

type account struct {
	id             string
	wecom          bool
	secret         string
	notWhitelisted bool
	current        map[api]*token // latest token per API
	day            string         // Beijing date the counters below belong to
	used           map[api]int    // tokens handed out today
	forces         int            // force_refresh calls today
	lastForce      time.Time
}

type api string

const (
	apiClassic api = "classic"
	apiStable  api = "stable"
	apiWeCom   api = "wecom"
)

type token struct {
	value   string
	owner   string // appid or corpid
	wecom   bool
	expires time.Time
	early   bool // ended before its lifetime: superseded, forced or revoked
}

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
		opts:   opts.withDefaults(),
		apps:   map[string]*account{},
		corps:  map[string]*account{},
		tokens: map[string]*token{},
		mints:  map[string]int{},
		issued: map[string]int{},
		mux:    http.NewServeMux(),
	}
	for id, secret := range opts.Apps {
		s.AddApp(id, secret)
	}
	for id, secret := range opts.Corps {
		s.AddCorp(id, secret)
	}
	for _, id := range opts.NotWhitelisted {
		s.SetWhitelisted(id, false)
	}
	s.mux.HandleFunc("/cgi-bin/token", s.classic)
	s.mux.HandleFunc("/cgi-bin/stable_token", s.stable)
	s.mux.HandleFunc("/cgi-bin/gettoken", s.wecom)
	s.mux.HandleFunc("/cgi-bin/get_api_domain_ip", s.validate)
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

// ServeHTTP serves the four endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

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
	m[id] = &account{id: id, wecom: wecom, secret: secret, current: map[api]*token{}, used: map[api]int{}}
}

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
func (s *Server) FailNext(n, errcode int) { s.inject(n, fault{errcode: errcode}) }

// FailHTTPNext makes the next n token requests answer HTTP status (e.g. 502)
// with a non-JSON body.
func (s *Server) FailHTTPNext(n, status int) { s.inject(n, fault{status: status}) }

func (s *Server) inject(n int, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults = append(s.faults, f)
	}
}

// SetLatency delays every later token request by d of real time (not the
// injected clock), or until the client gives up.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
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

// Issued returns how many distinct tokens were minted for id; the stable API
// and WeCom hand out the same token again without minting.
func (s *Server) Issued(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued[id]
}

// Valid reports whether the validation endpoint would accept tok now.
func (s *Server) Valid(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.check(tok) == 0
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
}

func (t *token) end(now time.Time) {
	if now.Before(t.expires) {
		t.expires, t.early = now, true
	}
}

// errmsgs holds the real services' messages for the errcodes the fake uses.
var errmsgs = map[int]string{
	-1:    "system error",
	40001: "invalid credential, access_token is invalid or not latest",
	40002: "invalid grant_type",
	40013: "invalid appid",
	40014: "invalid access_token",
	40125: "invalid appsecret",
	40164: "invalid ip 127.0.0.1, not in whitelist",
	41001: "access_token missing",
	41002: "appid missing",
	41004: "appsecret missing",
	42001: "access_token expired",
	43001: "require GET method",
	43002: "require POST method",
	45009: "reach max api daily quota limit",
	45011: "api minute-quota reach limit  mustslower  retry next minute",
	47001: "data format error",
	60020: "not allow to access from your ip",
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
	var f *fault
	if len(s.faults) > 0 {
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
		replyErr(w, f.errcode)
	}
	return true
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
		left := max(cur.expires.Sub(now)/time.Second, 1)
		return map[string]any{"access_token": cur.value, "expires_in": int64(left)}, 0
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
		wecom:   a.wecom,
		expires: now.Add(s.opts.ExpiresIn),
	}
	s.tokens[t.value] = t
	s.issued[a.id]++
	return t
}

func (s *Server) validate(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("access_token")
	s.mu.Lock()
	code := s.check(tok)
	s.mu.Unlock()
	if code != 0 {
		replyErr(w, code)
		return
	}
	reply(w, map[string]any{"errcode": 0, "errmsg": "ok", "ip_list": []string{"127.0.0.1"}})
}

// check returns the validation errcode of tok, under s.mu.
func (s *Server) check(tok string) int {
	if tok == "" {
		return 41001
	}
	t := s.tokens[tok]
	switch {
	case t == nil:
		return 40001
	case s.opts.Now().Before(t.expires):
		return 0
	case !t.early:
		return 42001
	case t.wecom:
		return 40014
	default:
		return 40001
	}
}

var beijing = time.FixedZone("CST", 8*3600)

func beijingDate(t time.Time) string { return t.In(beijing).Format(time.DateOnly) }
