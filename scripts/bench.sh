#!/usr/bin/env bash
# bench.sh: benchmark bucketd against Redis running the classic Lua token bucket; the
# command behind the README's throughput figure (docs/benchmarks.md).
#
#   scripts/bench.sh            # the full run: about 3 min on a quiet 2-core machine, 8 on a busy one
#   QUICK=1 scripts/bench.sh    # the same steps and checks with small runs: under a minute
#
# It builds bucketd (./cmd/bucketd), starts it and a throwaway redis-server (loopback
# only, free ports, no persistence, bucketd without a metrics server and with none of
# the caller's BUCKETD_ variables, so nothing collides with a bucketd already running),
# loads the classic token-bucket Lua script (HASH tokens/ts, TIME, PEXPIRE) into Redis,
# and runs redis-benchmark against both with the same parameters:
#
#   PING                                          on both          -P 1 and -P 16
#   EVALSHA <sha> 1 key:__rand_int__ 100 10 1     on Redis         -P 1 and -P 16
#   TB.ACQUIRE key:__rand_int__ 100 10 1          on bucketd       -P 1 and -P 16
#   all with -c 50 -r 100000 (100,000 random keys), redis-benchmark default --threads 1
#
# It prints (stdout) the machine's load, a Markdown table of requests/s and p50/p99
# latency (medians over REPS repetitions), the ratios bucketd/Redis, TB.ACQUIRE/PING for
# each server, and what the validity checks found. Progress goes to stderr, so
# `scripts/bench.sh > bench.md` keeps only the report.
#
# Validity: the checks hold at any speed, so a slow or busy machine gives a slower
# report, never a failed one. After the run, Redis's INFO commandstats must count an
# EVALSHA for every request sent (redis-benchmark may send up to one pipeline per
# client more than -n), none rejected or failed, and one HSET per EVALSHA (the script
# ran to its end each time); bucketd's INFO must count an allowed or denied decision
# for every TB.ACQUIRE sent, and neither server may have answered an error (INFO
# total_error_replies; redis-benchmark also stops at the first error reply). A server
# answering anything else cannot pass as fast. Both processes must still be running.
#
# Method (docs/benchmarks.md; 2-core shared machine):
#   - Contenders alternate: Redis then bucketd in odd repetitions, bucketd then Redis in
#     even ones, so a drift of the machine favours neither. Figures are medians over
#     REPS runs; the ratio column is median(bucketd rps) / median(Redis rps). Quote
#     ratios, not absolute figures.
#   - A short warm-up (-P 16, both servers) runs before the measured repetitions so
#     that both keyspaces are populated and the first measured run is not a cold start.
#   - redis-benchmark runs with the default --threads 1, timing with millisecond
#     resolution; -P 16 uses 3,000,000 requests so that even the fastest runs last
#     about 2 s and a stall of the shared machine moves a figure by well under 20%.
#   - At -P 1 the single-threaded client saturates one core near 50k req/s, so -P 1
#     compares servers only roughly; -P 16 shows the servers' own speed.
#   - With 2 cores, GOMAXPROCS matters for bucketd (the client holds the other core).
#     BUCKETD_GOMAXPROCS sets it for bucketd only; the report states which was used.
#
# Environment:
#   QUICK                1: REPS=3, N_P1=20000, N_P16=200000, WARMUP_N=20000 (each can
#                        still be set); for checking the script, not for quoting
#   REPS                 repetitions, median reported               (default 3)
#   N_P1                 requests per run at pipeline 1             (default 400000)
#   N_P16                requests per run at pipeline 16            (default 3000000)
#   WARMUP_N             requests per server for the warm-up, -P 16 (default 200000; 0 = off)
#   CLIENTS              redis-benchmark -c                          (default 50)
#   KEYSPACE             redis-benchmark -r                          (default 100000)
#   BUCKETD_BIN          use this bucketd binary instead of building ./cmd/bucketd
#   BUCKETD_GOMAXPROCS   GOMAXPROCS for bucketd only (default empty: unset, Go default)
#   BUCKETD_FLAGS        extra flags for bucketd, split on whitespace (default empty)
#   LUA_SCRIPT           token-bucket Lua script (default scripts/classic-token-bucket.lua)
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/.." && pwd -P)
cd -- "$repo_root"

if [[ ${QUICK:-} == 1 ]]; then
  REPS=${REPS:-3} N_P1=${N_P1:-20000} N_P16=${N_P16:-200000} WARMUP_N=${WARMUP_N:-20000}
