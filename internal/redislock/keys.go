package redislock

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key a lock may have, in bytes.
const MaxKeyBytes = 512

// ValidateKey reports whether key can name a lock: 1 to MaxKeyBytes bytes of
// valid UTF-8 without control characters. The error wraps ErrInvalidKey and
// names the rule that was broken.
func ValidateKey(key string) error {
	return validateKey("key", key)
}

// ValidateName is ValidateKey for the name of an election (the key of its
// lock); the error speaks of the name.
func ValidateName(name string) error {
	return validateKey("name", name)
}

func validateKey(field, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalidKey, field)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalidKey, field, len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %s must be valid UTF-8", ErrInvalidKey, field)
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s has control character %U at byte %d", ErrInvalidKey, field, r, i)
		}
	}
	return nil
}

// Key layout. A lock is one Redis hash, <prefix>:{<key>} (see common.lua
// for its fields), so eviction or expiry takes all of it or nothing; its
// waiters are woken on the channel <prefix>:{<key>}:released, and the
// observers of an election (a lock whose write holder leads it) on
// <prefix>:{<key>}:leader. <key> is escaped by hashTag, so the braces make
// the whole key the hash tag: every valid key works on Redis Cluster, and
// listing locks is a SCAN over <prefix>:{* (no other key of lockd's matches
// that pattern).
//
// With data-loss protection on, each hash slot has a marker key that lives
// as long as the data: <prefix>:marker:{<t>}, where <t> is a short tag
// chosen to fall in the slot's own hash slot, so a lock's script reads the
// marker of its own slot. Every script touches the keys of one slot, in
// every mode: on a single Redis too, as a proxy may present a Cluster as
// one endpoint. Markers are a fixed set (16384 per prefix, about a
// megabyte) and carry no expiry. Release results remembered for retries
// are <prefix>:rr:{<key>}:<request>, in the lock's slot, and expire.

// keySet names the Redis keys and channel of one lock.
type keySet struct {
	// record is the lock's hash.
	record string
	// channel wakes the lock's waiters.
	channel string
	// leader tells an election's observers that its leader or value
	// changed.
	leader string
	// marker is the data-loss marker of the record's slot; empty when the
	// protection is off.
	marker string
	// results starts the names of the Release results remembered for
	// retries: results + requestKey(request_id).
	results string
}

func (c *Client) keys(key string) keySet {
	tag := hashTag(key)
	base := c.prefix + ":{" + tag + "}"
	ks := keySet{record: base, channel: base + ":released", leader: base + ":leader",
		results: c.prefix + ":rr:{" + tag + "}:"}
	if c.lossGrace > 0 {
		ks.marker = c.markerOf(tag)
	}
	return ks
}

// markerOf names the data-loss marker for a record whose hash tag is tag.
func (c *Client) markerOf(tag string) string {
	return c.markerForSlot(slotOf(tag))
}

func (c *Client) markerForSlot(slot int) string {
	return c.prefix + ":marker:{" + slotTags()[slot] + "}"
}

// scriptKeys returns the record and, where the script checks for data
// loss, the marker.
func (ks keySet) scriptKeys(withMarker bool) []string {
	if withMarker && ks.marker != "" {
		return []string{ks.record, ks.marker}
	}
	return []string{ks.record}
}

// releaseKeys returns the keys of release.lua: the record and, for a
// request, its remembered result.
func (ks keySet) releaseKeys(request string) []string {
	if request == "" {
		return []string{ks.record}
	}
	return []string{ks.record, ks.results + request}
}

// requestKey returns the digest of a request_id that names its remembered
// results in Redis ("" for none): 132 bits of SHA-256, URL-safe, so that
// any request_id makes a short field name of safe characters, and results
// cannot be told apart from the ids that made them.
func requestKey(requestID string) string {
	if requestID == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(requestID))
	return base64.RawURLEncoding.EncodeToString(sum[:])[:22]
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

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// slotOf is the Redis Cluster hash slot of a hash tag: CRC16 (XMODEM) mod
// 16384.
func slotOf(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slotCount
}

var slotTags = sync.OnceValue(func() []string {
	// The shortest decimal numbers, in order, that land in each slot.
	tags := make([]string, slotCount)
	for i, left := 0, slotCount; left > 0; i++ {
		s := strconv.Itoa(i)
		if slot := slotOf(s); tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return tags
})
