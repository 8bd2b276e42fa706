package token

import (
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/upstream"
)

var (
	//go:embed read.lua
	readLua string
	//go:embed write.lua
	writeLua string
	//go:embed fail.lua
	failLua string
	//go:embed force.lua
	forceLua string
	//go:embed take.lua
	takeLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed pace.lua
	paceLua string

	readScript    = redis.NewScript(readLua)
	writeScript   = redis.NewScript(writeLua)
	failScript    = redis.NewScript(failLua)
	forceScript   = redis.NewScript(forceLua)
	takeScript    = redis.NewScript(takeLua)
	restoreScript = redis.NewScript(restoreLua)
	paceScript    = redis.NewScript(paceLua)
)

// counterTTL is how long the per-day mint and force_refresh counters are
// kept: a week of history for operators.
const counterTTL = 8 * 24 * time.Hour

// keepAfterExpiry is how long a cached value's hash outlives the latest
// moment it may expire, so that its successor can be compared with it.
const keepAfterExpiry = time.Minute

// failureKeep is how long a failure record outlives its hold, so that the
// next failure counts as one more in a row.
const failureKeep = time.Hour

// shanghai is WeChat's day for quotas: midnight in Beijing. A fixed zone, so
// that lockd needs no tzdata (China has had no daylight saving since 1991).
var shanghai = time.FixedZone("Asia/Shanghai", 8*3600)

// Day returns the date, in WeChat's day (Asia/Shanghai), that t belongs to,
// as the day counters' keys spell it: "2006-01-02".
func Day(t time.Time) string { return t.In(shanghai).Format(time.DateOnly) }

// untilNextDay returns how long after t WeChat's next day starts.
func untilNextDay(t time.Time) time.Duration {
	y, m, d := t.In(shanghai).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, shanghai).Sub(t)
}

// Identity names the upstream account whose tokens an app serves: the
// provider, its token API and appid, and a fingerprint of the secret (a
// keyed digest, never the secret), e.g. "wechat:classic:wx1234:a418dcd60039".
// The fleet's keys for the account are Options.Prefix+":token:{"+Identity+"}"
// and below, so that configurations sharing a Redis never hand one
// account's token to another, and a deployment that knows an appid but not
// its secret never reads the token cached by the one that does.
func Identity(cfg upstream.Config) string {
	api := cfg.TokenAPI
	if cfg.Provider == upstream.WeChat && api == "" {
		api = upstream.TokenAPIClassic
	}
	id := cfg.Provider + ":"
	if api != "" {
		id += api + ":"
	}
	return id + cfg.AppID + ":" + secretFingerprint(cfg)
}

// account names an upstream account for New's check that no two apps
// share one: the identity without the secret's fingerprint (one appid has
// one secret at a time), except for WeCom, where each app of a corp has a
// secret and a token of its own, and OAuth2, where one client's tokens
// differ by server, scope and audience.
func account(cfg upstream.Config) string {
	id := Identity(cfg)
	if cfg.Provider == upstream.WeCom || cfg.Provider == upstream.OAuth2 {
		return id
	}
	return id[:strings.LastIndexByte(id, ':')]
}

// secretFingerprint is an HMAC-SHA256 of the secret keyed by the provider
// and appid, truncated to 48 bits: enough to keep two secrets of one appid
// apart, too little to say anything about a secret of real length, and
// never the secret itself. For OAuth2 it also covers the token_url, scope
// and audience, which make other tokens of the same client.
func secretFingerprint(cfg upstream.Config) string {
	m := hmac.New(sha256.New, []byte("lockd token cache\x00"+cfg.Provider+"\x00"+cfg.AppID))
	m.Write([]byte(cfg.Secret))
	if cfg.Provider == upstream.OAuth2 {
		for _, part := range []string{cfg.TokenURL, cfg.Scope, cfg.Audience} {
			m.Write([]byte{0})
			m.Write([]byte(part))
		}
	}
	return hex.EncodeToString(m.Sum(nil))[:12]
}

// fingerprint is a one-way digest of cfg's credentials for use, together
// with purpose, in Redis keys: never the secret itself.
func fingerprint(purpose string, cfg upstream.Config) string {
	h := sha256.New()
	for _, part := range []string{"lockd", purpose, cfg.Provider, cfg.TokenAPI, cfg.AppID, cfg.Secret} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// tokenHash names a reported token in verdicts and charge markers without
// storing the token.
func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])[:16]
}

// appKeys names the Redis keys and channel of one app. They share the hash
// tag {<identity>}, so one app's scripts run in one slot of a Redis Cluster.
type appKeys struct {
	base    string // prefix:token:{identity}
	channel string
}

