package client_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMisuseDoesNotCompile builds testdata/misuse: each call marked
// `// want "regexp"` must fail to compile with a matching error (an option
// given to a call that would not use it, a call that is not the one way to
// do its thing), and every other line must compile.
func TestMisuseDoesNotCompile(t *testing.T) {
	t.Parallel()
	const file = "testdata/misuse/misuse.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]*regexp.Regexp{}
	for i, line := range strings.Split(string(src), "\n") {
		if _, w, ok := strings.Cut(line, `// want "`); ok {
			want[i+1] = regexp.MustCompile(strings.TrimSuffix(w, `"`))
		}
	}
	// -e: report every error, not the first ten.
	out, err := exec.Command("go", "build", "-gcflags=-e", "./testdata/misuse").CombinedOutput()
	if err == nil {
		t.Fatalf("testdata/misuse compiled; %d calls that must not did", len(want))
	}
	got := map[int]string{}
	errLine := regexp.MustCompile(`misuse\.go:(\d+):\d+: (.*)`)
	for _, m := range errLine.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] += m[2] + "\n"
	}
	if len(got) == 0 {
		t.Fatalf("go build failed without compiler errors in %s:\n%s", file, out)
	}
	for n, re := range want {
		if !re.MatchString(got[n]) {
			t.Errorf("%s:%d: want an error matching %q, got %q", file, n, re, got[n])
		}
	}
	for n, msg := range got {
		if want[n] == nil {
			t.Errorf("%s:%d: a well-formed call does not compile: %s", file, n, msg)
		}
	}
}
