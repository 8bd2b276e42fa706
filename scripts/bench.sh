#!/usr/bin/env bash
# Runs lockd's benchmarks and writes BENCHMARKS.md: the machine, the targets
# with what was measured, lockd beside etcd, waiting at scale, cost as work
# grows, every result, a reading of the numbers (BENCHMARKS.notes.md) and the
# raw output.
#
#   BENCH_COUNT=3      runs of every benchmark (the tables show medians)
#   BENCH_TIME=3s      how long each thing compared is measured per run
#   BENCH_LONG=1       adds the runs that take minutes (1M distinct keys)
#   BENCH_RAW=file     rewrites BENCHMARKS.md from an earlier run's raw output
#   BENCH_PROFILE=dir  instead: CPU and allocation profiles of lockd under
#                      uncontended load (BenchmarkInProcess), their top
#                      entries in dir/top.txt
set -euo pipefail
cd "$(dirname "$0")/.."

count=${BENCH_COUNT:-3}
benchtime=${BENCH_TIME:-3s}

if [ -n "${BENCH_PROFILE:-}" ]; then
  dir=$BENCH_PROFILE
  mkdir -p "$dir"
  go test -run '^$' -bench '^BenchmarkInProcess$' -benchtime "${BENCH_TIME:-10s}" -count 1 \
    -cpuprofile "$dir/cpu.pprof" -memprofile "$dir/mem.pprof" -o "$dir/bench.test" ./internal/bench/ | tee "$dir/bench.txt" >&2
  # CPU samples carry the server's pprof label; allocation samples do not,
  # so they are narrowed to stacks through the gRPC server or lockd's own
  # packages (the load generator's client calls pass through neither).
  server='grpc\.\(\*Server\)|NewServerTransport|http2Server|lockd/lockd/internal/(server|service|redislock|telemetry|auth)'
  top() { go tool pprof -top -nodecount 25 "$@" 2>/dev/null; }
  {
    echo "### CPU of lockd's goroutines (-tagfocus side=lockd), by flat time"
    top -tagfocus side=lockd "$dir/bench.test" "$dir/cpu.pprof"
    echo
    echo "### CPU of lockd's goroutines, by cumulative time"
    top -cum -tagfocus side=lockd "$dir/bench.test" "$dir/cpu.pprof"
    echo
    echo "### Bytes allocated on the server side"
    top -sample_index=alloc_space -focus "$server" "$dir/bench.test" "$dir/mem.pprof"
    echo
    echo "### Objects allocated on the server side"
    top -sample_index=alloc_objects -focus "$server" "$dir/bench.test" "$dir/mem.pprof"
  } > "$dir/top.txt"
  echo "wrote $dir/top.txt" >&2
  exit 0
fi

# Pinned mode needs a core for Redis, three for lockd (and etcd in turn),
# and six for the load generator; see internal/bench/pin_test.go.
if [ "$(nproc)" -ge 12 ]; then
  export LOCKD_BENCH_PIN=1
  mode="pinned: Redis on core 0, lockd and etcd (measured in turns) on cores 1-3, the load generator on cores 4-9"
else
  mode="shared cores: this machine has $(nproc); pinning each process to cores of its own needs 12, so the processes share them and CPU per operation and the ratios taken in one run are what count"
fi
cmd=(go test -run '^$' -bench . -benchtime "$benchtime" -count "$count" -timeout 0 ./internal/bench/)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
if [ -n "${BENCH_RAW:-}" ]; then
  cp "$BENCH_RAW" "$raw"
else
  echo "running: ${cmd[*]}" >&2
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  "${cmd[@]}" | tee "$raw" >&2
  echo "load average: $before before the run, $(cut -d' ' -f1-3 /proc/loadavg) after" >> "$raw"
  echo "commit: $(git describe --always --dirty)" >> "$raw"
  echo "mode: $mode" >> "$raw"
fi
load=$(sed -n 's/^load average: //p' "$raw")
commit=$(sed -n 's/^commit: //p' "$raw")
mode=$(sed -n 's/^mode: //p' "$raw")

