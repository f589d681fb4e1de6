#!/usr/bin/env bash
# bench-gubernator.sh: bucketd in lease mode side by side with Gubernator
# (issue 18), on the same shared-limit workload, with tools/gubernator-bench:
#
#   - two Gubernator v2.13.0 peers (started by the tool, as two processes on
#     127.0.0.1 and 127.0.0.2 with a static peer list), Behavior GLOBAL, with
#     TOKEN_BUCKET and with LEAKY_BUCKET;
#   - two bucketd instances in lease mode on one redis-server (started here).
#
# 20 keys, each a bucket of capacity 100 refilled at 50/s, asked far above
# that by 32 clients split over both peers or instances, at 1 and at 16
# decisions per round trip, 10 s a run, medians of REPS, contenders rotated.
# It prints a markdown table (decisions/s, grants against the ideal, grants
# above one bucket over 100 ms and 1 s windows, round trips, server CPU per
# decision), /proc/loadavg before and after, the commit and the date.
#
# Environment: REPS (3), DURATION (10s), CLIENTS (32), KEYS (20), QUICK=1
# (REPS=1 and DURATION=3s: under a minute once built), LEASE_FLAGS (extra
# flags for both bucketd instances, e.g. "--lease-target 500ms"),
# GUBERNATOR_SYNC_WAIT (Gubernator's GlobalSyncWait; unset: its default,
# 100ms), GUBERNATOR_WINDOW (Gubernator's duration: a limit of rate x
# this per this, burst 100; unset: 100 per 2 s), BUCKETD_BIN and BENCH_BIN (unset: built here), JSON (a file for
# every run as JSON). The first build of the tool downloads Gubernator and
# its dependencies from the Go module proxy and takes minutes.
set -euo pipefail
script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
cd -- "$script_dir/.."

if [[ ${QUICK:-} == 1 ]]; then
  REPS=${REPS:-1}
  DURATION=${DURATION:-3s}
fi
REPS=${REPS:-3}
DURATION=${DURATION:-10s}
CLIENTS=${CLIENTS:-32}
KEYS=${KEYS:-20}
HOST=127.0.0.1
log() { printf 'bench-gubernator: %s\n' "$*" >&2; }
die() {
  printf 'bench-gubernator: FAIL: %s\n' "$*" >&2
  exit 1
}
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found in PATH"
done

# shellcheck source=scripts/bench-lib.sh
. "$script_dir/bench-lib.sh"
run_dir bench-gubernator

if [[ -z ${BUCKETD_BIN:-} ]]; then
  log "building ./cmd/bucketd"
  go build -o "$tmp/bucketd" ./cmd/bucketd || die "go build ./cmd/bucketd failed"
  BUCKETD_BIN=$tmp/bucketd
fi
if [[ -z ${BENCH_BIN:-} ]]; then
  log "building tools/gubernator-bench"
  go -C tools/gubernator-bench build -o "$tmp/gubernator-bench" . || die "building tools/gubernator-bench failed"
  BENCH_BIN=$tmp/gubernator-bench
fi
"$BUCKETD_BIN" --help 2>&1 | grep -q -- --leases || die "$BUCKETD_BIN has no --leases flag"

read -r redis_port < <(free_ports 1) || die "no free port"
redis-server --bind "$HOST" --port "$redis_port" --save '' --appendonly no --daemonize no \
  --dir "$tmp" >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
wait_ready redis-server "$redis_port" "$redis_pid" "$tmp/redis.log"