func newAppKeys(prefix, id string) appKeys {
	base := prefix + ":token:{" + id + "}"
	return appKeys{base: base, channel: base + ":notice"}
}

func (k appKeys) forces(day string) string { return k.base + ":forces:" + day }
func (k appKeys) forceGate() string        { return k.base + ":force-gate" }
func (k appKeys) reports(window int64) string {
	return k.base + ":reports:" + strconv.FormatInt(window, 10)
}
func (k appKeys) client(name string, window int64) string {
	return k.base + ":client:" + name + ":" + strconv.FormatInt(window, 10)
}
func (k appKeys) charged(name, tokHash string) string {
	return k.base + ":charged:" + name + ":" + tokHash
}

// valueKeys names the keys of one cached value: the access_token (base) or
// a ticket (base:ticket:<type>).
type valueKeys struct {
	value   string
	failure string // scoped to the credentials' fingerprint
	demand  string
	verdict string
	gate    string // present while the last upstream call is under the pace old
	calls   string // upstream calls in the hour
}

func newValueKeys(app appKeys, ticket upstream.TicketType, fp string) valueKeys {
	v := app.base
	if ticket != "" {
		v += ":ticket:" + string(ticket)
	}
	return valueKeys{value: v, failure: v + ":failure:" + fp, demand: v + ":demand", verdict: v + ":verdict",
		gate: v + ":fetch-gate", calls: v + ":fetches"}
}

func (k valueKeys) mints(day string) string { return k.value + ":mints:" + day }

// verdict is what the fleet last concluded about a reported token.
type verdict struct {
	hash    string    // tokenHash of the token
	kind    string    // verdictValid or verdictLimited
	at      time.Time // by the broker's clock
	until   time.Time // verdictLimited: when a mint may be tried again
	why     string
	errcode int
	count   int // verdictValid: the upstream accepted the token this many times in a row
}

const (
	verdictValid   = "valid"
	verdictLimited = "limited"
)

// state is what read.lua found, with Redis's clock and the local time the
// read was sent, so that later decisions can count the time since.
type state struct {
	at         time.Time // local clock when the read was sent
	now        time.Time // Redis's clock
	token      string
	expire     time.Time // the earliest the value may expire
	hi         time.Time // the latest it may expire
	renew      time.Time // zero: a fresher value can be had any time
	lifetime   time.Duration
	written    time.Time
	gen        int64
	ver        int64           // the value's version: higher is newer, across Redis's data going back
	failure    *Error          // the recorded failure while its hold lasts
	lastFail   *upstream.Error // the recorded failure, held or not
	failUntil  time.Time       // when its hold ends
	attempts   int             // failed mints in a row
	demand     bool
	mintsToday int64
	verdict    verdict
	// reporterKnown is true when the last check of the verdict's token
	// answered a report of the reporter passed to the read.
	reporterKnown bool
}

// elapsed is the time since the read was sent.
func (s state) elapsed() time.Duration { return time.Since(s.at) }

// nowish is Redis's clock now, as far as this replica can tell.
func (s state) nowish() time.Time { return s.now.Add(s.elapsed()) }

// left is the value's life left now, or 0 without a value.
func (s state) left() time.Duration {
	if s.token == "" {
		return 0
	}
	return max(s.expire.Sub(s.nowish()), 0)
}

// fresherIn is how long until the upstream hands out a fresher value than
// the cached one; 0 when it would now.
func (s state) fresherIn() time.Duration {
	if s.renew.IsZero() {
		return 0
	}
	return max(s.renew.Sub(s.nowish()), 0)
}

func (s state) result() Token { return Token{AccessToken: s.token, ExpireTime: s.expire, ver: s.ver} }

func readState(reply []any, name string, at time.Time) (state, error) {
	if len(reply) != 22 {
		return state{}, fmt.Errorf("token: unexpected read reply of %d elements", len(reply))
	}
	str := func(i int) string { s, _ := reply[i].(string); return s }
	num := func(i int) int64 { n, _ := reply[i].(int64); return n }
	ms := func(i int) time.Time {
		if n := num(i); n > 0 {
			return time.UnixMilli(n)
		}
		return time.Time{}
	}
	st := state{
		at:         at,
		now:        time.UnixMilli(num(0)),
		token:      str(1),
		expire:     ms(2),
		hi:         ms(3),
		renew:      ms(4),
		lifetime:   time.Duration(num(5)) * time.Millisecond,
		written:    ms(6),
		gen:        num(7),
		attempts:   int(num(10)),
		demand:     num(11) == 1,
		mintsToday: num(12),
		verdict: verdict{hash: str(13), kind: str(14), at: ms(15), until: ms(16),
			why: str(17), errcode: int(num(18)), count: int(num(19))},
		ver:           num(20),
		reporterKnown: num(21) == 1,
	}
	if rec := str(8); rec != "" {
		st.lastFail, st.failUntil = decodeFailure(rec), ms(9)
	}
	if rec, until := str(8), ms(9); rec != "" && until.After(st.now) {
		st.failure = &Error{App: name, Err: decodeFailure(rec), RetryAfter: until.Sub(st.now), Recorded: true}
	}
	return st, nil
}