fi
REPS=${REPS:-3}
N_P1=${N_P1:-400000}
N_P16=${N_P16:-3000000}
WARMUP_N=${WARMUP_N:-200000}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-100000}
BUCKETD_BIN=${BUCKETD_BIN:-}
BUCKETD_GOMAXPROCS=${BUCKETD_GOMAXPROCS:-}
BUCKETD_FLAGS=${BUCKETD_FLAGS:-}
LUA_SCRIPT=${LUA_SCRIPT:-$script_dir/classic-token-bucket.lua}

# Bucket parameters used by both contenders: capacity 100, rate 10/s, cost 1.
CAPACITY=100
RATE=10
COST=1
KEY_PATTERN='key:__rand_int__'
SANITY_KEY='bench:sanity'
HOST=127.0.0.1

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: FAIL: %s\n' "$*" >&2; exit 1; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for v in REPS N_P1 N_P16 WARMUP_N CLIENTS KEYSPACE; do
  is_uint "${!v}" || die "$v must be a non-negative integer, got '${!v}'"
done
((REPS >= 1)) || die "REPS must be >= 1"
((N_P1 >= 1 && N_P16 >= 1 && CLIENTS >= 1 && KEYSPACE >= 1)) ||
  die "N_P1, N_P16, CLIENTS and KEYSPACE must be >= 1"
if [[ -n $BUCKETD_GOMAXPROCS ]]; then
  if ! is_uint "$BUCKETD_GOMAXPROCS" || ((BUCKETD_GOMAXPROCS < 1)); then
    die "BUCKETD_GOMAXPROCS must be a positive integer, got '$BUCKETD_GOMAXPROCS'"
  fi
fi
read -r -a bucketd_extra_flags <<<"$BUCKETD_FLAGS"

for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found in PATH (Debian: apt-get install redis-server redis-tools)"
done
if [[ -z $BUCKETD_BIN ]]; then
  command -v go >/dev/null 2>&1 || die "go not found in PATH (or set BUCKETD_BIN)"
fi
[[ -f $LUA_SCRIPT ]] || die "Lua script not found: $LUA_SCRIPT"

# --- temp dir, processes, cleanup ---------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bucketd-bench.XXXXXX")
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

load_start=$(cat /proc/loadavg 2>/dev/null || echo "n/a")

# --- build bucketd ------------------------------------------------------------------
git_rev=$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo "no-git")
if [[ $git_rev != no-git && -n $(git -C "$repo_root" status --porcelain 2>/dev/null) ]]; then
  git_rev="$git_rev+dirty"
fi
if [[ -z $BUCKETD_BIN ]]; then
  log "building ./cmd/bucketd"
  go build -o "$tmp/bucketd" ./cmd/bucketd || die "go build ./cmd/bucketd failed"
  BUCKETD_BIN=$tmp/bucketd
  bucketd_desc="built from ./cmd/bucketd at $git_rev"
else
  [[ -x $BUCKETD_BIN ]] || die "BUCKETD_BIN is not an executable: $BUCKETD_BIN"
  bucketd_desc="BUCKETD_BIN=$BUCKETD_BIN"
fi

# --- start servers ------------------------------------------------------------------
read -r redis_port bucketd_port < <(free_ports 2) || die "could not find free ports"
[[ -n ${redis_port:-} && -n ${bucketd_port:-} ]] || die "could not find free ports"

mkdir -p -- "$tmp/redis"
log "starting redis-server on $HOST:$redis_port"
redis-server --bind "$HOST" --port "$redis_port" --save '' --appendonly no \
  --daemonize no --dir "$tmp/redis" >"$tmp/redis.log" 2>&1 &
redis_pid=$!

# bucketd sees none of the caller's BUCKETD_ variables (a BUCKETD_DATA_DIR or
# BUCKETD_CONFIG meant for another instance) and no GOMAXPROCS but the one asked for.
bucketd_env=(env -u GOMAXPROCS)
while read -r var; do bucketd_env+=(-u "$var"); done < <(compgen -e | grep '^BUCKETD_' || true)
[[ -n $BUCKETD_GOMAXPROCS ]] && bucketd_env+=(GOMAXPROCS="$BUCKETD_GOMAXPROCS")
log "starting bucketd on $HOST:$bucketd_port (GOMAXPROCS=${BUCKETD_GOMAXPROCS:-unset})"
"${bucketd_env[@]}" "$BUCKETD_BIN" --addr "$HOST:$bucketd_port" --metrics-addr= \
  ${bucketd_extra_flags[@]+"${bucketd_extra_flags[@]}"} >"$tmp/bucketd.log" 2>&1 &
