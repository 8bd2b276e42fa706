package connguard

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// waiting reports whether bytes the peer sent wait unread on c, without
// reading them.
func waiting(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var b [1]byte
	// Control, not Read: Read would wait for the server's own read of
	// the connection, which may be waiting for these very bytes.
	_ = rc.Control(func(fd uintptr) {
		n, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	return n > 0
}
