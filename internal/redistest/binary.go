//go:build unix

package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	binMu    sync.Mutex
	binPaths = map[string]string{}
)

// ServerEnv is the environment variable that names the server binary the
// harness runs instead of redis-server.
const ServerEnv = "REDISTEST_SERVER"

// ServerBinary returns the server the harness runs: $REDISTEST_SERVER, or
// redis-server when it is unset.
func ServerBinary() string {
	if b := os.Getenv(ServerEnv); b != "" {
		return b
	}
	return "redis-server"
}

// binary finds a Redis executable or fails the test.
func binary(tb testing.TB, name string) string {
	tb.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binPaths[name]; ok {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"} {
			if c := filepath.Join(dir, name); isExecutable(c) {
				p, err = c, nil
				break
			}
		}
	}
	if err != nil {
		tb.Fatalf("%s not found: run `make test`, which installs it", name)
	}
	binPaths[name] = p
	return p
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
