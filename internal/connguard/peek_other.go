//go:build !linux

package connguard

import "net"

// waiting reports whether bytes the peer sent wait unread on c; where it
// cannot tell without reading, it says none.
func waiting(net.Conn) bool { return false }
