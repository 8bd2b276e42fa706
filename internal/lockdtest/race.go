//go:build race

package lockdtest

// Race reports whether the test binary runs with the race detector.
const Race = true
