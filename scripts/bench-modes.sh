#!/usr/bin/env bash
# bench-modes.sh: bucketd's Redis modes measured in one run, with
# redis-benchmark as the client (50 clients, 100,000 random keys):
#
#   1. memory mode vs replicate mode, TB.ACQUIRE at -P 16 (throughput ratio);
#   2. the same while the replicate Redis is stopped (SIGSTOP): p99 ratio;
#   3. store mode (bucketd in front of Redis) vs clients calling EVALSHA with
#      the same script on the same Redis directly, at -P 1 and -P 16.
#
# One redis-server and three bucketd processes (memory, --replicate,
# --store), contenders alternated within each repetition; medians of REPS.
#
# Environment: REPS (3), N (requests per memory/replicate run, 1000000),
# REPLICATE_FLAGS (extra flags for the replicating bucketd, e.g.
# "--replicate-interval 100ms"),
# N_STORE (requests per store/direct run, 300000), CLIENTS (50), KEYSPACE
# (100000), BUCKETD_GOMAXPROCS (unset: Go default), BUCKETD_BIN (unset:
# build ./cmd/bucketd), PIN_REDIS (unset; 1: redis-server runs on CPU 1 and
# everything else on CPU 0, with taskset, which shows bucketd's own cost of
# a mode apart from the CPU that Redis takes when it shares bucketd's cores).
set -euo pipefail
script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
cd -- "$script_dir/.."

REPS=${REPS:-3}
N=${N:-1000000}
N_STORE=${N_STORE:-300000}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-100000}
HOST=127.0.0.1
log() { printf 'bench-modes: %s\n' "$*" >&2; }
die() {
  printf 'bench-modes: FAIL: %s\n' "$*" >&2
  exit 1
}
for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found in PATH"
done

pin_redis=() pin_rest=()
if [[ ${PIN_REDIS:-} == 1 ]]; then
  command -v taskset >/dev/null 2>&1 || die "PIN_REDIS=1 needs taskset (util-linux)"
  (($(nproc) >= 2)) || die "PIN_REDIS=1 needs at least 2 CPUs"
  pin_redis=(taskset -c 1) pin_rest=(taskset -c 0)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bucketd-bench-modes.XXXXXX")
pids=()
redis_pid=
# shellcheck source=scripts/bench-lib.sh
. "$script_dir/bench-lib.sh"

cleanup() {
  local rc=$?
  if [[ -n $redis_pid ]]; then kill -CONT "$redis_pid" 2>/dev/null || true; fi
  stop_pids ${pids[@]+"${pids[@]}"}
  rm -rf -- "$tmp"
  exit "$rc"
}
trap_exit cleanup

if [[ -z ${BUCKETD_BIN:-} ]]; then
  log "building ./cmd/bucketd"
  go build -o "$tmp/bucketd" ./cmd/bucketd || die "go build failed"
  BUCKETD_BIN=$tmp/bucketd
fi
read -r redis_port mem_port rep_port store_port < <(free_ports 4) || die "no free ports"

${pin_redis[@]+"${pin_redis[@]}"} redis-server --bind "$HOST" --port "$redis_port" --save '' --appendonly no --daemonize no \
  --dir "$tmp" >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
wait_ready redis-server "$redis_port" "$redis_pid" "$tmp/redis.log"

