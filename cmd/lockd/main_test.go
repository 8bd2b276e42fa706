package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		args    []string
		env     func(string) string
		check   func(t *testing.T, listen, redis string, reflection bool, maxTTL time.Duration)
		wantErr string
	}{
		{
			name: "defaults match the contract",
			env:  env(),
			check: func(t *testing.T, listen, redis string, reflection bool, maxTTL time.Duration) {
				if listen != "127.0.0.1:50051" || redis != "" || !reflection || maxTTL != 24*time.Hour {
					t.Fatalf("defaults: %s %q %v %v", listen, redis, reflection, maxTTL)
				}
			},
		},
		{
			name: "the environment sets flags",
			env:  env("LOCKD_LISTEN", "0.0.0.0:6000", "LOCKD_REDIS", "redis://r:6379", "LOCKD_REFLECTION", "false", "LOCKD_MAX_TTL", "1h"),
			check: func(t *testing.T, listen, redis string, reflection bool, maxTTL time.Duration) {
				if listen != "0.0.0.0:6000" || redis != "redis://r:6379" || reflection || maxTTL != time.Hour {
					t.Fatalf("from env: %s %q %v %v", listen, redis, reflection, maxTTL)
				}
			},
		},
		{
			name: "the command line wins over the environment",
			args: []string{"--listen=127.0.0.1:7000", "--reflection=true"},
			env:  env("LOCKD_LISTEN", "0.0.0.0:6000", "LOCKD_REFLECTION", "false"),
			check: func(t *testing.T, listen, _ string, reflection bool, _ time.Duration) {
				if listen != "127.0.0.1:7000" || !reflection {
					t.Fatalf("flags over env: %s %v", listen, reflection)
				}
			},
		},
		{name: "a bad environment value names the variable", env: env("LOCKD_MAX_TTL", "forever"), wantErr: "LOCKD_MAX_TTL"},
		{name: "an unknown flag is refused", args: []string{"--nope"}, env: env(), wantErr: "nope"},
		{name: "stray arguments are refused", args: []string{"extra"}, env: env(), wantErr: "unexpected arguments"},
		{name: "contradictory limits are refused", args: []string{"--min-ttl=1h", "--max-ttl=1m"}, env: env(), wantErr: "below min ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, err := parseFlags(tc.args, tc.env, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg.Listen, cfg.Redis, cfg.Reflection, cfg.Bounds.MaxTTL)
		})
	}
}

// TestEveryFlagIsInTheManual keeps the flag table of docs/operations.md in
// step with the flags lockd takes.
func TestEveryFlagIsInTheManual(t *testing.T) {
	t.Parallel()
	section := manualSection(t, "operations.md", "## Running lockd")
	// parseFlags defines lockd's flags on its own set; list them through
	// -help's output.
	var out strings.Builder
	_, _, err := parseFlags([]string{"-help"}, env(), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-help: %v", err)
	}
	for _, name := range helpFlags(t, out.String()) {
		if !strings.Contains(section, "`--"+name+"`") {
			t.Errorf("flag --%s has no line in docs/operations.md's Running lockd", name)
		}
	}
}

func TestParseSecurityFlags(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseFlags([]string{"--namespace=team-a", "--keepalive-time=20s", "--max-concurrent-streams=50", "--audit-log=-"},
		env("LOCKD_REDIS_PASSWORD", "pw", "LOCKD_MAX_CONNECTIONS", "7", "LOCKD_AUDIT_LEVEL", "WARN"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tr := cfg.Transport
	if cfg.Namespace != "team-a" || cfg.RedisPassword != "pw" || tr.KeepAliveTime != 20*time.Second || tr.KeepAliveTimeout != 5*time.Second ||
		tr.MaxConcurrentStreams != 50 || tr.MaxConnections != 7 || tr.MaxHeaderBytes != 16<<10 || cfg.AuditLog != "-" || cfg.AuditLevel.String() != "WARN" {
		t.Fatalf("parsed %+v", cfg)
	}
	gw, _, err := parseFlags([]string{"--gateway-hosts=lockd.internal, lockd"}, env(), io.Discard)
	if err != nil || !slices.Equal(gw.GatewayHosts, []string{"lockd.internal", "lockd"}) {
		t.Fatalf("--gateway-hosts: %q, %v", gw.GatewayHosts, err)
	}
	for _, args := range [][]string{{"--keepalive-time=100ms"}, {"--max-header-bytes=10"}, {"--max-concurrent-streams=4294967296"}, {"--max-connections=-1"}, {"--gateway-hosts=http://lockd:8080"}} {
		if _, _, err := parseFlags(args, env(), io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// helpFlags lists the flags a flag set's -help output names.
func helpFlags(t *testing.T, help string) []string {
	t.Helper()
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help, -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("found only %d flags in -help output:\n%s", len(names), help)
	}
	return names
}

// manualSection returns the section of docs/page that starts with the
// heading line heading, up to the next heading of the same level.
func manualSection(t *testing.T, page, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + page)
	if err != nil {
		t.Fatal(err)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	text := string(b)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("docs/%s has no heading %q", page, heading)
	}
	text = text[start+1:]
	if end := strings.Index(text[len(heading):], "\n"+level); end >= 0 {
		text = text[:len(heading)+end]
	}
	return text
}
