package config

import (
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// secretShaped reports whether s looks as if it might be a secret: it holds
// a run of at least 16 letters, digits, '+', '/' or '=' mixing letters with
// digits, or of at least 20 mixing upper and lower case (random tokens,
// hex and base64 keys). Names of environment variables and ordinary paths
// (MP_SECRET, /run/secrets/mp) do not. A value that looks like a secret is
// never put in an error: where the file wants the name of a secret's home,
// a user may have pasted the secret itself.
func secretShaped(s string) bool {
	var run, letters, digits, upper, lower int
	check := func() bool {
		mixed := letters > 0 && digits > 0
		cased := upper > 0 && lower > 0
		return (run >= 16 && mixed) || (run >= 20 && cased)
	}
	for _, r := range s {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '+' || r == '/' || r == '=') {
			run++
			switch {
			case unicode.IsDigit(r):
				digits++
			case unicode.IsUpper(r):
				letters++
				upper++
			case unicode.IsLower(r):
				letters++
				lower++
			}
			continue
		}
		if check() {
			return true
		}
		run, letters, digits, upper, lower = 0, 0, 0, 0, 0
	}
	return check()
}

// envName reports whether s can name an environment variable: letters,
// digits and '_', not starting with a digit.
func envName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) && i > 0)) {
			return false
		}
	}
	return s != ""
}

// SafeURL returns raw without user info, query and fragment, the places
// where a secret may hide in a URL; "" when raw does not parse.
func SafeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// shownURLProblem rewrites a problem with a URL field (api_base,
// token_url) that quotes the URL so that it quotes SafeURL instead.
func shownURLProblem(field, msg, raw string) string {
	rule := strings.TrimPrefix(msg, field+": ")
	if i := strings.Index(msg, `": `); strings.HasPrefix(msg, field+` "`) && i >= 0 {
		rule = msg[i+3:]
	}
	if shown := SafeURL(raw); shown != "" {
		return field + " " + strconv.Quote(shown) + ": " + rule
	}
	return field + ": " + rule
}
