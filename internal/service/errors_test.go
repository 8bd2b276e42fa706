package service

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/redislock"
)

// TestStatusMessagesAreShort: an engine error quoting a long key becomes a
// status message with a short excerpt of it.
func TestStatusMessagesAreShort(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("\u202e", 170) // 510 bytes, escaped to 1020
	err := toStatus(context.Background(), nil, fmt.Errorf("%w: key %q", redislock.ErrNotHeld, key))
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.NotFound || len(msg) > 256 || !strings.HasPrefix(msg, `redislock: lease not held: key "\u202e`) {
		t.Fatalf("%v: %q (%d bytes)", status.Code(err), msg, len(msg))
	}
}
