package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Pinned mode. With LOCKD_BENCH_PIN=1 on a machine of at least pinCores
// cores (make bench sets it there), every process of a comparison gets
// cores of its own, so that no process's cost shows in another's rate:
// Redis core 0; lockd, and etcd in its place, the same three cores 1-3
// (the two are measured in turns, never at once); the load generator,
// this process, cores 4-9. On a smaller machine the processes share the
// cores, and what counts is CPU per operation and ratios taken in one run.
const pinCores = 12

// Where each process runs in pinned mode.
var (
	redisCores  = []int{0}
	serverCores = []int{1, 2, 3}
	loadCores   = []int{4, 5, 6, 7, 8, 9}
)

// pinning reports whether the benchmarks run in pinned mode.
func pinning() bool {
	return os.Getenv("LOCKD_BENCH_PIN") == "1" && runtime.NumCPU() >= pinCores
}

// pin keeps every thread of process pid on cores, in pinned mode; threads
// it starts later inherit that. pid 0 is this process.
func pin(b *testing.B, pid int, cores []int) {
	b.Helper()
	if !pinning() {
		return
	}
	if pid == 0 {
		pid = os.Getpid()
	}
	var set unix.CPUSet
	for _, c := range cores {
		set.Set(c)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Fatalf("pinning %d: %v", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			b.Fatalf("pinning thread %d of %d to %v: %v", tid, pid, cores, err)
		}
	}
}
