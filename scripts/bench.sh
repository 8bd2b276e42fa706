#!/usr/bin/env bash
# Runs lockd's benchmarks and writes BENCHMARKS.md: the machine, the command,
# a table of the results and the raw output.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${BENCH_COUNT:-3}
benchtime=${BENCH_TIME:-3s}
cmd=(go test -run '^$' -bench . -benchtime "$benchtime" -count "$count" ./internal/bench/ ./internal/e2e/)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
if [ -n "${BENCH_RAW:-}" ]; then
  # Rewrite BENCHMARKS.md from an earlier run's raw output.
  cp "$BENCH_RAW" "$raw"
else
  echo "running: ${cmd[*]}" >&2
  "${cmd[@]}" | tee "$raw" >&2
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || true)
{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` ($(date -u +%Y-%m-%d)). Re-run it to refresh this file."
  echo
  echo "- machine: $(nproc) cores, ${cpu:-unknown CPU}, $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -sr)"
  echo "- $(go version | cut -d' ' -f3-), $(redis-server --version | cut -d' ' -f1-3)"
  echo "- command: \`${cmd[*]}\`"
  echo "- Redis, lockd and the load generator share the machine's cores."
  echo
  echo "## Median of $count runs"
  echo
  echo "| benchmark | metric | value |"
  echo "|---|---|---|"
  awk '/^Benchmark/ {
      name=$1; sub(/-[0-9]+$/, "", name)
      for (i = 3; i < NF; i += 2) {
        if ($(i+1) == "ns/op" && $i == 0) continue
        key = name "\t" $(i+1)
        if (!(key in vals)) keys[++n] = key
        vals[key] = vals[key] " " $i
      }
    }
    END {
      for (j = 1; j <= n; j++) {
        key = keys[j]; m = split(vals[key], v, " ")
        for (a = 2; a <= m; a++) { x = v[a] + 0; b = a - 1; while (b >= 1 && v[b] + 0 > x) { v[b+1] = v[b]; b-- } v[b+1] = x }
        split(key, k, "\t")
        printf "| %s | %s | %s |\n", k[1], k[2], v[int((m + 1) / 2)]
      }
    }' "$raw"
  echo
  ratio() { awk -v c="$1" '/^BenchmarkAcquireRelease/ && $0 ~ "conc=" c "-" {
      for (i = 3; i < NF; i += 2) if ($(i+1) == "pairs/s") { if ($1 ~ /path=grpc/) g[++ng] = $i; else d[++nd] = $i } }
      END { if (nd && ng) { sg = 0; sd = 0; for (i in g) sg += g[i]; for (i in d) sd += d[i]; printf "%.2f", (sg/ng)/(sd/nd) } }' "$raw"; }
  echo "## gRPC hop"
  echo
  echo "Acquire+Release pairs/s through gRPC divided by the same engine calling the same scripts straight (mean of the runs):"
  echo
  for c in 1 16 64; do echo "- concurrency $c: $(ratio $c)"; done
  echo
  if [ -f BENCHMARKS.notes.md ]; then cat BENCHMARKS.notes.md; echo; fi
  echo "## Raw output"
  echo
  echo '```'
  cat "$raw"
  echo '```'
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
