package porttest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsLieBelowTheEphemeralRange takes ports from Free and checks
// each can be listened on, and lies below the range outgoing connections
// take their local ports from.
func TestFreePortsLieBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		port, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if lo > lowest+1000 && (port < lowest || port >= lo) {
			t.Fatalf("port %d, want one in [%d, %d)", port, lowest, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		_ = l.Close()
	}
}
