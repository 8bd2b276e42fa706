package connguard

import (
	"context"
	"net"
)

// connOf is exported to the tests.
func ConnOfForTest(ctx context.Context) net.Conn { return connOf(ctx) }
