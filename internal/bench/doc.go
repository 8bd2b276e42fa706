// Package bench holds lockd's benchmarks, run by `make bench`, which writes
// their results to BENCHMARKS.md. See the benchmark functions for what each
// one measures.
package bench
