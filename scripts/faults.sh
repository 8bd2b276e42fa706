#!/usr/bin/env bash
# Runs lockd's fault-injection suite (internal/faults) and writes FAULTS.md:
# the machine, the command, one row per fault scenario, each scenario's first
# violations, and FAULTS.notes.md (the reading of the results) appended.
# LOCKD_FAULTS=chaos runs the longer, heavier version. Exits with the suite's
# status, after writing the file either way.
set -euo pipefail
cd "$(dirname "$0")/.."

table=$(mktemp)
trap 'rm -f "$table"' EXIT
cmd=(go test -race -count=1 -timeout 60m -v ./internal/faults/)
echo "running: LOCKD_FAULTS=${LOCKD_FAULTS:-} ${cmd[*]}" >&2
start=$(date +%s)
status=0
LOCKD_FAULTS_REPORT="$table" "${cmd[@]}" >&2 || status=$?
took=$(($(date +%s) - start))

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || true)
{
  echo "# Faults"
  echo
  echo "Written by \`make ${LOCKD_FAULTS:-faults}\` ($(date -u +%Y-%m-%d)). Re-run it to refresh this file."
  echo
  echo "- machine: $(nproc) cores, ${cpu:-unknown CPU}, $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -sr)"
  echo "- $(go version | cut -d' ' -f3-), $(redis-server --version | cut -d' ' -f1-3)"
  echo "- command: \`LOCKD_FAULTS=${LOCKD_FAULTS:-} ${cmd[*]}\` (${took}s wall, exit status $status)"
  echo "- lockd (built with -race), Redis and the clients share the machine's cores."
  echo
  echo "Each scenario runs lockd processes on real Redis with many clients"
  echo "contending for a few keys; every hold writes to a fenced resource (which"
  echo "rejects lower tokens) and to a plain one (which records overlaps). Columns:"
  echo "holds granted; calls that failed; writers overlapping on the plain resource"
  echo "(violating / with one writer past its lease, which fencing covers / inside"
  echo "a documented data-loss window); leases granted to another while still held,"
  echo "or semaphore permits granted beyond the key's limit"
  echo "(violating / inside a window); stale writes the fenced resource rejected;"
  echo "writes it accepted out of fencing order; losses lockd reported to holders and"
  echo "how long before the key's next grant; losses reported only after another"
  echo "grant (violating: the holder still had its lease's expiry ahead, or was never"
  echo "told / after the expiry the holder already knew, which scheduling on a loaded"
  echo "machine can cause); other violations (tokens, keys without expiry, holders"
  echo "evicted by an admin's ForceRelease and never told, scenario"
  echo "checks); the violations column also counts porcupine's verdicts on the"
  echo "fenced resource, the fencing tokens and the lock itself. Semaphore permits,"
  echo "held several at once, write to neither resource."
  echo
  if [ -s "$table" ]; then cat "$table"; else echo "(the suite wrote no results)"; fi
  echo
  if [ -f FAULTS.notes.md ]; then cat FAULTS.notes.md; fi
} > FAULTS.md
echo "wrote FAULTS.md" >&2
exit "$status"