declare -A bucketd_pid
start_bucketd() { # NAME PORT FLAGS...
  local name=$1 port=$2
  shift 2
  if [[ -n ${BUCKETD_GOMAXPROCS:-} ]]; then
    ${pin_rest[@]+"${pin_rest[@]}"} env GOMAXPROCS="$BUCKETD_GOMAXPROCS" "$BUCKETD_BIN" --addr "$HOST:$port" --metrics-addr= "$@" >"$tmp/$name.log" 2>&1 &
  else
    ${pin_rest[@]+"${pin_rest[@]}"} env -u GOMAXPROCS "$BUCKETD_BIN" --addr "$HOST:$port" --metrics-addr= "$@" >"$tmp/$name.log" 2>&1 &
  fi
  bucketd_pid[$name]=$!
  pids+=("$!")
  wait_ready "bucketd ($name)" "$port" "$!" "$tmp/$name.log"
}
redis_url="redis://$HOST:$redis_port/0"
start_bucketd memory "$mem_port"
read -r -a replicate_flags <<<"${REPLICATE_FLAGS:-}"
start_bucketd replicate "$rep_port" --replicate "$redis_url" --replicate-prefix rep: ${replicate_flags[@]+"${replicate_flags[@]}"}
start_bucketd store "$store_port" --store "$redis_url" --replicate-prefix st:

