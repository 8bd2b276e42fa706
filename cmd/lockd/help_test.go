package main

import (
	"errors"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// TestHelp checks that lockd --help, lockd help and an unknown subcommand
// list every subcommand with a line about it, and the server's flags.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		toStderr bool
		wantErr  string
	}{
		{name: "--help", args: []string{"--help"}},
		{name: "-h", args: []string{"-h"}},
		{name: "help", args: []string{"help"}},
		{name: "an unknown subcommand", args: []string{"frobnicate", "--addr=x"}, wantCode: exitUsage, toStderr: true, wantErr: `lockd: unknown subcommand "frobnicate"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			code, ok, rest := clientCommand(tc.args, env(), &stdout, &stderr)
			if !ok || code != tc.wantCode || rest != nil {
				t.Fatalf("lockd %q: code %d, handled %v, serve args %q; want code %d, handled", tc.args, code, ok, rest, tc.wantCode)
			}
			help, other := stdout.String(), stderr.String()
			if tc.toStderr {
				help, other = other, help
			}
			if other != "" {
				t.Errorf("lockd %q also wrote %q", tc.args, other)
			}
			if !strings.HasPrefix(help, tc.wantErr) {
				t.Errorf("lockd %q wrote\n%s\nwhich does not start with %q", tc.args, help, tc.wantErr)
			}
			checkHelp(t, help)
		})
	}
}

// TestHelpAfterFlags checks that --help among the server's flags prints the
// same help, through the flag set, and asks main to exit 0 (flag.ErrHelp).
func TestHelpAfterFlags(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if _, _, err := parseFlags([]string{"--listen=127.0.0.1:0", "--help"}, env(), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	checkHelp(t, out.String())
}

// checkHelp checks that help lists serve and each subcommand on a line of
// its own with what it does, and the server's flags.
func checkHelp(t *testing.T, help string) {
	t.Helper()
	names := []string{"serve", "help"}
	for _, c := range subcommands {
		names = append(names, c.name)
	}
	if len(names) < 5 {
		t.Fatalf("only %d subcommands: %v", len(names), names)
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^  ` + name + ` +\S.{10,}$`).MatchString(help) {
			t.Errorf("help has no line about the subcommand %s:\n%s", name, help)
		}
	}
	for _, c := range subcommands {
		if !strings.Contains(help, c.about) {
			t.Errorf("help lacks what %s does (%q):\n%s", c.name, c.about, help)
		}
	}
	flags := helpFlags(t, help)
	for _, want := range []string{"listen", "redis", "config", "http-listen", "log-level"} {
		if !strings.Contains(" "+strings.Join(flags, " ")+" ", " "+want+" ") {
			t.Errorf("help lacks the server flag --%s:\n%s", want, help)
		}
	}
	if !strings.Contains(help, "usage: lockd") {
		t.Errorf("help has no usage line:\n%s", help)
	}
}

// TestSubcommandsDispatch checks that each subcommand in the help is the
// one that runs: its own --help names it.
func TestSubcommandsDispatch(t *testing.T) {
	t.Parallel()
	for _, c := range subcommands {
		var stdout, stderr strings.Builder
		code, ok, _ := clientCommand([]string{c.name, "--help"}, env(), &stdout, &stderr)
		if !ok || !strings.Contains(stdout.String()+stderr.String(), "usage: lockd "+c.name) {
			t.Errorf("lockd %s --help: code %d, handled %v, wrote\n%s%s", c.name, code, ok, stdout.String(), stderr.String())
		}
	}
}

// TestEverySubcommandIsInTheManual keeps the command line section of
// docs/clients.md in step with the subcommands lockd --help lists: each
// has a subsection of its own, and each of its flags a line.
func TestEverySubcommandIsInTheManual(t *testing.T) {
	t.Parallel()
	section := manualSection(t, "clients.md", "## The command line")
	for _, c := range subcommands {
		if !strings.Contains(section, "\n### lockd "+c.name+"\n") {
			t.Errorf("docs/clients.md's command line section has no subsection ### lockd %s", c.name)
		}
		var out strings.Builder
		if code := c.run([]string{"-help"}, func(string) string { return "" }, &out, &out); code != 0 {
			t.Fatalf("lockd %s -help exited %d:\n%s", c.name, code, out.String())
		}
		flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out.String(), -1)
		if len(flags) < 7 {
			t.Fatalf("found %d flags in lockd %s -help:\n%s", len(flags), c.name, out.String())
		}
		for _, m := range flags {
			if !strings.Contains(section, "`--"+m[1]+"`") {
				t.Errorf("lockd %s flag --%s has no line in docs/clients.md's command line section", c.name, m[1])
			}
		}
	}
}
