// Package porttest finds free loopback ports for the servers tests start.
//
// The ports it hands out lie below the kernel's range of ephemeral ports
// (the local ports of outgoing connections) where it can, so that a server
// killed and started again on its port never finds it taken by the local
// end of some other connection made meanwhile.
package porttest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port Free hands out.
const lowest = 10000

// Free returns a loopback port that was free a moment ago.
func Free() (int, error) {
	if lo := ephemeralLow(); lo > lowest+1000 {
		for range 50 {
			if port, err := listen(lowest + rand.IntN(lo-lowest)); err == nil {
				return port, nil
			}
		}
	}
	return listen(0)
}

// listen listens on port (0: any) on loopback and returns the port.
func listen(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or 0
// when it cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