# med NAME METRIC prints the median of METRIC over the runs of benchmark
# NAME (without its -GOMAXPROCS suffix), or nothing.
med() {
  awk -v want="$1" -v unit="$2" '/^Benchmark/ {
      name = $1; sub(/-[0-9]+$/, "", name)
      if (name != want) next
      for (i = 3; i < NF; i += 2) if ($(i+1) == unit) v[++n] = $i + 0
    }
    END {
      if (!n) exit
      for (a = 2; a <= n; a++) { x = v[a]; b = a - 1; while (b >= 1 && v[b] > x) { v[b+1] = v[b]; b-- } v[b+1] = x }
      print v[int((n + 1) / 2)]
    }' "$raw"
}
# num VALUE [DIGITS] prints VALUE with DIGITS decimals (default 0), or n/a.
num() { if [ -z "$1" ]; then echo "n/a"; else awk -v v="$1" -v d="${2:-0}" 'BEGIN { printf "%.*f", d, v }'; fi; }
# ratio A B prints A ÷ B with 2 decimals, or n/a.
ratio() { if [ -z "$1" ] || [ -z "$2" ]; then echo "n/a"; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b ? a / b : 0) }'; fi; }
# verdict VALUE OP TARGET prints met or not met (OP is >= or <=).
verdict() {
  if [ -z "$1" ] || [ "$1" = "n/a" ]; then echo "not measured"; return; fi
  awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == ">=") ? v >= t : v <= t; print (ok ? "met" : "not met") }'
}