bucketd_pid=$!

wait_ready redis-server "$redis_port" "$redis_pid" "$tmp/redis.log"
wait_ready bucketd "$bucketd_port" "$bucketd_pid" "$tmp/bucketd.log"

# --- load script, sanity checks -----------------------------------------------------
sha=$(redis-cli -h "$HOST" -p "$redis_port" SCRIPT LOAD "$(cat -- "$LUA_SCRIPT")") ||
  die "SCRIPT LOAD failed"
[[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD returned '$sha'"

out=$(redis-cli -h "$HOST" -p "$redis_port" EVALSHA "$sha" 1 "$SANITY_KEY" "$CAPACITY" "$RATE" "$COST" 2>&1) || true
[[ $out == 1 ]] || die "Redis: EVALSHA $sha 1 $SANITY_KEY $CAPACITY $RATE $COST returned '$out', want 1"
out=$(redis-cli -h "$HOST" -p "$bucketd_port" TB.ACQUIRE "$SANITY_KEY" "$CAPACITY" "$RATE" "$COST" 2>&1) || true
[[ $out == 1 ]] || die "bucketd: TB.ACQUIRE $SANITY_KEY $CAPACITY $RATE $COST returned '$out', want 1"
log "sanity checks passed (EVALSHA -> 1 on Redis, TB.ACQUIRE -> 1 on bucketd)"

redis_acq=(EVALSHA "$sha" 1 "$KEY_PATTERN" "$CAPACITY" "$RATE" "$COST")
bucketd_acq=(TB.ACQUIRE "$KEY_PATTERN" "$CAPACITY" "$RATE" "$COST")

# info_field PORT SECTION FIELD: a field of INFO SECTION, 0 when absent.
info_field() {
  redis-cli -h "$HOST" -p "$1" INFO "$2" | tr -d '\r' |
    awk -F: -v f="$3" '$1 == f { v = $2 } END { print (v == "" ? 0 : v) }'
}
# cmdstat PORT COMMAND KEY: one count (calls, rejected_calls, failed_calls) of a
# command in Redis's INFO commandstats, 0 when the command never ran.
cmdstat() {
  redis-cli -h "$HOST" -p "$1" INFO commandstats | tr -d '\r' |
    awk -F'[:,=]' -v c="cmdstat_$2" -v k="$3" '$1 == c { for (i = 2; i < NF; i += 2) if ($i == k) v = $(i + 1) }
      END { print (v == "" ? 0 : v) }'
}
# decisions: bucketd's allowed and denied totals.
decisions() {
  echo "$(info_field "$bucketd_port" bucketd acquire_allowed_total) $(info_field "$bucketd_port" bucketd acquire_denied_total)"
}

# --- warm-up ------------------------------------------------------------------------
if ((WARMUP_N > 0)); then
  log "warm-up: $WARMUP_N requests -P 16 on each server"
  run_bench "$redis_port" "$WARMUP_N" 16 "$tmp/warm-redis.csv" "${redis_acq[@]}"
  run_bench "$bucketd_port" "$WARMUP_N" 16 "$tmp/warm-bucketd.csv" "${bucketd_acq[@]}"
fi

# --- measurement --------------------------------------------------------------------
# Tests: id|label|pipeline|kind (kind: ping or acq).
tests=(
  "ping1|PING -P 1|1|ping"
  "ping16|PING -P 16|16|ping"
  "acq1|TB.ACQUIRE vs EVALSHA -P 1|1|acq"
  "acq16|TB.ACQUIRE vs EVALSHA -P 16|16|acq"
)
results=$tmp/results.txt # lines: test contender rep rps p50 p99
: >"$results"

evalsha0=$(cmdstat "$redis_port" evalsha calls)
hset0=$(cmdstat "$redis_port" hset calls)
read -r allowed0 denied0 < <(decisions)
redis_errors0=$(info_field "$redis_port" stats total_error_replies)
bucketd_errors0=$(info_field "$bucketd_port" stats total_error_replies)
sent_acq=0 # TB.ACQUIRE requests sent to bucketd, and as many EVALSHA to Redis
acq_runs=0 # redis-benchmark runs of each, for the overshoot bound
overshoot=0

start_s=$SECONDS
for ((rep = 1; rep <= REPS; rep++)); do
  order=(redis bucketd)
  ((rep % 2 == 0)) && order=(bucketd redis)
  for t in "${tests[@]}"; do
    IFS='|' read -r id label pipe kind <<<"$t"
    if ((pipe == 1)); then n=$N_P1; else n=$N_P16; fi
    if [[ $kind == acq ]]; then
      sent_acq=$((sent_acq + n))
      overshoot=$((overshoot + CLIENTS * pipe))
      acq_runs=$((acq_runs + 1))
    fi
    for contender in "${order[@]}"; do
      if [[ $contender == redis ]]; then
        port=$redis_port
        if [[ $kind == ping ]]; then cmd=(PING); else cmd=("${redis_acq[@]}"); fi
      else
        port=$bucketd_port
        if [[ $kind == ping ]]; then cmd=(PING); else cmd=("${bucketd_acq[@]}"); fi
      fi
      f=$tmp/$id-$contender-$rep.csv
      run_bench "$port" "$n" "$pipe" "$f" "${cmd[@]}"
      parsed=$(parse_csv "$f") || { cat -- "$f" >&2; die "cannot parse redis-benchmark output ($f)"; }
      echo "$id $contender $rep $parsed" >>"$results"
      read -r rps p50 p99 <<<"$parsed"
      log "rep $rep/$REPS  $label  $contender: $rps req/s  p50 $p50 ms  p99 $p99 ms"
    done
  done
done
elapsed=$((SECONDS - start_s))
load_end=$(cat /proc/loadavg 2>/dev/null || echo "n/a")

# --- validity -----------------------------------------------------------------------
kill -0 "$bucketd_pid" 2>/dev/null || die "bucketd exited during the run"
kill -0 "$redis_pid" 2>/dev/null || die "redis-server exited during the run"
evalsha=$(($(cmdstat "$redis_port" evalsha calls) - evalsha0))
hset=$(($(cmdstat "$redis_port" hset calls) - hset0))
evalsha_bad=$(($(cmdstat "$redis_port" evalsha rejected_calls) + $(cmdstat "$redis_port" evalsha failed_calls)))
read -r allowed1 denied1 < <(decisions)
allowed=$((allowed1 - allowed0)) denied=$((denied1 - denied0))
redis_errors=$(($(info_field "$redis_port" stats total_error_replies) - redis_errors0))
bucketd_errors=$(($(info_field "$bucketd_port" stats total_error_replies) - bucketd_errors0))
max_calls=$((sent_acq + overshoot))
((evalsha >= sent_acq && evalsha <= max_calls)) ||
  die "Redis ran EVALSHA $evalsha times during the measurement; $sent_acq to $max_calls were sent"
((evalsha_bad == 0)) || die "Redis rejected or failed $evalsha_bad EVALSHA calls (INFO commandstats)"
((hset == evalsha)) || die "Redis ran HSET $hset times for $evalsha EVALSHA: the script did not run to its end"
((allowed + denied >= sent_acq && allowed + denied <= max_calls)) ||
  die "bucketd decided $((allowed + denied)) TB.ACQUIRE during the measurement; $sent_acq to $max_calls were sent"
((allowed > 0)) || die "bucketd allowed no TB.ACQUIRE"
((redis_errors == 0 && bucketd_errors == 0)) ||
  die "error replies during the measurement: Redis $redis_errors, bucketd $bucketd_errors (INFO total_error_replies)"
log "validity checks passed"

# median TEST CONTENDER FIELD (4=rps 5=p50 6=p99)
median() {
  awk -v t="$1" -v c="$2" -v f="$3" '$1 == t && $2 == c { print $f }' "$results" |
    sort -g | awk '{ v[NR] = $1 } END {
      if (NR == 0) exit 1
      if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.3f\n", m }'
}
fmt_rps() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }
fmt_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
fmt_ms() { awk -v x="$1" 'BEGIN { printf "%.3f", x }'; }

declare -A med
for t in "${tests[@]}"; do
  IFS='|' read -r id _ _ _ <<<"$t"
  for contender in redis bucketd; do
    med[$id.$contender.rps]=$(median "$id" "$contender" 4)
    med[$id.$contender.p50]=$(median "$id" "$contender" 5)
    med[$id.$contender.p99]=$(median "$id" "$contender" 6)
  done
done

# --- report -------------------------------------------------------------------------
cpu_model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
go_ver=$(go version 2>/dev/null || echo "go: not found")
if [[ -n $BUCKETD_GOMAXPROCS ]]; then
  gmp="GOMAXPROCS=$BUCKETD_GOMAXPROCS (BUCKETD_GOMAXPROCS)"
else
  gmp="GOMAXPROCS unset (Go default, = usable CPUs: nproc $(nproc))"
fi
if ((WARMUP_N > 0)); then warmup_desc="$WARMUP_N requests at -P 16 per server"; else warmup_desc="none"; fi
bench_base="redis-benchmark -h $HOST -p PORT -c $CLIENTS -n N -r $KEYSPACE -P {1,16} --csv"
mode="full"
[[ ${QUICK:-} == 1 ]] && mode="QUICK=1 (small runs: check the script with it, do not quote it)"

cat <<EOF
## bucketd vs Redis + Lua token bucket

- Date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); wall time of measurements: ${elapsed} s; mode: $mode
- Machine: nproc $(nproc), $(uname -sm)${cpu_model:+, $cpu_model}
- Load (/proc/loadavg: 1, 5, 15 min, runnable/all tasks): before $load_start; after $load_end
- $(redis-server --version)
- $(redis-benchmark --version)
- $go_ver
- bucketd: $bucketd_desc; $gmp; flags: --addr $HOST:PORT --metrics-addr=${BUCKETD_FLAGS:+ $BUCKETD_FLAGS}
- Lua script: $(basename -- "$LUA_SCRIPT") (sha1 $sha)
- Redis: \`redis-server --bind $HOST --port PORT --save '' --appendonly no --daemonize no\`
- Commands (same parameters for both; N = $N_P1 at -P 1, $N_P16 at -P 16; --threads 1):
  - \`$bench_base PING\` (both)
  - \`$bench_base ${redis_acq[*]}\` (Redis)
  - \`$bench_base ${bucketd_acq[*]}\` (bucketd)
- Warm-up: $warmup_desc. Repetitions: $REPS, contenders alternated
  (Redis first in odd repetitions, bucketd first in even ones); figures are medians;
  ratio = median bucketd rps / median Redis rps.

| Test | Redis req/s | Redis p50 / p99 ms | bucketd req/s | bucketd p50 / p99 ms | bucketd/Redis |
|---|---:|---:|---:|---:|---:|
EOF
for t in "${tests[@]}"; do
  IFS='|' read -r id label _ _ <<<"$t"
  r_rps=${med[$id.redis.rps]} b_rps=${med[$id.bucketd.rps]}
  printf '| %s | %s | %s / %s | %s | %s / %s | %s |\n' "$label" \
    "$(fmt_rps "$r_rps")" "$(fmt_ms "${med[$id.redis.p50]}")" "$(fmt_ms "${med[$id.redis.p99]}")" \
    "$(fmt_rps "$b_rps")" "$(fmt_ms "${med[$id.bucketd.p50]}")" "$(fmt_ms "${med[$id.bucketd.p99]}")" \
    "$(fmt_ratio "$b_rps" "$r_rps")"
done

cat <<EOF

Cost of the rate-limit command relative to PING on the same server (median req/s ratio):

| Pipeline | bucketd TB.ACQUIRE/PING | Redis EVALSHA/PING |
|---|---:|---:|
| -P 1 | $(fmt_ratio "${med[acq1.bucketd.rps]}" "${med[ping1.bucketd.rps]}") | $(fmt_ratio "${med[acq1.redis.rps]}" "${med[ping1.redis.rps]}") |
| -P 16 | $(fmt_ratio "${med[acq16.bucketd.rps]}" "${med[ping16.bucketd.rps]}") | $(fmt_ratio "${med[acq16.redis.rps]}" "${med[ping16.redis.rps]}") |

Raw req/s per repetition (Redis / bucketd):

EOF
for t in "${tests[@]}"; do
  IFS='|' read -r id label _ _ <<<"$t"
  line=""
  for ((rep = 1; rep <= REPS; rep++)); do
    r=$(awk -v t="$id" -v r="$rep" '$1 == t && $2 == "redis" && $3 == r { printf "%.0f", $4 }' "$results")
    b=$(awk -v t="$id" -v r="$rep" '$1 == t && $2 == "bucketd" && $3 == r { printf "%.0f", $4 }' "$results")
    line+="${line:+; }$r / $b"
  done
  printf -- '- %s: %s\n' "$label" "$line"
done
cat <<EOF

Validity ($acq_runs runs of each rate-limit command, $sent_acq requests sent to each server):
Redis ran EVALSHA $evalsha times (none rejected or failed) and HSET $hset times; bucketd
decided $((allowed + denied)) TB.ACQUIRE ($allowed allowed, $denied denied); error replies:
Redis $redis_errors, bucketd $bucketd_errors.
EOF
