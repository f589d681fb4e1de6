#!/usr/bin/env bash
# bench-groups.sh: two buckets, one decision. TB.MACQUIRE against the ways users
# check two buckets today, in the same run, under redis-benchmark:
#
#   macquire  bucketd  TB.MACQUIRE 2 user:R 100 10 org:R 1000 100 COST 1
#   pair      bucketd  TB.ACQUIRE user:R 100 10 1, twice per decision in one pipeline
#   lua       Redis    EVALSHA <two-bucket.lua> 2 user:R org:R 100 10 1000 100 1
#
# (R: redis-benchmark's __rand_int__, drawn anew for each occurrence, from -r
# KEYSPACE.) Each at "-P 1" and "-P 16", counted in decisions: one decision is one
# TB.MACQUIRE, one EVALSHA, or two TB.ACQUIREs. redis-benchmark sends one command
# per request, so the pair is TB.ACQUIRE at -P 2 and -P 32 (2 and 32 commands per
# round trip: 1 and 16 decisions), with twice the requests, and its decisions/s is
# its req/s / 2; the pair does what users do today without a script, and is not
# atomic (the first bucket is charged even when the second denies).
#
# bucketd runs with its default shards (2 x GOMAXPROCS, 4 on 2 CPUs): the two random
# keys of a TB.MACQUIRE are on different shards in about 3 of 4 calls, which then
# park both shards for the decision (docs/architecture.md).
#
# Method as bench.sh (and docs/benchmarks.md): contenders alternated within each
# repetition (lua, macquire, pair; the order rotates each repetition), medians of
# REPS, ratios quoted; a warm-up fills the keyspaces. The report states the load
# average before and after: the machine is shared.
#
# Environment: REPS (3), N_P1 (200000 decisions), N_P16 (1000000 decisions),
# WARMUP_N (100000), CLIENTS (50), KEYSPACE (100000), BUCKETD_BIN (else a build of
# the work tree), BUCKETD_GOMAXPROCS (unset), BUCKETD_FLAGS.
#
# Example:  REPS=1 N_P1=20000 N_P16=100000 scripts/bench-groups.sh
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/.." && pwd -P)
cd -- "$repo_root"

REPS=${REPS:-3}
N_P1=${N_P1:-200000}
N_P16=${N_P16:-1000000}
WARMUP_N=${WARMUP_N:-100000}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-100000}
BUCKETD_BIN=${BUCKETD_BIN:-}
BUCKETD_GOMAXPROCS=${BUCKETD_GOMAXPROCS:-}
read -r -a bucketd_extra_flags <<<"${BUCKETD_FLAGS:-}"
HOST=127.0.0.1
LUA_SCRIPT=$script_dir/two-bucket.lua

log() { printf 'bench-groups: %s\n' "$*" >&2; }
die() { printf 'bench-groups: FAIL: %s\n' "$*" >&2; exit 1; }
for v in REPS N_P1 N_P16 WARMUP_N CLIENTS KEYSPACE; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
((REPS >= 1 && N_P1 >= 1 && N_P16 >= 1)) || die "REPS, N_P1 and N_P16 must be >= 1"
for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found in PATH"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bucketd-groups.XXXXXX")
redis_pid=
bucketd_pid=
# shellcheck source=scripts/bench-lib.sh
. "$script_dir/bench-lib.sh"
cleanup() {
  local rc=$?
  stop_pids "$bucketd_pid" "$redis_pid"
  rm -rf -- "$tmp"
  exit "$rc"
}
trap_exit cleanup

git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo no-git)
if [[ -z $BUCKETD_BIN ]]; then
  log "building ./cmd/bucketd"
  go build -o "$tmp/bucketd" ./cmd/bucketd || die "go build failed"
  BUCKETD_BIN=$tmp/bucketd
fi

read -r redis_port bucketd_port < <(free_ports 2) || die "could not find free ports"
mkdir -p -- "$tmp/redis"
redis-server --bind "$HOST" --port "$redis_port" --save '' --appendonly no \
  --daemonize no --dir "$tmp/redis" >"$tmp/redis.log" 2>&1 &
redis_pid=$!
gmp=()
[[ -n $BUCKETD_GOMAXPROCS ]] && gmp=(GOMAXPROCS="$BUCKETD_GOMAXPROCS")
env -u GOMAXPROCS ${gmp[@]+"${gmp[@]}"} "$BUCKETD_BIN" --addr "$HOST:$bucketd_port" \
  ${bucketd_extra_flags[@]+"${bucketd_extra_flags[@]}"} >"$tmp/bucketd.log" 2>&1 &
bucketd_pid=$!
wait_ready redis-server "$redis_port" "$redis_pid" "$tmp/redis.log"
wait_ready bucketd "$bucketd_port" "$bucketd_pid" "$tmp/bucketd.log"

sha=$(redis-cli -h "$HOST" -p "$redis_port" SCRIPT LOAD "$(cat -- "$LUA_SCRIPT")") || die "SCRIPT LOAD failed"
lua=(EVALSHA "$sha" 2 'user:__rand_int__' 'org:__rand_int__' 100 10 1000 100 1)
macquire=(TB.MACQUIRE 2 'user:__rand_int__' 100 10 'org:__rand_int__' 1000 100 COST 1)
pair=(TB.ACQUIRE 'user:__rand_int__' 100 10 1)