vs=BenchmarkVersusEtcd/op=uncontended/conc
rc=BenchmarkRedisCost
ct=BenchmarkVersusEtcd/op=contended/waiters=16/hold=200us
herd=BenchmarkHerd/waiters
ka=BenchmarkKeepAliveStreams

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || true)
etcdv=$(etcd --version 2>/dev/null | awk 'NR == 1 { sub(/etcd Version: /, "etcd "); print }' || true)
tmpfs=$(df -T "${TMPDIR:-/tmp}" 2>/dev/null | awk 'NR == 2 { print $2 }')
{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` ($(date -u +%Y-%m-%d)). Re-run it to refresh this file."
  echo
  echo "- machine: $(nproc) cores, ${cpu:-unknown CPU}, $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -sr)"
  echo "- $(go version | cut -d' ' -f3-), $(redis-server --version | cut -d' ' -f1-3), ${etcdv:-etcd not installed} (Debian's etcd-server)"
  echo "- command: \`${cmd[*]}\`$( [ "${BENCH_LONG:-}" = 1 ] && echo " with BENCH_LONG=1")"
  echo "- lockd at commit ${commit:-not recorded}"
  echo "- mode: ${mode:-not recorded}"
  echo "- Other work may run beside the benchmarks: absolute rates are noisy; the ratios, taken in one run with the systems"
  echo "  compared in alternating slices, are what count. Load average (1, 5, 15 min): ${load:-not recorded}."
  echo "- lockd runs as its own process (cmd/lockd, default flags) on a redis-server without persistence;"
  echo "  etcd as its own process, one member, its data and the log it fsyncs on every write in a temporary directory (${tmpfs:-unknown} file system)."
  echo "  Each is reached through one gRPC connection from the benchmark process, with generated stubs and the same workers."
  echo
  echo "## Targets"
  echo
  echo "Medians of $count runs."
  echo
  echo "| measure | target | measured | |"
  echo "|---|---|---|---|"
  v=$(med "$rc" pair/bare)
  echo "| Redis CPU per uncontended Acquire+Release pair ÷ a bare SET NX PX + DEL pair, same Redis, same run: no owner or request_id | ≤ 2.5 | $(num "$v" 2) | $(verdict "$v" "<=" 2.5) |"
  v=$(med "$rc" pair-rid/bare)
  echo "| the same with an owner and a request_id on both calls, as the client libraries send them | ≤ 2.5 | $(num "$v" 2) | $(verdict "$v" "<=" 2.5) |"
  # lockd beside etcd is judged only with each on cores of its own: on
  # shared cores lockd's Redis and lockd itself take cores from each other
  # (the reading in BENCHMARKS.notes.md).
  judge() { case "$mode" in pinned*) verdict "$@" ;; *) echo "shared cores: not judged" ;; esac; }
  for c in 16 64 256; do
    v=$(med "$vs=$c" pairs-lockd/etcd)
    echo "| uncontended Acquire+Release pairs/s at concurrency $c, lockd ÷ etcd v3lock Lock+Unlock, 3 cores each | ≥ 2 | $(num "$v" 2) | $(judge "$v" ">=" 2) |"
  done
  v=$(med "$vs=1" pairs-lockd/etcd)
  echo "| the same at concurrency 1 | ≥ 1 | $(num "$v" 2) | $(judge "$v" ">=" 1) |"
  v=$(med "$ct" holds-lockd/etcd)
  echo "| contended holds/s, 16 waiters, 200 µs holds, lockd ÷ etcd | ≥ 6 | $(num "$v" 2) | $(verdict "$v" ">=" 6) |"
  v=$(med "$ct" lockd-p99-ms)
  echo "| the same: lockd's handoff p99 | ≤ 5 ms | $(num "$v" 2) ms | $(verdict "$v" "<=" 5) |"
  v=$(med "$vs=64" lockd-pairs/half-noop)
  echo "| lockd pairs/s ÷ (no-op unary calls/s on the same lockd ÷ 2), concurrency 64 | ≥ 0.7 | $(num "$v" 2) | $(verdict "$v" ">=" 0.7) |"
  v=$(med BenchmarkStack/path=full/conc=64 full/bare)
  echo "| full production stack ÷ bare server, pairs/s at concurrency 64 | ≥ 0.9 | $(num "$v" 2) | $(verdict "$v" ">=" 0.9) |"
  s16=$(med "$herd=16" scripts/handoff)
  s256=$(med "$herd=256" scripts/handoff)
  g=$(ratio "$s256" "$s16")
  echo "| Redis script calls per handoff, 256 waiters ÷ 16 waiters (O(1) when it stays near 1; met at ≤ 1.5) | O(1) | $(num "$s16" 1) → $(num "$s256" 1): ×$g | $(verdict "$g" "<=" 1.5) |"
  v=$(med "$ka" rss-bytes/stream)
  kib=$( [ -n "$v" ] && awk -v v="$v" 'BEGIN { printf "%.1f", v / 1024 }' || true)
  echo "| KeepAlive streams: resident memory per stream on one lockd process (10,000 streams) | ≤ 20 KiB | $(num "$kib" 1) KiB | $(verdict "$kib" "<=" 20) |"
  echo
  echo "## lockd beside etcd"
  echo
  echo "Uncontended: each worker takes and gives back a key of its own (lockd Acquire+Release; etcd v3lock Lock+Unlock with one lease per worker, granted up front)."
  echo "No-op: lockd's grpc.health.v1.Health/Check, etcd's Maintenance.Status (answered from memory, no raft round). CPU: microseconds of each server process (lockd and Redis together for lockd) per pair."
  echo
  echo "| measure | concurrency | lockd | etcd | lockd ÷ etcd |"
  echo "|---|---|---|---|---|"
  for c in 1 16 64 256; do
    echo "| uncontended pairs/s | $c | $(num "$(med "$vs=$c" lockd-pairs/s)") | $(num "$(med "$vs=$c" etcd-pairs/s)") | $(num "$(med "$vs=$c" pairs-lockd/etcd)" 2) |"
  done
  for c in 1 16 64 256; do
    echo "| no-op calls/s | $c | $(num "$(med "$vs=$c" lockd-noops/s)") | $(num "$(med "$vs=$c" etcd-noops/s)") | $(num "$(med "$vs=$c" noop-lockd/etcd)" 2) |"
  done
  for c in 1 16 64 256; do
    echo "| pairs/s ÷ (no-op calls/s ÷ 2) | $c | $(num "$(med "$vs=$c" lockd-pairs/half-noop)" 2) | $(num "$(med "$vs=$c" etcd-pairs/half-noop)" 2) | |"
  done
  for c in 1 16 64 256; do
    l=$(awk -v a="$(med "$vs=$c" lockd-cpu-us/pair)" -v b="$(med "$vs=$c" redis-cpu-us/pair)" 'BEGIN { printf "%.0f", a + b }')
    echo "| server CPU µs per pair (lockd + Redis) | $c | $l | $(num "$(med "$vs=$c" etcd-cpu-us/pair)") | |"
  done
  echo "| contended holds/s (16 waiters, 200 µs holds) | 16 | $(num "$(med "$ct" lockd-holds/s)") | $(num "$(med "$ct" etcd-holds/s)") | $(num "$(med "$ct" holds-lockd/etcd)" 2) |"
  echo "| handoff p50 ms | 16 | $(num "$(med "$ct" lockd-p50-ms)" 2) | $(num "$(med "$ct" etcd-p50-ms)" 2) | |"
  echo "| handoff p99 ms | 16 | $(num "$(med "$ct" lockd-p99-ms)" 2) | $(num "$(med "$ct" etcd-p99-ms)" 2) | |"
  echo "| wait spread (longest ÷ mean wait) | 16 | $(num "$(med "$ct" lockd-wait-max/mean)" 1) | $(num "$(med "$ct" etcd-wait-max/mean)" 1) | |"
  echo
  echo "## What an operation costs Redis"
  echo
  echo "One redis-server, one lockd process on it, 16 workers; the four kinds of operation in short slices, the order rotating (BenchmarkRedisCost)."
  echo "Redis CPU is the redis-server process's (/proc, every thread); commands include those the scripts run (INFO commandstats)."
  echo "bare is the simplest Redis lock: SET key value PX ttl NX, then DEL key. pair is Acquire+Release through lockd without owner or request_id;"
  echo "pair-rid the same with both, as the client libraries send them; handoff is 16 workers on one key, each waiting its turn and releasing at once."
  echo
  echo "| operation | Redis CPU µs / op | ÷ bare pair | Redis commands / op | script calls / op | lockd CPU µs / op | ops/s |"
  echo "|---|---|---|---|---|---|---|"
  for o in bare pair pair-rid handoff; do
    r=""
    case $o in pair) r=$(num "$(med "$rc" pair/bare)" 2) ;; pair-rid) r=$(num "$(med "$rc" pair-rid/bare)" 2) ;; bare) r=1 ;; esac
    l=$(med "$rc" "$o-lockd-cpu-us/op")
    echo "| $o | $(num "$(med "$rc" "$o-redis-cpu-us/op")" 1) | ${r:-} | $(num "$(med "$rc" "$o-redis-cmds/op")" 1) | $(num "$(med "$rc" "$o-scripts/op")" 1) | $( [ -n "$l" ] && num "$l" || echo "–") | $(num "$(med "$rc" "$o-ops/s")") |"
  done
  rl=BenchmarkRateLimitRedisCost/op=allowed
  if [ -n "$(med "$rl" take/set)" ]; then
    echo
    echo "Rate limits (BenchmarkRateLimitRedisCost, BenchmarkRateLimitThroughLockd): Redis CPU per allowed Take ÷ a bare SET $(num "$(med "$rl" take/set)" 2),"
    echo "per refused Take ÷ a bare SET $(num "$(med BenchmarkRateLimitRedisCost/op=refused take/set)" 2);"
    echo "decisions/s through one lockd, 64 callers: $(num "$(med BenchmarkRateLimitThroughLockd/keys=distinct decision-decisions/s)") on distinct keys, $(num "$(med BenchmarkRateLimitThroughLockd/keys=one decision-decisions/s)") on one key."
  fi
  echo
  echo "## Waiting at scale"
  echo
  echo "N waiters on one key of one lockd process, 200 µs holds, each going to the back of the line after releasing."
  echo "Script calls are Redis round trips; Redis commands include those the scripts run (INFO commandstats)."
  echo
  echo "| waiters | holds/s | handoff p50 ms | p99 ms | mean wait ms | wait spread | script calls / handoff | Redis commands / handoff | lockd CPU µs / handoff | Redis CPU µs / handoff |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for n in 16 64 256 1000; do
    h="$herd=$n"
    [ -n "$(med "$h" holds/s)" ] || continue
    echo "| $n | $(num "$(med "$h" holds/s)") | $(num "$(med "$h" p50-ms)" 2) | $(num "$(med "$h" p99-ms)" 2) | $(num "$(med "$h" wait-mean-ms)") | $(num "$(med "$h" wait-max/mean)" 1) | $(num "$(med "$h" scripts/handoff)" 1) | $(num "$(med "$h" redis-cmds/handoff)") | $(num "$(med "$h" lockd-cpu-us/handoff)") | $(num "$(med "$h" redis-cpu-us/handoff)") |"
  done
  echo
  echo "## Cost as work grows"
  echo
  echo "| measure | value |"
  echo "|---|---|"
  m=BenchmarkRedisMemory
  echo "| Redis memory per held lock (used_memory growth over 10,000 locks) | $(num "$(med $m held-bytes/lock)") bytes |"
  echo "| Redis keys per held lock, and their MEMORY USAGE | $(num "$(med $m held-keys/lock)" 1) keys, $(num "$(med $m held-key-bytes/lock)") bytes |"
  echo "| Redis keys per idle key (just released), and their MEMORY USAGE | $(num "$(med $m idle-keys/key)" 1) keys, $(num "$(med $m idle-key-bytes/key)") bytes |"
  echo "| how long released locks' keys stay in Redis | $(num "$(med $m idle-linger-s)" 1) s |"
  for k in 1k 100k 1M; do
    h=BenchmarkKeyspace/keys=$k
    [ -n "$(med "$h" pairs/s)" ] || continue
    echo "| CPU per pair cycling through $k distinct keys (64 workers): lockd, Redis | $(num "$(med "$h" lockd-cpu-us/pair)") µs, $(num "$(med "$h" redis-cpu-us/pair)") µs ($(num "$(med "$h" pairs/s)") pairs/s; $(num "$(med "$h" redis-keys-at-end)") Redis keys, $(num "$(med "$h" redis-used-MiB-at-end)" 1) MiB at the end) |"
  done
  h="$herd=1000"
  if [ -n "$(med "$h" holds/s)" ]; then
    echo "| 1,000 waiters on one key: holds/s, handoff p99, script calls per handoff | $(num "$(med "$h" holds/s)"), $(num "$(med "$h" p99-ms)" 1) ms, $(num "$(med "$h" scripts/handoff)") |"
  fi
  echo "| 10,000 KeepAlive streams on one lockd: memory per stream, lockd CPU per renewal, leases lost | $(num "$(med $ka rss-bytes/stream)") bytes, $(num "$(med $ka lockd-cpu-us/renewal)") µs, $(num "$(med $ka leases-lost)") |"
  echo
  echo "## Every result"
  echo
  echo "Median of $count runs."
  echo
  echo "| benchmark | metric | value |"
  echo "|---|---|---|"
  awk '/^Benchmark/ {
      name=$1; sub(/-[0-9]+$/, "", name)
      for (i = 3; i < NF; i += 2) {
        # A log line written into the benchmark line ends its metrics.
        if ($i !~ /^-?[0-9][0-9.eE+-]*$/) break
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
  if [ -f BENCHMARKS.notes.md ]; then cat BENCHMARKS.notes.md; echo; fi
  echo "## Raw output"
  echo
  echo '```'
  cat "$raw"
  echo '```'
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
