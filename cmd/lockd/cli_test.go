package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLockFlags(t *testing.T) {
	t.Parallel()
	f, err := parseLockFlags([]string{"--wait=0", "--ttl=1m", "--read", "--owner=cron", "jobs/x", "--", "backup", "--full"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.key != "jobs/x" || strings.Join(f.argv, " ") != "backup --full" || f.wait != 0 || f.ttl != time.Minute || !f.read || f.owner != "cron" {
		t.Fatalf("parsed %+v", f)
	}
	n, err := parseLockFlags([]string{"-n", "5", "upstream/wechat", "--", "curl", "x"}, io.Discard)
	if err != nil || n.permits != 5 || n.key != "upstream/wechat" {
		t.Fatalf("-n 5: %+v, %v", n, err)
	}
	d, err := parseLockFlags([]string{"k", "--", "true"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d.permits != 0 || d.wait != 30*time.Second || d.killAfter != 10*time.Second || d.client.addr != "127.0.0.1:50051" || d.ttl != 0 {
		t.Fatalf("defaults %+v", d)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no key", nil, "usage"},
		{"no --", []string{"k", "true"}, "usage"},
		{"no command", []string{"k", "--"}, "usage"},
		{"a negative wait", []string{"--wait=-1s", "k", "--", "true"}, "negative"},
		{"an unknown flag", []string{"--nope", "k", "--", "true"}, "nope"},
		{"a negative number of permits", []string{"-n", "-1", "k", "--", "true"}, "-n"},
		{"permits read", []string{"-n", "2", "--read", "k", "--", "true"}, "--read"},
	} {
		if _, err := parseLockFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestClientCommandDispatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		serve []string
	}{
		{nil, nil},
		{[]string{"--listen=:1"}, []string{"--listen=:1"}},
		{[]string{"serve", "--listen=:1"}, []string{"--listen=:1"}},
	} {
		if _, ok, rest := clientCommand(tc.args, env(), io.Discard, io.Discard); ok || strings.Join(rest, " ") != strings.Join(tc.serve, " ") {
			t.Errorf("%q: client command %v, serve args %q", tc.args, ok, rest)
		}
	}
}

// TestEveryClientFlagIsInTheManual keeps the table of lockd lock and lockd
// token flags in docs/clients.md in step with their flags.
func TestEveryClientFlagIsInTheManual(t *testing.T) {
	t.Parallel()
	section := manualSection(t, "clients.md", "## The command line")
	var out strings.Builder
	if _, err := parseLockFlags([]string{"-help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-help: %v", err)
	}
	for _, name := range helpFlags(t, out.String()) {
		if !strings.Contains(section, "`--"+name+"`") {
			t.Errorf("lockd lock flag --%s has no line in docs/clients.md's command line section", name)
		}
	}
}

// TestTokenFileErrorsDoNotShowThePath: --token-file may have been given
// the token itself; whatever is wrong with the file, the error names the
// flag and never the path.
func TestTokenFileErrorsDoNotShowThePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "s3cret-bearer-token-empty")
	long := filepath.Join(dir, "s3cret-bearer-token-long")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, []byte(strings.Repeat("t", 64<<10+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"the token pasted as the file", "s3cret-bearer-token", "cannot be read"},
		{"an empty file", empty, "is empty"},
		{"a file too long", long, "longer than"},
		{"a directory", dir, "cannot be read"},
	} {
		f := clientFlags{addr: "127.0.0.1:50051", tokenFile: tc.file}
		c, err := f.dial(func(string) string { return "" })
		if err == nil {
			_ = c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error of --token-file that says %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret-bearer-token") || strings.Contains(err.Error(), dir) {
			t.Errorf("%s: %q shows the path", tc.name, err)
		}
	}
}
