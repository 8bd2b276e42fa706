package embedded

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// outcome is what a script returns: a value (int64 written as int) or an
// error containing err.
type outcome struct {
	val any
	err string
}

// TestLuaAsTheLockScriptsUseIt runs each script on the embedded store and on
// a real redis-server. redis is what redis-server 7 returns; mini, when set,
// is where miniredis differs. KEYS[1] is a fresh key, ARGV[1] is "41".
func TestLuaAsTheLockScriptsUseIt(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		script string
		redis  outcome
		mini   *outcome
	}{
		"TIME returns two strings: seconds and microseconds": {
			script: `local t = redis.call('TIME'); return {type(t[1]), type(t[2]), #t, tonumber(t[2]) < 1000000 and 1 or 0}`,
			redis:  outcome{val: []any{"string", "string", 2, 1}},
		},
		"TIME composes a microsecond timestamp exactly with %d": {
			script: `local t = redis.call('TIME')
				local us = t[1] * 1000000 + t[2]
				return tostring(string.format('%d', us) == t[1] .. string.format('%06d', t[2]))`,
			redis: outcome{val: "true"},
		},
		"TIME advances during a script (on the embedded store by a microsecond a call at least)": {
			script: `local a = redis.call('TIME')
				local x = 0; for i = 1, 200000 do x = x + i end
				local b = redis.call('TIME')
				return ((b[1] - a[1]) * 1000000 + (b[2] - a[2]) > 0) and 'advances' or 'stands still'`,
			redis: outcome{val: "advances"},
		},
		"keys do not expire while a script runs": {
			script: `redis.call('SET', KEYS[1], 'v', 'PX', 1)
				local x = 0; for i = 1, 500000 do x = x + i end
				return redis.call('EXISTS', KEYS[1])`,
			redis: outcome{val: 1},
		},
		"string.format %.0f and %d print 16-digit numbers exactly": {
			script: `local x = 1800000000000001; return {string.format('%.0f', x), string.format('%d', x), string.format('%i', x)}`,
			redis:  outcome{val: []any{"1800000000000001", "1800000000000001", "1800000000000001"}},
		},
		"string.format %d truncates and %.0f rounds half to even": {
			script: `return string.format('%d %d %.0f %.0f', 3.7, -3.7, 2.5, 3.5)`,
			redis:  outcome{val: "3 -3 2 4"},
		},
		"tonumber parses 16-digit strings exactly": {
			script: `return string.format('%d', tonumber('1800000000000001') + 1)`,
			redis:  outcome{val: "1800000000000002"},
		},
		"tostring, .. and %s keep 14 significant digits on Redis, all on miniredis": {
			script: `local x = 1800000000000001; return {tostring(x), '' .. x, string.format('%s', x), tostring(1234567890123)}`,
			redis:  outcome{val: []any{"1.8e+15", "1.8e+15", "1.8e+15", "1234567890123"}},
			mini:   &outcome{val: []any{"1800000000000001", "1800000000000001", "1800000000000001", "1234567890123"}},
		},
		"integral numbers passed to redis.call keep all digits": {
			script: `redis.call('SET', KEYS[1], 1800000000000001); return redis.call('GET', KEYS[1])`,
			redis:  outcome{val: "1800000000000001"},
		},
		"fractional numbers passed to redis.call are printed with %.17g on Redis only": {
			script: `redis.call('SET', KEYS[1], 0.1); return redis.call('GET', KEYS[1])`,
			redis:  outcome{val: "0.10000000000000001"},
			mini:   &outcome{val: "0.1"},
		},
		"ARGV arrives as strings that arithmetic coerces": {
			script: `return {type(ARGV[1]), ARGV[1] + 1}`,
			redis:  outcome{val: []any{"string", 42}},
		},
		"a returned number becomes an integer reply, truncated": {
			script: `return 3.9`,
			redis:  outcome{val: 3},
		},
		"integers beyond 2^31 and nested tables return exactly": {
			script: `return {5000000000, -5000000000, 1800000000000001, {2, {3, 'x'}}}`,
			redis:  outcome{val: []any{5000000000, -5000000000, 1800000000000001, []any{2, []any{3, "x"}}}},
		},
		"true returns 1, false returns nil, and nil ends an array": {
			script: `return {true, false, 'x', nil, 'y'}`,
			redis:  outcome{val: []any{1, nil, "x"}},
		},
		"false returns nil": {
			script: `return false`,
			redis:  outcome{err: "redis: nil"},
		},
		"redis.error_reply returns an error with its code": {
			script: `return redis.error_reply('NOTHELD lease not held')`,
			redis:  outcome{err: "NOTHELD lease not held"},
		},
		"redis.status_reply returns a status": {
			script: `return redis.status_reply('FINE')`,
			redis:  outcome{val: "FINE"},
		},
		"a failing redis.call aborts the script with the command's error": {
			script: `redis.call('SET', KEYS[1], 'x'); redis.call('INCR', KEYS[1]); return 'not reached'`,
			redis:  outcome{err: "ERR value is not an integer or out of range script: "},
			mini:   &outcome{err: "ERR Error compiling script (new function): :1: ERR value is not an integer or out of range stack traceback:"},
		},
		"redis.pcall returns the error as a table": {
			script: `redis.call('SET', KEYS[1], 'x'); local r = redis.pcall('INCR', KEYS[1]); return r.err`,
			redis:  outcome{val: "ERR value is not an integer or out of range"},
		},
		"pcall around redis.call catches the error": {
			script: `redis.call('SET', KEYS[1], 'x'); local ok, e = pcall(redis.call, 'INCR', KEYS[1]); return {tostring(ok), type(e)}`,
			redis:  outcome{val: []any{"false", "string"}},
		},
		"error with a table keeps its code only on Redis": {
			script: `error({err = 'NOTHELD lease not held'})`,
			redis:  outcome{err: "NOTHELD lease not held"},
			mini:   &outcome{err: "ERR Error compiling script (new function): table: 0x"},
		},
		"an unknown command aborts the script": {
			script: `return redis.call('NOSUCHCOMMAND')`,
			redis:  outcome{err: "Unknown Redis command called from script"},
		},
		"scripts cannot create globals": {
			script: `x = 5; return x`,
			redis:  outcome{err: "Attempt to modify a readonly table"},
			mini:   &outcome{err: "Script attempted to create global variable 'x'"},
		},
		"SET PX NX returns OK, then false": {
			script: `local a = redis.call('SET', KEYS[1], 'v', 'PX', 1000, 'NX')
				local b = redis.call('SET', KEYS[1], 'v', 'PX', 1000, 'NX')
				return {a['ok'], tostring(b)}`,
			redis: outcome{val: []any{"OK", "false"}},
		},
		"SET KEEPTTL keeps the expiry and SET GET returns the old value": {
			script: `redis.call('SET', KEYS[1], 'v', 'PX', 1000)
				local old = redis.call('SET', KEYS[1], 'w', 'KEEPTTL', 'GET')
				return {old, redis.call('PTTL', KEYS[1]) > 900 and 1 or 0}`,
			redis: outcome{val: []any{"v", 1}},
		},
		"PEXPIRE sets and PTTL reads a millisecond TTL": {
			script: `redis.call('SET', KEYS[1], 'v')
				local before = redis.call('PTTL', KEYS[1])
				local set = redis.call('PEXPIRE', KEYS[1], 1500)
				local left = redis.call('PTTL', KEYS[1])
				return {before, set, (left > 1400 and left <= 1500) and 1 or 0, redis.call('PTTL', 'missing:' .. KEYS[1])}`,
			redis: outcome{val: []any{-1, 1, 1, -2}},
		},
		"PEXPIRE GT only extends": {
			script: `redis.call('SET', KEYS[1], 'v', 'PX', 1000)
				return {redis.call('PEXPIRE', KEYS[1], 500, 'GT'), redis.call('PEXPIRE', KEYS[1], 5000, 'GT'),
					redis.call('PTTL', KEYS[1]) > 4900 and 1 or 0}`,
			redis: outcome{val: []any{0, 1, 1}},
		},
		"PEXPIRE of a missing key returns 0": {
			script: `return redis.call('PEXPIRE', KEYS[1], 100)`,
			redis:  outcome{val: 0},
		},
		"PEXPIREAT at a TIME-derived deadline gives that PTTL, within a millisecond": {
			script: `local t = redis.call('TIME')
				redis.call('SET', KEYS[1], 'v')
				redis.call('PEXPIREAT', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) + 5000)
				local left = redis.call('PTTL', KEYS[1])
				return (left >= 4998 and left <= 5000) and 1 or 0`,
			redis: outcome{val: 1},
		},
		"PEXPIRETIME is TIME plus the TTL": {
			script: `redis.call('SET', KEYS[1], 'v', 'PX', 100000)
				local e = redis.call('PEXPIRETIME', KEYS[1])
				local t = redis.call('TIME')
				local d = e - (t[1] * 1000 + math.floor(t[2] / 1000))
				return (d > 99900 and d <= 100000) and 1 or 0`,
			redis: outcome{val: 1},
		},
		"hash commands": {
			script: `redis.call('HSET', KEYS[1], 'a', '1', 'b', '2')
				local del = redis.call('HDEL', KEYS[1], 'a')
				return {del, redis.call('HGET', KEYS[1], 'b'), tostring(redis.call('HGET', KEYS[1], 'a')),
					redis.call('HLEN', KEYS[1]), redis.call('HGETALL', KEYS[1]),
					redis.call('HINCRBY', KEYS[1], 'n', 5000000000), redis.call('HEXISTS', KEYS[1], 'n'),
					redis.call('HMGET', KEYS[1], 'b', 'zz')}`,
			redis: outcome{val: []any{1, "2", "false", 1, []any{"b", "2"}, 5000000000, 1, []any{"2", nil}}},
		},
		"HSET counts only new fields, HDEL what it removed, with unpack spreading the arguments": {
			script: `local args = {'a', '1', 'b', '2'}
				local first = redis.call('HSET', KEYS[1], unpack(args))
				local again = redis.call('HSET', KEYS[1], 'a', '3', 'c', '4')
				local gone = redis.call('HDEL', KEYS[1], unpack({'a', 'zz', 'c'}))
				return {first, again, gone, redis.call('HLEN', KEYS[1])}`,
			redis: outcome{val: []any{2, 1, 2, 1}},
		},
		"HMGET of a missing key returns false for each field, and HGETALL an empty list": {
			script: `local v = redis.call('HMGET', KEYS[1], 'a', 'b')
				return {#v, tostring(v[1]), tostring(v[2]), #redis.call('HGETALL', KEYS[1])}`,
			redis: outcome{val: []any{2, "false", "false", 0}},
		},
		"string.match with sets, escapes and anchors, as the lease record is read": {
			script: `local mode, count, keeper, attempts, owner =
					string.match('w|2|K_-9|a1,b-2|host:1|x', '^([rwp])|(%d+)|([%w_%-]*)|([%w_,%-]*)|(.*)$')
				local none = string.match('x|2|||o', '^([rwp])|(%d+)|')
				return {mode, count, keeper, attempts, owner, tostring(none), string.match('ra:req', '^(%a+):')}`,
			redis: outcome{val: []any{"w", "2", "K_-9", "a1,b-2", "host:1|x", "nil", "ra"}},
		},
		"string.gmatch, plain string.find and the table functions": {
			script: `local list = {}
				for x in string.gmatch('a,b,,c', '[^,]+') do table.insert(list, x) end
				table.remove(list, 1)
				local found = string.find(',a.b,', ',a.b,', 1, true)
				local dot = string.find(',axb,', ',a.b,', 1, true)
				return {table.concat(list, ','), #list, found, tostring(dot), string.sub('l:abc', 3)}`,
			redis: outcome{val: []any{"b,c", 2, 1, "nil", "abc"}},
		},
		"sorted-set commands": {
			script: `redis.call('ZADD', KEYS[1], 1, 'a', 2, 'b', 3, 'c', 4, 'd')
				local rem = redis.call('ZREM', KEYS[1], 'b')
				local n = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', 1)
				return {rem, n, redis.call('ZCARD', KEYS[1]), redis.call('ZSCORE', KEYS[1], 'c'),
					tostring(redis.call('ZSCORE', KEYS[1], 'nope')),
					redis.call('ZRANGEBYSCORE', KEYS[1], '(2', '+inf', 'LIMIT', 0, 1),
					redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'WITHSCORES'),
					redis.call('ZRANK', KEYS[1], 'd'), redis.call('ZCOUNT', KEYS[1], 3, '+inf'),
					redis.call('ZRANGE', KEYS[1], 0, 0)}`,
			redis: outcome{val: []any{1, 1, 2, "3", "false", []any{"c"}, []any{"c", "3", "d", "4"}, 1, 2, []any{"c"}}},
		},
		"ZADD NX, XX, GT and CH": {
			script: `return {redis.call('ZADD', KEYS[1], 'NX', 5, 'a'), redis.call('ZADD', KEYS[1], 'NX', 6, 'a'),
				redis.call('ZADD', KEYS[1], 'XX', 'CH', 7, 'a'), redis.call('ZADD', KEYS[1], 'GT', 'CH', 3, 'a'),
				redis.call('ZSCORE', KEYS[1], 'a')}`,
			redis: outcome{val: []any{1, 0, 1, 0, "7"}},
		},
		"sorted sets keep 16-digit scores exactly": {
			script: `redis.call('ZADD', KEYS[1], 1800000000000001, 'm', '1800000000000002', 'n')
				return {redis.call('ZSCORE', KEYS[1], 'm'),
					redis.call('ZRANGEBYSCORE', KEYS[1], '(1800000000000001', '+inf', 'WITHSCORES')}`,
			redis: outcome{val: []any{"1800000000000001", []any{"n", "1800000000000002"}}},
		},
		"INCRBY beyond 2^32": {
			script: `return redis.call('INCRBY', KEYS[1], 5000000000)`,
			redis:  outcome{val: 5000000000},
		},
		"cjson round-trips tables": {
			script: `local v = cjson.decode(cjson.encode({a = 1, b = {1, 2}, c = 's'})); return {v.a, v.b[2], v.c}`,
			redis:  outcome{val: []any{1, 2, "s"}},
		},
		"cjson.decode reads 16-digit numbers exactly": {
			script: `return string.format('%d', cjson.decode('{"a":1800000000000001}').a)`,
			redis:  outcome{val: "1800000000000001"},
		},
		"cjson.encode keeps 14 significant digits on Redis, all on miniredis": {
			script: `return cjson.encode({a = 1800000000000001})`,
			redis:  outcome{val: `{"a":1.8e+15}`},
			mini:   &outcome{val: `{"a":1800000000000001}`},
		},
		"cjson.encode of an empty table is an object on Redis, an array on miniredis": {
			script: `return cjson.encode({})`,
			redis:  outcome{val: "{}"},
			mini:   &outcome{val: "[]"},
		},
		"cjson.decode turns null into cjson.null on Redis, nil on miniredis": {
			script: `return tostring(cjson.decode('{"d":null}').d == nil)`,
			redis:  outcome{val: "false"},
			mini:   &outcome{val: "true"},
		},
		"bit, cmsgpack and struct exist only on Redis": {
			script: `return {type(rawget(_G, 'cjson')), type(rawget(_G, 'bit')), type(rawget(_G, 'cmsgpack')), type(rawget(_G, 'struct'))}`,
			redis:  outcome{val: []any{"table", "table", "table", "table"}},
			mini:   &outcome{val: []any{"table", "nil", "nil", "nil"}},
		},
		"redis.sha1hex, redis.log, unpack and select": {
			script: `redis.log(redis.LOG_WARNING, 'probe')
				return {redis.sha1hex(''), select('#', unpack({1, 2, 3}))}`,
			redis: outcome{val: []any{"da39a3ee5e6b4b0d3255bfef95601890afd80709", 3}},
		},
	}
	bs := backends(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, b := range bs {
				want := tc.redis
				if b.mini && tc.mini != nil {
					want = *tc.mini
				}
				key := "lua:{" + name + "}"
				got, err := b.client.Eval(context.Background(), tc.script, []string{key}, "41").Result()
				checkOutcome(t, b.name, want, normalize(got), err)
			}
		})
	}
}

func checkOutcome(t *testing.T, backend string, want outcome, got any, err error) {
	t.Helper()
	if want.err != "" {
		if err == nil || !strings.Contains(err.Error(), want.err) {
			t.Errorf("%s: err = %v, want one containing %q", backend, err, want.err)
		}
		return
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Errorf("%s: err = %v, want %#v", backend, err, want.val)
		return
	}
	if !reflect.DeepEqual(got, want.val) {
		t.Errorf("%s: got %#v, want %#v", backend, got, want.val)
	}
}

// normalize turns int64 into int so that expectations read naturally.
func normalize(v any) any {
	switch v := v.(type) {
	case int64:
		return int(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	default:
		return v
	}
}