sha=$(redis-cli -h "$HOST" -p "$redis_port" SCRIPT LOAD "$(cat internal/bucket/tokenbucket.lua)")
[[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD answered '$sha'"
[[ $(redis-cli -h "$HOST" -p "$redis_port" EVALSHA "$sha" 1 direct:k 100 10 1 | head -1) == 1 ]] ||
  die "EVALSHA sanity check failed"
for port in "$mem_port" "$rep_port" "$store_port"; do
  [[ $(redis-cli -h "$HOST" -p "$port" TB.ACQUIRE k 100 10 1) == 1 ]] || die "TB.ACQUIRE sanity check failed on $port"
done

acq=(TB.ACQUIRE 'key:__rand_int__' 100 10 1)
direct=(EVALSHA "$sha" 1 'direct:key:__rand_int__' 100 10 1)
results=$tmp/results.txt
: >"$results"
hz=$(getconf CLK_TCK)
measure() { # ID PORT BUCKETD_PID (- for none) N PIPELINE CMD...
  local id=$1 port=$2 bpid=$3 n=$4 pipe=$5 parsed r0 b0 r1 b1 cpu
  shift 5
  r0=$(cpu_ticks "$redis_pid") b0=0 b1=0
  if [[ $bpid != - ]]; then b0=$(cpu_ticks "$bpid"); fi
  run_bench "$port" "$n" "$pipe" "$tmp/$id-$rep.csv" "$@"
  r1=$(cpu_ticks "$redis_pid")
  if [[ $bpid != - ]]; then b1=$(cpu_ticks "$bpid"); fi
  parsed=$(parse_csv "$tmp/$id-$rep.csv") || die "cannot parse $tmp/$id-$rep.csv"
  # CPU microseconds per request of Redis and of the bucketd under test.
  cpu=$(awk -v r=$((r1 - r0)) -v b=$((b1 - b0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.2f %.2f", r / hz * 1e6 / n, b / hz * 1e6 / n }')
  echo "$id $parsed $cpu" >>"$results"
  log "rep $rep/$REPS  $id: $parsed $cpu (req/s, p50 ms, p99 ms, Redis and bucketd CPU us/request)"
}

start_s=$SECONDS
for ((rep = 1; rep <= REPS; rep++)); do
  measure memory16 "$mem_port" "${bucketd_pid[memory]}" "$N" 16 "${acq[@]}"
  measure replicate16 "$rep_port" "${bucketd_pid[replicate]}" "$N" 16 "${acq[@]}"
  kill -STOP "$redis_pid"
  measure memory16-stopped "$mem_port" "${bucketd_pid[memory]}" "$N" 16 "${acq[@]}"
  measure replicate16-stopped "$rep_port" "${bucketd_pid[replicate]}" "$N" 16 "${acq[@]}"
  kill -CONT "$redis_pid"
  measure direct1 "$redis_port" - "$N_STORE" 1 "${direct[@]}"
  measure store1 "$store_port" "${bucketd_pid[store]}" "$N_STORE" 1 "${acq[@]}"
  measure direct16 "$redis_port" - "$N_STORE" 16 "${direct[@]}"
  measure store16 "$store_port" "${bucketd_pid[store]}" "$N_STORE" 16 "${acq[@]}"
done
elapsed=$((SECONDS - start_s))
for name in memory replicate store; do
  kill -0 "${bucketd_pid[$name]}" 2>/dev/null || die "bucketd ($name) died during the run"
done
# The buckets refill in 10 s and expire from Redis, so count writes, not keys.
applied=$(redis-cli -h "$HOST" -p "$rep_port" INFO replication | tr -d '\r' | awk -F: '$1 == "replicate_applied_total" { print $2 }')
if ! [[ $applied =~ ^[0-9]+$ ]] || ((applied == 0)); then
  die "replicate mode wrote nothing to Redis (replicate_applied_total '$applied')"
fi
evalsha=$(redis-cli -h "$HOST" -p "$redis_port" INFO commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_evalsha" { print $3 }')
if ! [[ $evalsha =~ ^[0-9]+$ ]] || ((evalsha == 0)); then
  die "nothing ran EVALSHA on Redis"
fi

med() { # ID FIELD (2 = req/s, 3 = p50, 4 = p99, 5 = Redis CPU us/req, 6 = bucketd CPU us/req)
  awk -v id="$1" -v f="$2" '$1 == id { print $f }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
row() { # LABEL CONTENDER BASELINE
  printf '| %s | %.0f | %s / %s | %.0f | %s / %s | %s | %s |\n' "$1" \
    "$(med "$3" 2)" "$(med "$3" 3)" "$(med "$3" 4)" "$(med "$2" 2)" "$(med "$2" 3)" "$(med "$2" 4)" \
    "$(ratio "$(med "$2" 2)" "$(med "$3" 2)")" "$(ratio "$(med "$2" 4)" "$(med "$3" 4)")"
}

echo "## bucketd's Redis modes"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M:%S UTC'); nproc $(nproc); $(redis-server --version | cut -d' ' -f1-3); $(go version | cut -d' ' -f3); ${elapsed} s of measurements"
if ((${#pin_redis[@]})); then
  echo "- CPUs: redis-server pinned to CPU 1, bucketd and redis-benchmark to CPU 0 (PIN_REDIS=1)"
else
  echo "- CPUs: all processes share all $(nproc) CPUs"
fi
echo "- bucketd GOMAXPROCS=${BUCKETD_GOMAXPROCS:-unset (Go default)}; redis-benchmark -c $CLIENTS -r $KEYSPACE --threads 1;"
echo "  N = $N per memory/replicate run, $N_STORE per store/direct run; $REPS repetitions, medians; contenders alternated"
echo "- bucketd: \`${acq[*]}\`; Redis directly: \`EVALSHA <sha of internal/bucket/tokenbucket.lua> 1 direct:key:__rand_int__ 100 10 1\`"
echo
echo "| test | baseline req/s | baseline p50 / p99 ms | contender req/s | contender p50 / p99 ms | throughput ratio | p99 ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
row "replicate vs memory, -P 16" replicate16 memory16
row "replicate vs memory, -P 16, Redis stopped" replicate16-stopped memory16-stopped
row "store (bucketd) vs EVALSHA direct, -P 1" store1 direct1
row "store (bucketd) vs EVALSHA direct, -P 16" store16 direct16
echo
echo "Targets: replicate >= 0.80 x memory throughput at -P 16; replicate p99 <= 1.5 x memory p99 while Redis is stopped; store >= 0.90 x EVALSHA direct at 50 clients."
echo
echo "CPU time per request, medians (microseconds; user + system from /proc, redis-benchmark not counted):"
echo
echo "| run | Redis | bucketd |"
echo "|---|---:|---:|"
for id in memory16 replicate16 memory16-stopped replicate16-stopped direct1 store1 direct16 store16; do
  printf '| %s | %s | %s |\n' "$id" "$(med "$id" 5)" "$(med "$id" 6)"
done