# start_bucketd NAME: a lease-mode bucketd on a port of its choice; sets
# bucketd_addr from its "listening" log line.
read -r -a lease_flags <<<"${LEASE_FLAGS:-}"
declare -A bucketd_pid
start_bucketd() {
  local name=$1 logf=$tmp/$1.log addr=
  "$BUCKETD_BIN" --store "redis://$HOST:$redis_port/0" --leases --redis-timeout 1s --lease-ttl 4s \
    --addr "$HOST:0" --metrics-addr= ${lease_flags[@]+"${lease_flags[@]}"} >"$logf" 2>&1 &
  bucketd_pid[$name]=$!
  pids+=("$!")
  for _ in $(seq 100); do
    kill -0 "${bucketd_pid[$name]}" 2>/dev/null || { cat -- "$logf" >&2; die "bucketd ($name) exited during startup"; }
    addr=$(grep -o 'msg=listening addr=[^ ]*' "$logf" | head -1 | cut -d= -f3 || true)
    [[ -n $addr ]] && break
    sleep 0.1
  done
  [[ -n $addr ]] || { cat -- "$logf" >&2; die "bucketd ($name) logged no listening address"; }
  grep -q 'msg=listening.* mode=leases ' "$logf" || die "bucketd ($name) is not in lease mode: $(grep -m1 'msg=listening' "$logf")"
  [[ $(redis-cli -h "${addr%:*}" -p "${addr##*:}" TB.ACQUIRE sanity 100 50 1) == 1 ]] ||
    die "TB.ACQUIRE sanity check failed on bucketd ($name) at $addr"
  bucketd_addr=$addr
}
start_bucketd a
addr_a=$bucketd_addr
start_bucketd b
addr_b=$bucketd_addr

load_before=$(cat /proc/loadavg)
args=(--bucketd "$addr_a,$addr_b" --bucketd-pids "${bucketd_pid[a]},${bucketd_pid[b]},$redis_pid"
  --reps "$REPS" --duration "$DURATION" --clients "$CLIENTS" --keys "$KEYS")
if [[ -n ${GUBERNATOR_SYNC_WAIT:-} ]]; then args+=(--global-sync-wait "$GUBERNATOR_SYNC_WAIT"); fi
if [[ -n ${GUBERNATOR_WINDOW:-} ]]; then args+=(--gubernator-window "$GUBERNATOR_WINDOW"); fi
if [[ -n ${JSON:-} ]]; then args+=(--json "$JSON"); fi
log "running: gubernator-bench ${args[*]}"
start_s=$SECONDS
"$BENCH_BIN" "${args[@]}" --command "REPS=$REPS DURATION=$DURATION CLIENTS=$CLIENTS KEYS=$KEYS${LEASE_FLAGS:+ LEASE_FLAGS=\"$LEASE_FLAGS\"}${GUBERNATOR_SYNC_WAIT:+ GUBERNATOR_SYNC_WAIT=$GUBERNATOR_SYNC_WAIT}${GUBERNATOR_WINDOW:+ GUBERNATOR_WINDOW=$GUBERNATOR_WINDOW} scripts/bench-gubernator.sh" \
  >"$tmp/table.md" 2>"$tmp/runs.log" || {
  cat -- "$tmp/runs.log" "$tmp/table.md" >&2
  die "gubernator-bench failed"
}
elapsed=$((SECONDS - start_s))
load_after=$(cat /proc/loadavg)
for name in a b; do
  kill -0 "${bucketd_pid[$name]}" 2>/dev/null || die "bucketd ($name) died during the run"
done
info() { redis-cli -h "${1%:*}" -p "${1##*:}" INFO leases | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'; }

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain 2>/dev/null) ]]; then commit="$commit (with uncommitted changes)"; fi
echo "## Against Gubernator (\`scripts/bench-gubernator.sh\`)"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M:%S UTC'); commit $commit; nproc $(nproc); $(redis-server --version | cut -d' ' -f1-3); $(go version | cut -d' ' -f3); ${elapsed} s of runs"
echo "- /proc/loadavg before: $load_before; after: $load_after"
echo "- bucketd: two instances \`--store redis://... --leases --redis-timeout 1s --lease-ttl 4s${LEASE_FLAGS:+ $LEASE_FLAGS}\` on one redis-server, TB.ACQUIRE key 100 50 1 (a pipeline of them for a batch); GOMAXPROCS unset; server CPU counts both instances and Redis"
cat -- "$tmp/table.md"
echo
echo "Lease counters at the end (instance a / b): decisions from leases $(info "$addr_a" lease_decisions_local_total) / $(info "$addr_b" lease_decisions_local_total), by Redis $(info "$addr_a" lease_decisions_redis_total) / $(info "$addr_b" lease_decisions_redis_total); lease calls $(info "$addr_a" lease_calls_total) / $(info "$addr_b" lease_calls_total)"
echo
echo "Runs, in order:"
echo
echo '```'
cat -- "$tmp/runs.log"
echo '```'