// failureRecord is a failed mint as stored in Redis: what a *upstream.Error
// holds, which never includes the secret.
type failureRecord struct {
	Provider   string `json:"provider,omitempty"`
	Class      string `json:"class"`
	Errcode    int    `json:"errcode,omitempty"`
	Code       string `json:"code,omitempty"`
	Errmsg     string `json:"errmsg,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
	Endpoint   string `json:"endpoint"`
	Detail     string `json:"detail,omitempty"`
	Transport  bool   `json:"transport,omitempty"`
}

func encodeFailure(e *upstream.Error) string {
	r := failureRecord{Provider: e.Provider, Class: e.Class.String(), Errcode: e.Errcode, Code: e.Code, Errmsg: e.Errmsg,
		HTTPStatus: e.HTTPStatus, Endpoint: e.Endpoint, Transport: e.Transport}
	if e.Err != nil {
		r.Detail = e.Err.Error()
	}
	b, _ := json.Marshal(r) // cannot fail: strings and ints
	return string(b)
}

func decodeFailure(s string) *upstream.Error {
	var r failureRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return &upstream.Error{Class: upstream.ClassUnavailable, Err: errors.New("unreadable failure record")}
	}
	e := &upstream.Error{Provider: r.Provider, Errcode: r.Errcode, Code: r.Code, Errmsg: r.Errmsg, HTTPStatus: r.HTTPStatus,
		Endpoint: r.Endpoint, Transport: r.Transport}
	switch r.Class {
	case upstream.ClassCredentials.String():
		e.Class = upstream.ClassCredentials
	case upstream.ClassQuota.String():
		e.Class = upstream.ClassQuota
	default:
		e.Class = upstream.ClassUnavailable
	}
	if r.Detail != "" {
		e.Err = errors.New(r.Detail)
	}
	return e
}

// writeResult is what write.lua did.
type writeResult struct {
	stored   bool // our value is cached now
	same     bool // the upstream handed out the value already cached
	renewed  bool // and renewed its life
	expire   time.Time
	hi       time.Time
	renew    time.Time
	lifetime time.Duration
	gen      int64
	ver      int64
	now      time.Time // Redis's clock
	newer    *Token    // set when another minter's value is cached instead
}

func parseWrite(reply []any) (writeResult, error) {
	if len(reply) == 0 {
		return writeResult{}, errors.New("token: empty write reply")
	}
	num := func(i int) int64 { n, _ := reply[i].(int64); return n }
	switch status := num(0); {
	case status == 1 && len(reply) == 10:
		r := writeResult{stored: true, same: num(4) == 1, renewed: num(7) == 1, expire: time.UnixMilli(num(1)), gen: num(2),
			now: time.UnixMilli(num(5)), ver: num(6), hi: time.UnixMilli(num(8)), lifetime: time.Duration(num(9)) * time.Millisecond}
		if n := num(3); n > 0 {
			r.renew = time.UnixMilli(n)
		}
		return r, nil
	case status == 0 && len(reply) == 4:
		tok, _ := reply[1].(string)
		return writeResult{newer: &Token{AccessToken: tok, ExpireTime: time.UnixMilli(num(2)), ver: num(3)}}, nil
	}
	return writeResult{}, fmt.Errorf("token: unexpected write reply %v", reply)
}

// parseForce reads force.lua's reply: whether a force_refresh may be sent,
// and if not, why and for how long.
func parseForce(reply []any, now time.Time, perDay int) (ok bool, why string, wait time.Duration, err error) {
	if len(reply) == 0 {
		return false, "", 0, errors.New("token: empty force reply")
	}
	if n, _ := reply[0].(int64); n == 1 {
		return true, "", 0, nil
	}
	if len(reply) != 3 {
		return false, "", 0, fmt.Errorf("token: unexpected force reply %v", reply)
	}
	kind, _ := reply[1].(string)
	n, _ := reply[2].(int64)
	if kind == "daily" {
		return false, "the daily limit of " + strconv.Itoa(perDay) + " force_refresh calls is spent", untilNextDay(now), nil
	}
	wait = time.Duration(n) * time.Millisecond
	return false, "the last force_refresh was too recent", wait, nil
}
