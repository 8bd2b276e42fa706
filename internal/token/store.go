package token

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/wechat"
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

	readScript  = redis.NewScript(readLua)
	writeScript = redis.NewScript(writeLua)
	failScript  = redis.NewScript(failLua)
	forceScript = redis.NewScript(forceLua)
)

// counterTTL is how long the per-day mint and force_refresh counters are
// kept: a week of history for operators.
const counterTTL = 8 * 24 * time.Hour

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

// keys names the Redis keys and channel of one app. They share the hash tag
// {<app>}, so one app's scripts run in one slot of a Redis Cluster; app names
// cannot hold braces (see New).
type keys struct {
	base    string // the token hash
	failure string
	channel string
}

func newKeys(prefix, app string) keys {
	base := prefix + ":{" + app + "}"
	return keys{base: base, failure: base + ":failure", channel: base + ":minted"}
}

func (k keys) mints(day string) string  { return k.base + ":mints:" + day }
func (k keys) forces(day string) string { return k.base + ":forces:" + day }
func (k keys) forceGate() string        { return k.base + ":force-gate" }

// state is what read.lua found: the cached token, if any, and the recorded
// failure, if any, with Redis's clock.
type state struct {
	now      time.Time
	token    string
	expire   time.Time
	lifetime time.Duration
	written  time.Time
	cause    Cause
	same     bool // the last mint handed back the token already cached
	gen      int64
	failure  *Error
}

// remaining is the token's life left by Redis's clock, or 0 without a token.
func (s state) remaining() time.Duration {
	if s.token == "" || !s.expire.After(s.now) {
		return 0
	}
	return s.expire.Sub(s.now)
}

func (s state) result() Token { return Token{AccessToken: s.token, ExpireTime: s.expire} }

func readState(reply []any, app string) (state, error) {
	if len(reply) != 10 {
		return state{}, fmt.Errorf("token: unexpected read reply of %d elements", len(reply))
	}
	str := func(i int) string { s, _ := reply[i].(string); return s }
	num := func(i int) int64 { n, _ := reply[i].(int64); return n }
	st := state{
		now:      time.UnixMilli(num(0)),
		token:    str(1),
		expire:   time.UnixMilli(num(2)),
		lifetime: time.Duration(num(3)) * time.Millisecond,
		written:  time.UnixMilli(num(4)),
		cause:    parseCause(str(5)),
		same:     num(6) == 1,
		gen:      num(7),
	}
	if rec := str(8); rec != "" {
		st.failure = &Error{App: app, Err: decodeFailure(rec), RetryAfter: time.Duration(num(9)) * time.Millisecond, Recorded: true}
	}
	return st, nil
}

// failureRecord is a failed mint as stored in Redis: what a *wechat.Error
// holds, which never includes the secret.
type failureRecord struct {
	Class      string `json:"class"`
	Errcode    int    `json:"errcode,omitempty"`
	Errmsg     string `json:"errmsg,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
	Endpoint   string `json:"endpoint"`
	Detail     string `json:"detail,omitempty"`
}

func encodeFailure(e *wechat.Error) string {
	r := failureRecord{Class: e.Class.String(), Errcode: e.Errcode, Errmsg: e.Errmsg, HTTPStatus: e.HTTPStatus, Endpoint: e.Endpoint}
	if e.Err != nil {
		r.Detail = e.Err.Error()
	}
	b, _ := json.Marshal(r) // cannot fail: strings and ints
	return string(b)
}

func decodeFailure(s string) *wechat.Error {
	var r failureRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return &wechat.Error{Class: wechat.ClassUnavailable, Err: errors.New("unreadable failure record")}
	}
	e := &wechat.Error{Errcode: r.Errcode, Errmsg: r.Errmsg, HTTPStatus: r.HTTPStatus, Endpoint: r.Endpoint}
	switch r.Class {
	case wechat.ClassCredentials.String():
		e.Class = wechat.ClassCredentials
	case wechat.ClassQuota.String():
		e.Class = wechat.ClassQuota
	default:
		e.Class = wechat.ClassUnavailable
	}
	if r.Detail != "" {
		e.Err = errors.New(r.Detail)
	}
	return e
}

// writeResult is what write.lua did.
type writeResult struct {
	stored bool   // our token is cached now
	newer  *Token // set when a newer minter's token is cached instead
}

func parseWrite(reply []any) (writeResult, time.Time, error) {
	if len(reply) == 0 {
		return writeResult{}, time.Time{}, errors.New("token: empty write reply")
	}
	status, _ := reply[0].(int64)
	switch {
	case status == 1 && len(reply) == 3:
		expire, _ := reply[1].(int64)
		return writeResult{stored: true}, time.UnixMilli(expire), nil
	case status == 0 && len(reply) == 3:
		tok, _ := reply[1].(string)
		expire, _ := reply[2].(int64)
		return writeResult{newer: &Token{AccessToken: tok, ExpireTime: time.UnixMilli(expire)}}, time.Time{}, nil
	case status == -1:
		return writeResult{}, time.Time{}, nil
	}
	return writeResult{}, time.Time{}, fmt.Errorf("token: unexpected write reply %v", reply)
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