# Sanity: the script and TB.MACQUIRE take from both buckets or neither.
[[ $(redis-cli -h "$HOST" -p "$redis_port" EVALSHA "$sha" 2 u o 1 10 1000 100 1) == 1 ]] || die "two-bucket.lua: first call not allowed"
[[ $(redis-cli -h "$HOST" -p "$redis_port" EVALSHA "$sha" 2 u o 1 10 1000 100 1) == 0 ]] || die "two-bucket.lua: second call allowed"
[[ $(redis-cli -h "$HOST" -p "$redis_port" HGET o tokens) == 999 ]] || die "two-bucket.lua: the denied call charged o"
[[ $(redis-cli -h "$HOST" -p "$bucketd_port" TB.MACQUIRE 2 u 1 10 o 1000 100) == 1 ]] || die "TB.MACQUIRE: first call not allowed"
[[ $(redis-cli -h "$HOST" -p "$bucketd_port" TB.MACQUIRE 2 u 1 10 o 1000 100) == 0 ]] || die "TB.MACQUIRE: second call allowed"
redis-cli -h "$HOST" -p "$redis_port" DEL u o >/dev/null
redis-cli -h "$HOST" -p "$bucketd_port" TB.RESET u o >/dev/null

# bench CONTENDER DECISIONS PIPELINE OUT: one run, in decisions.
bench() {
  local who=$1 n=$2 pipe=$3 out=$4
  case $who in
  lua) run_bench "$redis_port" "$n" "$pipe" "$out" "${lua[@]}" ;;
  macquire) run_bench "$bucketd_port" "$n" "$pipe" "$out" "${macquire[@]}" ;;
  pair) run_bench "$bucketd_port" $((2 * n)) $((2 * pipe)) "$out" "${pair[@]}" ;;
  esac
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if ((WARMUP_N > 0)); then
  log "warm-up: $WARMUP_N decisions at -P 16 for each contender"
  for who in lua macquire pair; do bench "$who" "$WARMUP_N" 16 "$tmp/warm-$who.csv"; done
fi

results=$tmp/results.txt # lines: pipeline contender rep decisions/s p50 p99
: >"$results"
order=(lua macquire pair)
start_s=$SECONDS
for ((rep = 1; rep <= REPS; rep++)); do
  for pipe in 1 16; do
    if ((pipe == 1)); then n=$N_P1; else n=$N_P16; fi
    for who in "${order[@]}"; do
      f=$tmp/$who-$pipe-$rep.csv
      bench "$who" "$n" "$pipe" "$f"
      read -r rps p50 p99 < <(parse_csv "$f") || die "cannot parse $f"
      [[ $who == pair ]] && rps=$(awk -v r="$rps" 'BEGIN { printf "%.3f", r / 2 }')
      echo "$pipe $who $rep $rps $p50 $p99" >>"$results"
      log "rep $rep/$REPS -P $pipe $who: $rps decisions/s, p50 $p50 ms, p99 $p99 ms"
    done
  done
  order=("${order[@]:1}" "${order[0]}") # rotate, so that no contender always runs first
done
elapsed=$((SECONDS - start_s))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
kill -0 "$bucketd_pid" 2>/dev/null || die "bucketd exited during the run"
kill -0 "$redis_pid" 2>/dev/null || die "redis-server exited during the run"

median() {
  awk -v p="$1" -v c="$2" -v f="$3" '$1 == p && $2 == c { print $f }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

cat <<EOF
## Two buckets, one decision: TB.MACQUIRE vs two TB.ACQUIREs vs Redis + two-bucket Lua

- Date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); measurements ${elapsed} s; load average before ${load_before}, after ${load_after} (nproc $(nproc); the machine is shared)
- bucketd at $git_rev ($BUCKETD_BIN), GOMAXPROCS ${BUCKETD_GOMAXPROCS:-unset}; $(redis-server --version | cut -d' ' -f1-3)
- redis-benchmark -c $CLIENTS -r $KEYSPACE, --threads 1; N = $N_P1 decisions at -P 1, $N_P16 at -P 16; REPS = $REPS, contenders alternated, medians
- lua: \`${lua[*]}\` (scripts/two-bucket.lua)
- macquire: \`${macquire[*]}\`
- pair: \`${pair[*]}\` at twice the pipeline depth and twice the requests; decisions/s = req/s / 2

| Pipeline (decisions per round trip) | lua decisions/s | macquire decisions/s | pair decisions/s | macquire/lua | macquire/pair | p50 / p99 ms lua, macquire, pair |
|---|---:|---:|---:|---:|---:|---|
EOF
for pipe in 1 16; do
  l=$(median "$pipe" lua 4) m=$(median "$pipe" macquire 4) p=$(median "$pipe" pair 4)
  printf '| -P %s | %.0f | %.0f | %.0f | %s | %s | %s / %s, %s / %s, %s / %s |\n' "$pipe" "$l" "$m" "$p" \
    "$(ratio "$m" "$l")" "$(ratio "$m" "$p")" \
    "$(median "$pipe" lua 5)" "$(median "$pipe" lua 6)" "$(median "$pipe" macquire 5)" \
    "$(median "$pipe" macquire 6)" "$(median "$pipe" pair 5)" "$(median "$pipe" pair 6)"
done
printf '\nRaw decisions/s per repetition (lua / macquire / pair):\n\n'
for pipe in 1 16; do
  line=""
  for ((rep = 1; rep <= REPS; rep++)); do
    v=$(awk -v p="$pipe" -v r="$rep" '$1 == p && $3 == r { x[$2] = $4 } END { printf "%.0f / %.0f / %.0f", x["lua"], x["macquire"], x["pair"] }' "$results")
    line+="${line:+; }$v"
  done
  printf -- '- -P %s: %s\n' "$pipe" "$line"
done
