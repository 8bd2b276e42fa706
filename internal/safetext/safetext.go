// Package safetext makes user input safe to show: in status messages it is
// cut to a short excerpt, and wherever it is shown, characters that would
// hide or reorder text on a terminal or in a log viewer (control,
// bidirectional-override and zero-width characters, invalid UTF-8) are
// escaped.
package safetext

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ExcerptBytes is how much of a user's input Excerpt shows.
const ExcerptBytes = 64

// Excerpt returns s as a quoted Go string literal with every character that
// is not printable escaped, cut to about ExcerptBytes of s (on a character
// boundary) with the full length noted when cut: safe to put in an error
// message however long or odd s is.
func Excerpt(s string) string {
	if len(s) <= ExcerptBytes {
		return strconv.Quote(s)
	}
	cut := ExcerptBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Escape returns s with every character that is not printable (as
// unicode.IsPrint decides, with the plain space allowed) and every byte of
// invalid UTF-8 written as a Go escape (\u202e, \x00, \xff); a backslash
// is doubled, so the escaping is unambiguous. Printable text, any script,
// is left as it is, and s itself is returned when nothing needs escaping.
func Escape(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case r == '\\':
			b.WriteString(`\\`)
		case printable(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

func printable(r rune) bool { return r == ' ' || unicode.IsPrint(r) }

// clean reports whether s needs no escaping.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' || c >= utf8.RuneSelf {
			return cleanSlow(s[i:])
		}
	}
	return true
}

func cleanSlow(s string) bool {
	for i, r := range s {
		if r == '\\' || !printable(r) || (r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD")) {
			return false
		}
	}
	return true
}
