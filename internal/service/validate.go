package service

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd/lockd/internal/redislock"
)

const (
	maxOwnerBytes     = 256
	maxRequestIDBytes = 128
	maxLeaseIDBytes   = 128
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func validKey(key string) error {
	if err := redislock.ValidateKey(key); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// validText checks an optional free-text field: bounded, UTF-8, printable.
func validText(field, v string, maxBytes int) error {
	switch {
	case len(v) > maxBytes:
		return invalid("%s is %d bytes, longer than %d", field, len(v), maxBytes)
	case !utf8.ValidString(v):
		return invalid("%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return invalid("%s has control character %U", field, r)
		}
	}
	return nil
}

func validLeaseID(id string) error {
	if id == "" {
		return invalid("lease_id must not be empty")
	}
	return validText("lease_id", id, maxLeaseIDBytes)
}

// duration reads an optional Duration field; unset gives def.
func duration(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid("%s is not a valid duration: %v", field, err)
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, invalid("%s must not be negative, got %v", field, v)
	}
	return v, nil
}

// ttl reads a lease span: unset gives def, else it must lie in [lo, hi].
func (b Bounds) ttl(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	v, err := duration(field, d, def)
	if err != nil || d == nil {
		return v, err
	}
	if v < b.MinTTL || v > b.MaxTTL {
		return 0, invalid("%s must lie in [%v, %v], got %v", field, b.MinTTL, b.MaxTTL, v)
	}
	return v, nil
}

// Bounds are this replica's bounds on what any caller may ask for (the
// ttl and wait of a request) and on the pools all callers share (waiters
// and streams open at once). They are not a client's own limits
// (config.Limits), set per client in the configuration file: a client
// without one of its own is bound by these pools, or, with two or more
// clients configured, by its fair share of them.
type Bounds struct {
	// DefaultTTL is the lease span when a request leaves ttl unset.
	DefaultTTL time.Duration
	// MinTTL and MaxTTL bound the ttl a request may give.
	MinTTL, MaxTTL time.Duration
	// MaxWait bounds wait_timeout.
	MaxWait time.Duration
	// MaxWaiters bounds the calls waiting for a lock at once in this
	// process; 0 means no bound.
	MaxWaiters int
	// MaxKeepAlives bounds the KeepAlive streams open at once in this
	// process; 0 means no bound.
	MaxKeepAlives int
	// MaxWatches bounds the WatchAccessToken streams open at once in this
	// process (see WithMaxWatches); 0 means no bound.
	MaxWatches int
	// FairShareLeases bounds the leases a client without a leases limit
	// of its own holds at once through this process, when two or more
	// clients are configured; 0 means no bound.
	FairShareLeases int
}

// DefaultBounds are the bounds of SPEC §2.
func DefaultBounds() Bounds {
	return Bounds{
		DefaultTTL: 30 * time.Second,
		MinTTL:     10 * time.Millisecond,
		MaxTTL:     24 * time.Hour,
		MaxWait:    24 * time.Hour,
	}
}

// Validate reports bounds that contradict each other.
func (b Bounds) Validate() error {
	switch {
	case b.MinTTL <= 0:
		return fmt.Errorf("min ttl must be positive, got %v", b.MinTTL)
	case b.MaxTTL < b.MinTTL:
		return fmt.Errorf("max ttl %v is below min ttl %v", b.MaxTTL, b.MinTTL)
	case b.DefaultTTL < b.MinTTL || b.DefaultTTL > b.MaxTTL:
		return fmt.Errorf("default ttl %v is outside [%v, %v]", b.DefaultTTL, b.MinTTL, b.MaxTTL)
	case b.MaxWait < 0:
		return fmt.Errorf("max wait must not be negative, got %v", b.MaxWait)
	case b.MaxWaiters < 0 || b.MaxKeepAlives < 0 || b.MaxWatches < 0 || b.FairShareLeases < 0:
		return fmt.Errorf("limits on waiters and streams must not be negative")
	}
	return nil
}
