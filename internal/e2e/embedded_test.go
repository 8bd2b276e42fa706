package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestEmbeddedStoreIsUnreachable runs lockd on its embedded store: the
// process listens on its gRPC and HTTP addresses and nowhere else, so no
// other process on the host can read the store's tokens or touch its
// locks.
func TestEmbeddedStoreIsUnreachable(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads the process's sockets from /proc")
	}
	proc := startLockd(t, nil)
	listening := listeningAddrs(t, proc.cmd.Process.Pid)
	if len(listening) != 2 {
		t.Fatalf("lockd on the embedded store listens on %v, want only its gRPC (%s) and HTTP (%s) addresses", listening, proc.addr, proc.http)
	}
}

// listeningAddrs returns the local addresses (hex, as /proc prints them)
// of the TCP sockets process pid listens on.
func listeningAddrs(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) >= 10 && fields[3] == "0A" && inodes[fields[9]] {
				out = append(out, fields[1])
			}
		}
		f.Close()
	}
	return out
}
