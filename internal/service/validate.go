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
func (l Limits) ttl(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	v, err := duration(field, d, def)
	if err != nil || d == nil {
		return v, err
	}
	if v < l.MinTTL || v > l.MaxTTL {
		return 0, invalid("%s must lie in [%v, %v], got %v", field, l.MinTTL, l.MaxTTL, v)
	}
	return v, nil
}

// Limits bound what callers may ask for.
type Limits struct {
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

// DefaultLimits are the limits of SPEC §2.
func DefaultLimits() Limits {
	return Limits{
		DefaultTTL: 30 * time.Second,
		MinTTL:     10 * time.Millisecond,
		MaxTTL:     24 * time.Hour,
		MaxWait:    24 * time.Hour,
	}
}

// Validate reports limits that contradict each other.
func (l Limits) Validate() error {
	switch {
	case l.MinTTL <= 0:
		return fmt.Errorf("min ttl must be positive, got %v", l.MinTTL)
	case l.MaxTTL < l.MinTTL:
		return fmt.Errorf("max ttl %v is below min ttl %v", l.MaxTTL, l.MinTTL)
	case l.DefaultTTL < l.MinTTL || l.DefaultTTL > l.MaxTTL:
		return fmt.Errorf("default ttl %v is outside [%v, %v]", l.DefaultTTL, l.MinTTL, l.MaxTTL)
	case l.MaxWait < 0:
		return fmt.Errorf("max wait must not be negative, got %v", l.MaxWait)
	case l.MaxWaiters < 0 || l.MaxKeepAlives < 0 || l.MaxWatches < 0 || l.FairShareLeases < 0:
		return fmt.Errorf("limits on waiters and streams must not be negative")
	}
	return nil
}
