#!/usr/bin/env bash
# bench-memory.sh: memory per live bucket, bucketd next to Redis running the classic Lua
# token bucket; the command behind the README's memory figure (docs/load.md).
#
#   scripts/bench-memory.sh            # 10,000,000 buckets: about 2 min, 1 GB for bucketd, then 2 GB for Redis
#   QUICK=1 scripts/bench-memory.sh    # 200,000 buckets, seconds; checks the steps, not the figure
#
# It builds bucketd (./cmd/bucketd) and the load generator (tools/bucketd-load, a module
# of its own) into a temporary directory, starts bucketd on a free loopback port
# (--metrics-addr=, none of the caller's BUCKETD_ variables, so it never meets a bucketd
# already running), and has bucketd-load write BUCKETS distinct 16-byte keys once each
# (TB.ACQUIRE k000000000000042 1000000 1e-9 1: every bucket stays live) while it reads
# the VmRSS of that process, by the PID the script started. Then the same keys go to a
# throwaway redis-server through the classic script (EVALSHA, capacity 10: the script's
# PEXPIRE refuses 1e15 ms). One server runs at a time. Bytes per bucket = (VmRSS after -
# VmRSS before) / keys added; bucketd-load exits non-zero when a reply was an error or
# the fill is incomplete, and so does this script.
#
# Environment: QUICK (1: BUCKETS=200000), BUCKETS (default 10000000), BUCKETD_BIN (use
# this binary instead of building one). Output: a Markdown report on stdout, progress
# on stderr.
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/.." && pwd -P)
cd -- "$repo_root"

[[ ${QUICK:-} == 1 ]] && BUCKETS=${BUCKETS:-200000}
BUCKETS=${BUCKETS:-10000000}
HOST=127.0.0.1
log() { printf 'bench-memory: %s\n' "$*" >&2; }
die() { printf 'bench-memory: FAIL: %s\n' "$*" >&2; exit 1; }
[[ $BUCKETS =~ ^[0-9]+$ ]] && ((BUCKETS >= 1)) || die "BUCKETS must be a positive integer, got '$BUCKETS'"
for tool in go redis-server redis-cli; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found in PATH (Debian: apt-get install redis-server redis-tools)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bucketd-memory.XXXXXX")
pid=
# shellcheck source=scripts/bench-lib.sh
. "$script_dir/bench-lib.sh"
cleanup() {
  local rc=$?
  stop_pids "$pid"
  rm -rf -- "$tmp"
  exit "$rc"
}
trap_exit cleanup

load_start=$(cat /proc/loadavg 2>/dev/null || echo "n/a")
rev=$(git rev-parse --short HEAD 2>/dev/null || echo no-git)
if [[ -z ${BUCKETD_BIN:-} ]]; then
  log "building ./cmd/bucketd and tools/bucketd-load"
  go build -o "$tmp/bucketd" ./cmd/bucketd || die "go build ./cmd/bucketd failed"
  BUCKETD_BIN=$tmp/bucketd
fi
go -C tools/bucketd-load build -o "$tmp/bucketd-load" . || die "building tools/bucketd-load failed"

# prefill NAME PORT ARGS...: fill the server whose PID is $pid; prints bytes per bucket.
prefill() {
  local name=$1 port=$2
  shift 2
  log "$name: writing $BUCKETS buckets"
  "$tmp/bucketd-load" --addr "$HOST:$port" --prefill "$BUCKETS" --rate 1e-9 --pid "$pid" --settle 3s "$@" \
    >"$tmp/$name.txt" 2>"$tmp/$name.err" || { cat -- "$tmp/$name.txt" "$tmp/$name.err" >&2; die "$name: bucketd-load failed"; }
  awk '/bytes per bucket by VmRSS/ { print $1 }' "$tmp/$name.txt"
}

read -r port < <(free_ports 1) || die "no free port"
bucketd_env=(env)
while read -r var; do bucketd_env+=(-u "$var"); done < <(compgen -e | grep '^BUCKETD_' || true)
"${bucketd_env[@]}" "$BUCKETD_BIN" --addr "$HOST:$port" --metrics-addr= >"$tmp/bucketd.log" 2>&1 &
pid=$!
wait_ready bucketd "$port" "$pid" "$tmp/bucketd.log"
bucketd_bpb=$(prefill bucketd "$port" --capacity 1000000)
stop_pids "$pid"
pid=

read -r port < <(free_ports 1) || die "no free port"
mkdir -p -- "$tmp/redis"
redis-server --bind "$HOST" --port "$port" --save '' --appendonly no --daemonize no --dir "$tmp/redis" \
  >"$tmp/redis.log" 2>&1 &
pid=$!
wait_ready redis-server "$port" "$pid" "$tmp/redis.log"
redis_bpb=$(prefill redis "$port" --capacity 10 --eval scripts/classic-token-bucket.lua)
stop_pids "$pid"
pid=

[[ -n $bucketd_bpb && -n $redis_bpb ]] || die "no 'bytes per bucket by VmRSS' line in bucketd-load's report"
mode="full"
[[ ${QUICK:-} == 1 ]] && mode="QUICK=1 (few buckets: the tables' growth steps dominate; do not quote it)"
cat <<EOF
## Memory per live bucket: bucketd vs Redis + Lua

- Date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); mode: $mode; bucketd at $rev
- Machine: nproc $(nproc), $(uname -sm); load (/proc/loadavg) before: $load_start, after: $(cat /proc/loadavg 2>/dev/null || echo n/a)
- $(redis-server --version)
- $BUCKETS distinct 16-byte keys (k000000000000000 ...), one call each, rate 1e-9 (every bucket stays live);
  bucketd-load --prefill $BUCKETS --pid PID (8 connections, pipeline 256)

| server | bytes per bucket by VmRSS, just after filling |
|---|---:|
| bucketd | $bucketd_bpb |
| Redis + classic Lua (EVALSHA) | $redis_bpb |

bucketd-load's reports:

\`\`\`text
$(cat -- "$tmp/bucketd.txt")

$(cat -- "$tmp/redis.txt")
\`\`\`
EOF
