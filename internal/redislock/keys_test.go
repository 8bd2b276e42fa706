package redislock

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		key  string
		rule string // "" when valid
	}{
		{"a plain key is valid", "orders/42", ""},
		{"braces are valid", "{user}:1}", ""},
		{"unicode is valid", "锁/🔒", ""},
		{"512 bytes are valid", strings.Repeat("é", 256), ""},
		{"an empty key names emptiness", "", "must not be empty"},
		{"513 bytes name the length", strings.Repeat("k", 513), "longer than 512"},
		{"invalid UTF-8 names the encoding", "\xff", "valid UTF-8"},
		{"a newline names the control character", "a\nb", "control character U+000A"},
		{"DEL is a control character", "a\x7f", "control character U+007F"},
		{"C1 controls are control characters", "a\u0085", "control character U+0085"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateKey(tc.key)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("ValidateKey = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("ValidateKey = %v, want ErrInvalidKey naming %q", err, tc.rule)
			}
		})
	}
}

func TestHashTagKeepsKeysApartAndInOneSlot(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, k := range []string{"{", "}", "%7B", "%7D", "%", "%25", "a{b}", "a%7Bb%7D", "}{"} {
		tag := hashTag(k)
		if strings.ContainsAny(tag, "{}") || tag == "" {
			t.Errorf("hashTag(%q) = %q", k, tag)
		}
		if other, ok := seen[tag]; ok {
			t.Errorf("keys %q and %q share tag %q", k, other, tag)
		}
		seen[tag] = k
		c := &Client{prefix: "lockd", lossGrace: time.Second, cluster: &redis.ClusterClient{}}
		ks := c.keys(k)
		if ks.record != "lockd:{"+tag+"}" || ks.channel != ks.record+":released" {
			t.Errorf("keys of %q: %+v", k, ks)
		}
		if slotOf(markerTag(ks.marker)) != slotOf(tag) {
			t.Errorf("marker %q is not in the slot of %q", ks.marker, ks.record)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "a", "{x}", "a\nb", "\xff", strings.Repeat("k", 512), "锁"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		valid := key != "" && len(key) <= MaxKeyBytes && utf8.ValidString(key) &&
			strings.IndexFunc(key, unicode.IsControl) < 0
		if valid != (err == nil) {
			t.Fatalf("ValidateKey(%q) = %v, valid by the rules: %v", key, err, valid)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("error %v does not wrap ErrInvalidKey", err)
		}
		if err == nil {
			tag := hashTag(key)
			if tag == "" || strings.ContainsAny(tag, "{}") {
				t.Fatalf("hashTag(%q) = %q cannot serve as a hash tag", key, tag)
			}
		}
	})
}

// markerTag is the hash tag of a marker key.
func markerTag(marker string) string {
	return marker[strings.Index(marker, "{")+1 : strings.LastIndex(marker, "}")]
}

// TestSlotTagsCoverEverySlot checks the marker tags: one per slot, each in
// its slot, and slotOf agreeing with Redis Cluster's CRC16 on known values.
func TestSlotTagsCoverEverySlot(t *testing.T) {
	t.Parallel()
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for tag, slot := range map[string]int{"123456789": 12739, "foo": 12182, "bar": 5061, "": 0} {
		if got := slotOf(tag); got != slot {
			t.Errorf("slotOf(%q) = %d, want %d", tag, got, slot)
		}
	}
	for slot, tag := range slotTags() {
		if slotOf(tag) != slot {
			t.Fatalf("tag %q of slot %d is in slot %d", tag, slot, slotOf(tag))
		}
	}
}
