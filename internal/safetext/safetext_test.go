package safetext_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/safetext"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, in, want string }{
		{"plain text stays", "orders/42", "orders/42"},
		{"any script stays", "订单/42 ключ", "订单/42 ключ"},
		{"a bidi override is escaped", "invoice\u202egnp.exe", `invoice\u202egnp.exe`},
		{"an isolate is escaped", "a\u2066b\u2069", `a\u2066b\u2069`},
		{"zero-width characters are escaped", "a\u200bb\u200dc\ufeff", `a\u200bb\u200dc\ufeff`},
		{"control characters are escaped", "a\nb\x00", `a\nb\x00`},
		{"invalid UTF-8 is escaped byte by byte", "a\xffb", `a\xffb`},
		{"a backslash is doubled so escapes cannot be faked", `a\u202eb`, `a\\u202eb`},
	} {
		if got := safetext.Escape(tt.in); got != tt.want {
			t.Errorf("%s: Escape(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	if got := safetext.Excerpt("billing/\u202e1"); got != `"billing/\u202e1"` {
		t.Errorf("Excerpt = %s", got)
	}
	long := strings.Repeat("é", 2<<20) // 4 MiB
	got := safetext.Excerpt(long)
	if len(got) > 2*safetext.ExcerptBytes+32 || !strings.HasSuffix(got, "… (4194304 bytes)") {
		t.Errorf("Excerpt of 4 MiB = %d bytes: %.100s", len(got), got)
	}
}

func TestHandlerEscapesEverythingItLogs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(safetext.Handler(slog.NewTextHandler(&buf, nil))).With("client", "ops\u200b")
	log.Info("took \u202ekey", "key", "a\u2067b", "err", errors.New("bad \u200e key"),
		slog.Group("lease", "owner", "w\u202d1"), "keys", []string{"x\u202ey"})
	out := buf.String()
	for _, r := range []string{"\u202e", "\u2067", "\u200b", "\u200e", "\u202d"} {
		if strings.Contains(out, r) {
			t.Errorf("log line holds %U raw: %s", []rune(r)[0], out)
		}
	}
	// The text handler quotes (and so doubles the backslash of) values
	// with spaces.
	for _, want := range []string{`\u202ekey`, `a\u2067b`, `ops\u200b`, `bad \\u200e key`, `w\u202d1`, `x\u202ey`} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %s: %s", want, out)
		}
	}
}
