package redislock

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key a lock may have, in bytes.
const MaxKeyBytes = 512

// ValidateKey reports whether key can name a lock: 1 to MaxKeyBytes bytes of
// valid UTF-8 without control characters. The error wraps ErrInvalidKey and
// names the rule that was broken.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key must not be empty", ErrInvalidKey)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: key is %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key must be valid UTF-8", ErrInvalidKey)
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: key has control character %U at byte %d", ErrInvalidKey, r, i)
		}
	}
	return nil
}

// keySet names the Redis keys and channel of one lock. All of them share one
// hash tag, so they live in one slot on Redis Cluster whatever the lock key
// holds, braces included.
type keySet struct {
	state, holders, writers, channel, requestPrefix string
}

func newKeySet(prefix, key string) keySet {
	base := prefix + ":{" + hashTag(key) + "}"
	return keySet{
		state:         base,
		holders:       base + ":holders",
		writers:       base + ":writers",
		channel:       base + ":released",
		requestPrefix: base + ":request:",
	}
}

// hashTag escapes the characters that would end or empty a Redis hash tag
// ('{' and '}'), and '%' itself, so distinct keys stay distinct.
func hashTag(key string) string {
	if !strings.ContainsAny(key, "{}%") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '{', '}', '%':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
