#!/usr/bin/env bash
# bench-leases.sh: lease mode (bucketd --store URL --leases) measured side by
# side with memory mode and plain store mode (--store without --leases), on
# one redis-server, with redis-benchmark and tools/bucketd-load as clients:
#
#   1. hot keys: 1,000 keys (-r 1000), TB.ACQUIRE hot:__rand_int__ 100000
#      100000 1 at -P 16 -c 50: req/s of lease vs memory and lease vs store;
#   2. Redis's own work per decision, read from Redis (INFO cpu
#      used_cpu_sys + used_cpu_user, and INFO commandstats calls, which count
#      the commands scripts call too) over each run, divided by the decisions
#      the bucketds made (INFO Bucketd): lease vs store, on the hot keys with
#      one instance (the runs of 1) and with two instances of each mode
#      (two redis-benchmarks at once, one per instance), and for one key
#      being denied (TB.ACQUIRE deny:one 10 1 1 at full speed) with two;
#   3. cold keys: every request a new key (-r 10000000, TB.ACQUIRE
#      cold:__rand_int__ 100 10 1) at -P 16 and -P 1: lease vs store req/s;
#   4. p99 at a fixed rate: bucketd-load --qps 10000 --conns 50 --keys 1000
#      (the hot keys' limits) for 10 s, in all three modes.
#
# Why capacity 100000 and rate 100000 for the hot keys: 1,000 keys at the
# few hundred thousand requests a second these machines reach get a few
# hundred requests a second each, far below their rate, so nearly every call
# is allowed. That is the common case of a limiter, whose limits sit above
# normal demand, and it is the case leases are for: a key asked often enough
# that one Redis call can cover many decisions. A key asked above its rate
# is item 2's denied key.
#
#   scripts/bench-leases.sh > leases.md   # REPS=3: about 10 minutes on a quiet 2-core machine
#   QUICK=1 scripts/bench-leases.sh       # every step with small runs, about a minute; do not quote it
#   MODES="memory store" QUICK=1 scripts/bench-leases.sh   # without lease mode
#
# Processes: one redis-server (loopback, free port, no persistence) and one
# bucketd per instance on free ports with --metrics-addr= and none of the
# caller's BUCKETD_ variables, so nothing collides with a bucketd already
# running: memory; store and store2 (--store, --replicate-prefix st:);
# lease and lease2 (--store --leases, --replicate-prefix ls:, so both lease
# instances share their buckets, as instances in front of one Redis do).
# Store and lease instances run with --redis-timeout 1s (a slow reply on a
# busy machine must not turn into an on-redis-error answer) and the lease
# instances with --lease-ttl 4s (the least that timeout allows).
#
# Method: within each repetition the contenders of a test alternate (memory,
# store, lease in odd repetitions, the reverse in even ones); figures are
# medians of REPS. After each run the script waits SETTLE seconds before
# reading the counters again, so that the leases given back once idle and
# the keys Redis expires count in the run that caused them. The hot-key and
# denied-key runs measure keys that are hot already: each is preceded, with
# no pause, by the same load for WARM of its requests, unmeasured, in every
# mode, so that a lease instance's first calls on a key (its first plain
# acquire, the small leases its demand estimate starts with) are not most
# of what a run of a few seconds counts. WARM=0 measures keys from cold.
#
# Validity, which holds at any speed (a run that fails a check prints no
# report and exits 1): redis-benchmark and bucketd-load exit non-zero on an
# error reply; no error replies (INFO total_error_replies of Redis and of
# every bucketd); every bucketd
# decided every TB.ACQUIRE sent to it (INFO Bucketd acquire_allowed_total +
# acquire_denied_total, up to one pipeline per client more than -n); the
# script ran on Redis (INFO commandstats cmdstat_evalsha) in every store and
# lease run, none of its calls rejected or failed; the lease instances are
# in lease mode (INFO Leases present, decisions answered from leases in
# every lease run but the cold keys', which ask for no lease); every
# process is still running at the end. Redis calls a bucketd got no reply
# to within --redis-timeout (INFO Store store_redis_errors_total and
# store_degraded_decisions_total, INFO Leases lease_failed_calls_total) do
# not fail the run: the report lists them by run, with the bucketds' warnings.
#
# Environment:
#   REPS           repetitions, medians reported                  (3; QUICK: 2)
#   QUICK          1: small runs (N_* 10,000 to 100,000, 1 s of bucketd-load,
#                  SETTLE 0.3): checks every step, not for quoting
#   MODES          modes to run, of "memory store lease"          (all three)
#   TESTS          tests to run, of "hot hot-pair deny-pair cold16 cold1 p99"
#                  (all six; the report's rows of the others say n/a)
#   N_HOT          requests per hot-key run, -P 16               (2000000)
#   N_PAIR         requests per instance in the two-instance runs (2000000:
#                  N_HOT's default, so that each instance gets the load of the
#                  one-instance run)
#   N_DENY         requests per instance in the denied-key runs  (500000)
#   N_COLD16       requests per cold-key run at -P 16            (1000000)
#   N_COLD1        requests per cold-key run at -P 1             (300000)
#   LOAD_QPS       bucketd-load --qps                            (10000)
#   LOAD_DURATION  bucketd-load --duration                       (10s)
#   SETTLE         seconds waited after each run (3: a lease unused for half of
#                  --lease-ttl 4s is given back within it)
#   WARM           warm-up before each hot-key and denied-key run, as a
#                  fraction of its requests (0.25; 0: none)
#   CLIENTS        redis-benchmark -c and bucketd-load --conns   (50)
#   LEASE_FLAGS    extra flags for both lease instances, split on whitespace,
#                  e.g. "--lease-target 200ms"
#   BUCKETD_BIN    this bucketd binary instead of a build of ./cmd/bucketd
#   BUCKETD_GOMAXPROCS  GOMAXPROCS for every bucketd (unset: Go default)
set -euo pipefail
script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/.." && pwd -P)
cd -- "$repo_root"

if [[ ${QUICK:-} == 1 ]]; then
  REPS=${REPS:-2} N_HOT=${N_HOT:-100000} N_PAIR=${N_PAIR:-50000} N_DENY=${N_DENY:-50000}
  N_COLD16=${N_COLD16:-50000} N_COLD1=${N_COLD1:-10000} LOAD_DURATION=${LOAD_DURATION:-1s} SETTLE=${SETTLE:-0.3}
fi
REPS=${REPS:-3}
MODES=${MODES:-memory store lease}
TESTS=${TESTS:-hot hot-pair deny-pair cold16 cold1 p99}
N_HOT=${N_HOT:-2000000}
N_PAIR=${N_PAIR:-2000000}
N_DENY=${N_DENY:-500000}
N_COLD16=${N_COLD16:-1000000}
N_COLD1=${N_COLD1:-300000}
LOAD_QPS=${LOAD_QPS:-10000}
LOAD_DURATION=${LOAD_DURATION:-10s}
SETTLE=${SETTLE:-3}
WARM=${WARM:-0.25}
CLIENTS=${CLIENTS:-50}
KEYSPACE=1000 # redis-benchmark -r; each test sets its own (run_bench reads it)
HOST=127.0.0.1
log() { printf 'bench-leases: %s\n' "$*" >&2; }
die() {
  printf 'bench-leases: FAIL: %s\n' "$*" >&2
  exit 1
}

for v in REPS N_HOT N_PAIR N_DENY N_COLD16 N_COLD1 CLIENTS; do
  if ! [[ ${!v} =~ ^[0-9]+$ ]] || ((${!v} < 1)); then die "$v must be a positive integer, got '${!v}'"; fi
done
if ! [[ $LOAD_QPS =~ ^[0-9]+$ ]] || ((LOAD_QPS < 1)); then die "LOAD_QPS must be a positive integer, got '$LOAD_QPS'"; fi
[[ $SETTLE =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SETTLE must be a number of seconds, got '$SETTLE'"
[[ $WARM =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "WARM must be a fraction of the requests, such as 0.25 (0: no warm-up), got '$WARM'"
declare -A on=()
for m in $MODES; do
  case $m in
  memory | store | lease) on[$m]=1 ;;
  *) die "MODES takes memory, store and lease, got '$m'" ;;
  esac
done
((${#on[@]})) || die "MODES is empty"
declare -A test_on=()
for t in $TESTS; do
  case $t in
  hot | hot-pair | deny-pair | cold16 | cold1 | p99) test_on[$t]=1 ;;
  *) die "TESTS takes hot, hot-pair, deny-pair, cold16, cold1 and p99, got '$t'" ;;
  esac
done
((${#test_on[@]})) || die "TESTS is empty"
read -r -a lease_extra <<<"${LEASE_FLAGS:-}"
for tool in go redis-server redis-cli redis-benchmark jq; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found in PATH (Debian: apt-get install redis-server redis-tools jq)"
done

# shellcheck source=scripts/bench-lib.sh
. "$script_dir/bench-lib.sh"
run_dir bench-leases

load_start=$(cat /proc/loadavg 2>/dev/null || echo n/a)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo no-git)
if [[ $rev != no-git && -n $(git status --porcelain 2>/dev/null) ]]; then rev="$rev+dirty"; fi
if [[ -z ${BUCKETD_BIN:-} ]]; then
  log "building ./cmd/bucketd"
  go build -o "$tmp/bucketd" ./cmd/bucketd || die "go build ./cmd/bucketd failed"
  BUCKETD_BIN=$tmp/bucketd
  bucketd_desc="built from ./cmd/bucketd at $rev"
else
  [[ -x $BUCKETD_BIN ]] || die "BUCKETD_BIN is not an executable: $BUCKETD_BIN"
  bucketd_desc="BUCKETD_BIN=$BUCKETD_BIN (work tree at $rev)"
fi
log "building tools/bucketd-load"
go -C tools/bucketd-load build -o "$tmp/bucketd-load" . || die "building tools/bucketd-load failed"

read -r redis_port p_memory p_store p_store2 p_lease p_lease2 < <(free_ports 6) || die "no free ports"
declare -A port=([memory]=$p_memory [store]=$p_store [store2]=$p_store2 [lease]=$p_lease [lease2]=$p_lease2)
mkdir -p -- "$tmp/redis"
redis-server --bind "$HOST" --port "$redis_port" --save '' --appendonly no --daemonize no \
  --dir "$tmp/redis" >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
wait_ready redis-server "$redis_port" "$redis_pid" "$tmp/redis.log"
redis_url="redis://$HOST:$redis_port/0"

# Every bucketd sees none of the caller's BUCKETD_ variables and no
# GOMAXPROCS but BUCKETD_GOMAXPROCS.
bucketd_env=(env -u GOMAXPROCS)
while read -r var; do bucketd_env+=(-u "$var"); done < <(compgen -e | grep '^BUCKETD_' || true)
[[ -n ${BUCKETD_GOMAXPROCS:-} ]] && bucketd_env+=(GOMAXPROCS="$BUCKETD_GOMAXPROCS")
store_flags=(--store "$redis_url" --redis-timeout 1s --replicate-prefix st:)
lease_flags=(--store "$redis_url" --redis-timeout 1s --replicate-prefix ls: --leases --lease-ttl 4s
  ${lease_extra[@]+"${lease_extra[@]}"})
declare -A bucketd_pid
start_bucketd() { # NAME FLAGS...
  local name=$1
  shift
  "${bucketd_env[@]}" "$BUCKETD_BIN" --addr "$HOST:${port[$name]}" --metrics-addr= "$@" >"$tmp/$name.log" 2>&1 &
  bucketd_pid[$name]=$!
  pids+=("$!")
  wait_ready "bucketd ($name)" "${port[$name]}" "$!" "$tmp/$name.log"
}
[[ -n ${on[memory]:-} ]] && start_bucketd memory
if [[ -n ${on[store]:-} ]]; then
  start_bucketd store "${store_flags[@]}"
  start_bucketd store2 "${store_flags[@]}"
fi
if [[ -n ${on[lease]:-} ]]; then
  start_bucketd lease "${lease_flags[@]}"
  start_bucketd lease2 "${lease_flags[@]}"
fi
for name in "${!bucketd_pid[@]}"; do
  out=$(redis-cli -h "$HOST" -p "${port[$name]}" TB.ACQUIRE bench:sanity 100 10 1 2>&1) || true
  [[ $out == 1 ]] || die "bucketd ($name): TB.ACQUIRE bench:sanity 100 10 1 answered '$out', want 1"
done
if [[ -n ${on[lease]:-} ]]; then
  # A binary that parses --leases but runs plain store mode must not pass as lease mode.
  for name in lease lease2; do
    redis-cli -h "$HOST" -p "${port[$name]}" INFO leases | tr -d '\r' | grep -q '^lease_decisions_local_total:' ||
      die "bucketd ($name) has no INFO Leases section: this binary does not run lease mode (MODES=\"memory store\" leaves it out)"
  done
fi
log "sanity checks passed; instances: ${!bucketd_pid[*]}"

# snap PORT SECTION...: the numeric INFO fields of a server as "name value"
# lines; a commandstats line gives cmdstat_X.calls, .rejected_calls and .failed_calls.
snap() {
  local p=$1
  shift
  printf 'INFO %s\n' "$@" | redis-cli -h "$HOST" -p "$p" | tr -d '\r' | awk -F: '
    /^cmdstat_/ { n = split($2, kv, /[=,]/); for (i = 1; i < n; i += 2) if (kv[i] ~ /calls$/) print $1 "." kv[i], kv[i + 1]; next }
    /^errorstat_/ { split($2, kv, /=/); print $1, kv[2]; next }
    NF == 2 && $2 ~ /^-?[0-9.]+$/ { print $1, $2 }'
}
# delta BEFORE AFTER: "name after-before" for every field of AFTER.
delta() {
  awk 'NR == FNR { b[$1] = $2; next } { printf "%s %.6f\n", $1, $2 - b[$1] }' "$1" "$2"
}
# field FILE NAME: a field of a snap or delta file, 0 when absent.
field() { awk -v f="$2" '$1 == f { v = $2 } END { print (v == "" ? 0 : v + 0) }' "$1"; }

# A window is one run: counters of Redis and of the instances under test
# before it, then after it and SETTLE seconds more.
win_names=()
begin_window() { # NAME...
  win_names=("$@")
  snap "$redis_port" cpu stats commandstats errorstats >"$tmp/w-redis.0"
  local n
  for n in "$@"; do snap "${port[$n]}" bucketd stats store leases >"$tmp/w-$n.0"; done
}
degraded=$tmp/degraded.txt # the runs where a bucketd got no reply from Redis in time
: >"$degraded"
work=$tmp/work.txt # id rep decisions allowed redis_cpu_us/dec redis_cmds/dec evalsha/dec local_share leases_held
cmds=$tmp/cmds.txt # id rep command calls decisions
: >"$work"
: >"$cmds"
# end_window ID SENT SLACK: SENT requests went to the window's instances,
# SLACK more may have (redis-benchmark's last pipelines).
end_window() {
  local id=$1 sent=$2 slack=$3 n d dec=0 allowed=0 local_dec=0 held=0 bad
  sleep "$SETTLE"
  snap "$redis_port" cpu stats commandstats errorstats >"$tmp/w-redis.1"
  delta "$tmp/w-redis.0" "$tmp/w-redis.1" >"$tmp/w-redis.d"
  for n in "${win_names[@]}"; do
    snap "${port[$n]}" bucketd stats store leases >"$tmp/w-$n.1"
    delta "$tmp/w-$n.0" "$tmp/w-$n.1" >"$tmp/w-$n.d"
    kill -0 "${bucketd_pid[$n]}" 2>/dev/null || die "bucketd ($n) died during $id"
    bad=$(awk '$1 == "total_error_replies" && $2 != 0 { printf "%s=%d", $1, $2 }' "$tmp/w-$n.d")
    [[ -z $bad ]] || { tail -20 -- "$tmp/$n.log" >&2 || true; die "bucketd ($n) during $id: $bad"; }
    # A Redis call without a reply in time is answered by --on-redis-error and
    # counted, not hidden: the report lists every one, with the instance's log.
    bad=$(awk '$1 ~ /^(store_redis_errors_total|store_degraded_decisions_total|lease_failed_calls_total)$/ && $2 != 0 { printf "%s%s=%d", s, $1, $2; s = ", " }' "$tmp/w-$n.d")
    if [[ -n $bad ]]; then
      echo "$id (repetition $rep), $n: $bad" >>"$degraded"
      log "rep $rep/$REPS  $id: $n: $bad"
    fi
    d=$(awk '$1 == "acquire_allowed_total" || $1 == "acquire_denied_total" { s += $2 } END { printf "%d", s }' "$tmp/w-$n.d")
    dec=$((dec + d))
    allowed=$((allowed + $(printf '%.0f' "$(field "$tmp/w-$n.d" acquire_allowed_total)")))
    local_dec=$((local_dec + $(printf '%.0f' "$(field "$tmp/w-$n.d" lease_decisions_local_total)")))
    held=$((held + $(printf '%.0f' "$(field "$tmp/w-$n.1" leases)")))
  done
  kill -0 "$redis_pid" 2>/dev/null || die "redis-server died during $id"
  ((dec >= sent && dec <= sent + slack)) || die "$id: the bucketds decided $dec TB.ACQUIRE; $sent to $((sent + slack)) were sent"
  # go-redis sends CLIENT SETINFO LIB-NAME and LIB-VER on each new connection, which
  # Redis 7.0 answers with an error: up to two errors per connection the bucketds
  # opened (the after reading opened one more) are theirs; a script error counts
  # as a failed call of EVALSHA, and any other error beyond that fails the run.
  bad=$(awk '$1 == "total_connections_received" { conns = $2 - 1 } $1 == "total_error_replies" { errs = $2 }
    $1 ~ /^cmdstat_.*\.(rejected|failed)_calls$/ && $2 != 0 { printf "%s%s=%d", s, $1, $2; s = "," }
    END { if (errs > 2 * (conns > 0 ? conns : 0)) printf "%stotal_error_replies=%d for %d new connections", s, errs, conns }' "$tmp/w-redis.d")
  if [[ -n $bad ]]; then
    for n in "${win_names[@]}"; do tail -5 -- "$tmp/$n.log" >&2 || true; done
    die "Redis during $id: $bad"
  fi
  if [[ $id == store* || $id == lease* ]]; then
    (($(printf '%.0f' "$(field "$tmp/w-redis.d" cmdstat_evalsha.calls)") > 0)) || die "$id: Redis ran no EVALSHA (INFO commandstats)"
  fi
  # Cold keys are each asked once, and a key's first call asks for no lease.
  if [[ $id == lease* && $id != *cold* ]] && ((local_dec == 0)); then
    die "$id: no decision came from a lease (INFO Leases lease_decisions_local_total)"
  fi
  # Redis's own work: CPU and every command it ran, scripts' calls included,
  # but not the INFO, PING and connection set-up of clients (redis-cli's COMMAND
# DOCS, go-redis's HELLO and CLIENT SETINFO) nor the DBSIZE a store-mode
# bucketd sends Redis to answer this script's INFO.
  awk -v id="$id" -v rep="$rep" -v dec="$dec" '$1 ~ /^cmdstat_.*\.calls$/ {
      c = $1; sub(/^cmdstat_/, "", c); sub(/\.calls$/, "", c)
      if (c !~ /^(info|ping|command|config|client|hello|select|auth|dbsize)(\|.*)?$/ && $2 > 0) print id, rep, c, $2, dec }' \
    "$tmp/w-redis.d" >>"$cmds"
  awk -v id="$id" -v rep="$rep" -v dec="$dec" -v al="$allowed" -v loc="$local_dec" -v held="$held" '
    $1 == "used_cpu_sys" || $1 == "used_cpu_user" { cpu += $2 }
    $1 ~ /^cmdstat_.*\.calls$/ { c = $1; sub(/^cmdstat_/, "", c); sub(/\.calls$/, "", c)
      if (c !~ /^(info|ping|command|config|client|hello|select|auth|dbsize)(\|.*)?$/) calls += $2
      if (c == "evalsha" || c == "eval") ev += $2 }
    END { printf "%s %d %d %d %.5f %.6f %.6f %.4f %d\n", id, rep, dec, al, cpu * 1e6 / dec, calls / dec, ev / dec, loc / dec, held }' \
    "$tmp/w-redis.d" >>"$work"
  log "rep $rep/$REPS  $id: $(tail -1 "$work" | cut -d' ' -f3-) (decisions, allowed, Redis CPU us/decision, Redis commands/decision, EVALSHA/decision, share from leases, leases held after)"
}

results=$tmp/results.txt # id rep rps p50_ms p99_ms bucketd_cpu_us/request [p99_9_ms]
hz=$(getconf CLK_TCK)
# ticks NAME...: CPU clock ticks (user + system) the instances have used so far.
ticks() {
  local n t=0
  for n in "$@"; do t=$((t + $(cpu_ticks "${bucketd_pid[$n]}"))); done
  echo "$t"
}
# cpu_us TICKS REQUESTS: microseconds of CPU per request.
cpu_us() { awk -v t="$1" -v hz="$hz" -v n="$2" 'BEGIN { printf "%.3f", t / hz * 1e6 / n }'; }
: >"$results"
# bench ID N PIPE RANGE NAME... -- CMD...: redis-benchmark against each NAME at
# once (N requests, CLIENTS clients, -P PIPE, -r RANGE each); req/s summed.
bench() {
  local id=$1 n=$2 pipe=$3 KEYSPACE=$4 names=() name i=0 rps=0 p50=0 p99=0 parsed r a b t0 cpu
  shift 4
  while [[ $1 != -- ]]; do names+=("$1"); shift; done
  shift
  local bpids=() warm_n
  warm_n=$(awk -v n="$n" -v w="${warm:-0}" 'BEGIN { printf "%d", n * w }')
  if ((warm_n > 0)); then # the same load, unmeasured, straight into the window
    for name in "${names[@]}"; do
      (run_bench "${port[$name]}" "$warm_n" "$pipe" "$tmp/$id-$rep-$name-warm.csv" "$@") &
      bpids+=("$!")
    done
    for i in "${!bpids[@]}"; do
      wait "${bpids[$i]}" || die "redis-benchmark against ${names[$i]} failed ($id, warming up)"
    done
    bpids=()
  fi
  begin_window "${names[@]}"
  t0=$(ticks "${names[@]}")
  for name in "${names[@]}"; do
    (run_bench "${port[$name]}" "$n" "$pipe" "$tmp/$id-$rep-$name.csv" "$@") &
    bpids+=("$!")
  done
  for i in "${!bpids[@]}"; do
    wait "${bpids[$i]}" || die "redis-benchmark against ${names[$i]} failed ($id)"
  done
  cpu=$(cpu_us $(($(ticks "${names[@]}") - t0)) $((n * ${#names[@]})))
  for name in "${names[@]}"; do
    parsed=$(parse_csv "$tmp/$id-$rep-$name.csv") || die "cannot parse $tmp/$id-$rep-$name.csv"
    read -r r a b <<<"$parsed"
    rps=$(awk -v x="$rps" -v y="$r" 'BEGIN { print x + y }')
    p50=$(awk -v x="$p50" -v y="$a" 'BEGIN { print (y > x ? y : x) }')
    p99=$(awk -v x="$p99" -v y="$b" 'BEGIN { print (y > x ? y : x) }')
  done
  echo "$id $rep $rps $p50 $p99 $cpu" >>"$results"
  log "rep $rep/$REPS  $id: $rps req/s, p50 $p50 ms, p99 $p99 ms (the highest of the instances), bucketd CPU $cpu us/request"
  end_window "$id" $((n * ${#names[@]})) $((CLIENTS * pipe * ${#names[@]}))
}
# load ID NAME: bucketd-load paced at LOAD_QPS on the hot keys' limits.
load() {
  local id=$1 name=$2 f=$tmp/$1-$rep.json line rps p50 p99 p999 errs reqs t0 cpu
  begin_window "$name"
  t0=$(ticks "$name")
  "$tmp/bucketd-load" --addr "$HOST:${port[$name]}" --qps "$LOAD_QPS" --conns "$CLIENTS" --duration "$LOAD_DURATION" \
    --keys 1000 --key-prefix p99: --capacity 100000 --rate 100000 --json >"$f" 2>"$f.err" ||
    { cat -- "$f" "$f.err" >&2 || true; die "bucketd-load against $name failed ($id)"; }
  line=$(jq -r '[.throughput_rps, .latency.p50_us / 1000, .latency.p99_us / 1000, .latency.p99_9_us / 1000,
    .errors + .conn_errors + .connect_failures, .requests] | @tsv' "$f") || die "cannot read $f"
  read -r rps p50 p99 p999 errs reqs <<<"$line"
  ((errs == 0)) || die "bucketd-load against $name: $errs errors ($id)"
  cpu=$(cpu_us $(($(ticks "$name") - t0)) "$reqs")
  echo "$id $rep $rps $p50 $p99 $cpu $p999" >>"$results"
  log "rep $rep/$REPS  $id: $(printf '%.0f req/s, p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms' "$rps" "$p50" "$p99" "$p999"), bucketd CPU $cpu us/request"
  end_window "$id" "$reqs" "$CLIENTS"
}

hot=(TB.ACQUIRE 'hot:__rand_int__' 100000 100000 1)
deny=(TB.ACQUIRE deny:one 10 1 1)
cold=(TB.ACQUIRE 'cold:__rand_int__' 100 10 1)
# contenders MODE...: the modes asked for, in this repetition's order.
contenders() {
  local m out=()
  for m in "$@"; do [[ -n ${on[$m]:-} ]] && out+=("$m"); done
  if ((rep % 2 == 0)); then
    local i rev=()
    for ((i = ${#out[@]} - 1; i >= 0; i--)); do rev+=("${out[$i]}"); done
    out=(${rev[@]+"${rev[@]}"})
  fi
  echo "${out[*]}"
}

start_s=$SECONDS
for ((rep = 1; rep <= REPS; rep++)); do
  if [[ -n ${test_on[hot]:-} ]]; then
    for m in $(contenders memory store lease); do
      warm=$WARM bench "$m-hot" "$N_HOT" 16 1000 "$m" -- "${hot[@]}"
    done
  fi
  if [[ -n ${test_on[hot-pair]:-} ]]; then
    for m in $(contenders store lease); do
      warm=$WARM bench "$m-hot-pair" "$N_PAIR" 16 1000 "$m" "${m}2" -- "${hot[@]}"
    done
  fi
  if [[ -n ${test_on[deny-pair]:-} ]]; then
    for m in $(contenders store lease); do
      warm=$WARM bench "$m-deny-pair" "$N_DENY" 16 1 "$m" "${m}2" -- "${deny[@]}"
    done
  fi
  for p in 16 1; do
    [[ -n ${test_on[cold$p]:-} ]] || continue
    for m in $(contenders store lease); do
      n=N_COLD$p
      bench "$m-cold$p" "${!n}" "$p" 10000000 "$m" -- "${cold[@]}"
    done
  done
  if [[ -n ${test_on[p99]:-} ]]; then
    for m in $(contenders memory store lease); do
      load "$m-p99" "$m"
    done
  fi
done
elapsed=$((SECONDS - start_s))
load_end=$(cat /proc/loadavg 2>/dev/null || echo n/a)
for name in "${!bucketd_pid[@]}"; do
  kill -0 "${bucketd_pid[$name]}" 2>/dev/null || die "bucketd ($name) died during the run"
done
kill -0 "$redis_pid" 2>/dev/null || die "redis-server died during the run"
log "validity checks passed"

# med FILE ID FIELD: the median of a field over the repetitions; "n/a" for none.
med() {
  awk -v id="$2" -v f="$3" '$1 == id { print $f }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit }
      if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.6g", m }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "n/a" && b != "n/a" && b > 0) printf "%.3f", a / b; else print "n/a" }'; }
num() { awk -v x="$1" -v f="$2" 'BEGIN { if (x == "n/a") print x; else printf f, x }'; }
rps() { num "$(med "$results" "$1" 3)" '%.0f'; }
# per_rep A B FIELD: the ratio A/B of each repetition.
per_rep() {
  awk -v a="$1" -v b="$2" -v f="${3:-3}" '$1 == a { x[$2] = $f } $1 == b { y[$2] = $f } END {
    for (r = 1; r <= 999; r++) if ((r in x) && (r in y) && y[r] > 0) { printf "%s%.2f", s, x[r] / y[r]; s = " " } }' "$results"
}
per_rep_work() {
  awk -v a="$1" -v b="$2" -v f="$3" '$1 == a { x[$2] = $f } $1 == b { y[$2] = $f } END {
    for (r = 1; r <= 999; r++) if ((r in x) && (r in y) && y[r] > 0) { printf "%s%.4f", s, x[r] / y[r]; s = " " } }' "$work"
}

mode="full"
[[ ${QUICK:-} == 1 ]] && mode="QUICK=1 (small runs: checks the steps, do not quote it)"
echo "## Lease mode (\`scripts/bench-leases.sh\`)"
echo
echo "- Date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); ${elapsed} s of measurements; mode: $mode; MODES: $MODES; TESTS: $TESTS"
echo "- Machine: nproc $(nproc), $(uname -sm); load (/proc/loadavg) before: $load_start; after: $load_end"
echo "- $(redis-server --version | cut -d' ' -f1-3); $(go version | cut -d' ' -f3); bucketd $bucketd_desc; GOMAXPROCS ${BUCKETD_GOMAXPROCS:-unset (Go default)}"
echo "- store: \`--store URL --redis-timeout 1s --replicate-prefix st:\`; lease: \`--store URL --redis-timeout 1s --replicate-prefix ls: --leases --lease-ttl 4s${LEASE_FLAGS:+ $LEASE_FLAGS}\`"
echo "- redis-benchmark -c $CLIENTS --threads 1; hot: \`${hot[*]}\` -r 1000 -P 16 (N $N_HOT; two instances: N $N_PAIR each);"
echo "  denied: \`${deny[*]}\` -P 16 (N $N_DENY each of two instances); cold: \`${cold[*]}\` -r 10000000 (N $N_COLD16 at -P 16, $N_COLD1 at -P 1)"
echo "- bucketd-load --qps $LOAD_QPS --conns $CLIENTS --duration $LOAD_DURATION --keys 1000 --capacity 100000 --rate 100000"
echo "- $REPS repetitions, medians; contenders alternated (memory, store, lease in odd repetitions, reversed in even ones); ${SETTLE} s settle after each run;"
echo "  hot-key and denied-key runs each preceded by the same load for WARM=$WARM of its requests, not measured"
echo
echo "| test | memory req/s | store req/s | lease req/s | lease / memory | lease / store | per repetition (lease / memory; lease / store) | target |"
echo "|---|---:|---:|---:|---:|---:|---|---|"
printf '| hot keys, -P 16 | %s | %s | %s | %s | %s | %s; %s | lease >= 0.9 x memory |\n' \
  "$(rps memory-hot)" "$(rps store-hot)" "$(rps lease-hot)" \
  "$(ratio "$(med "$results" lease-hot 3)" "$(med "$results" memory-hot 3)")" \
  "$(ratio "$(med "$results" lease-hot 3)" "$(med "$results" store-hot 3)")" \
  "$(per_rep lease-hot memory-hot)" "$(per_rep lease-hot store-hot)"
for p in 16 1; do
  printf '| cold keys, -P %s | | %s | %s | | %s | %s | lease >= 0.95 x store |\n' "$p" \
    "$(rps "store-cold$p")" "$(rps "lease-cold$p")" \
    "$(ratio "$(med "$results" "lease-cold$p" 3)" "$(med "$results" "store-cold$p" 3)")" "$(per_rep "lease-cold$p" "store-cold$p")"
done
printf '| hot keys, two instances at once, -P 16 | | %s | %s | | %s | %s | |\n' \
  "$(rps store-hot-pair)" "$(rps lease-hot-pair)" \
  "$(ratio "$(med "$results" lease-hot-pair 3)" "$(med "$results" store-hot-pair 3)")" "$(per_rep lease-hot-pair store-hot-pair)"
printf '| one key denied, two instances at once, -P 16 | | %s | %s | | %s | %s | |\n' \
  "$(rps store-deny-pair)" "$(rps lease-deny-pair)" \
  "$(ratio "$(med "$results" lease-deny-pair 3)" "$(med "$results" store-deny-pair 3)")" "$(per_rep lease-deny-pair store-deny-pair)"
echo
echo "bucketd's own CPU per request (medians; user + system of the instances under test from /proc during the run, microseconds):"
echo
echo "| run | memory | store | lease | lease / memory | lease / store |"
echo "|---|---:|---:|---:|---:|---:|"
for t in "hot|hot keys, -P 16" "cold16|cold keys, -P 16" "cold1|cold keys, -P 1" "hot-pair|hot keys, two instances" \
  "deny-pair|one key denied, two instances" "p99|bucketd-load at $LOAD_QPS req/s"; do
  IFS='|' read -r id label <<<"$t"
  mc=$(med "$results" "memory-$id" 6) sc=$(med "$results" "store-$id" 6) lc=$(med "$results" "lease-$id" 6)
  printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$(num "$mc" '%.2f')" "$(num "$sc" '%.2f')" "$(num "$lc" '%.2f')" \
    "$(ratio "$lc" "$mc")" "$(ratio "$lc" "$sc")"
done
echo
echo "Redis's own work per decision (medians; CPU = INFO cpu used_cpu_sys + used_cpu_user; commands = INFO commandstats calls,"
echo "the scripts' own calls included, without INFO and PING; decisions = the bucketds' acquire_allowed_total + acquire_denied_total):"
echo
echo "| run | decisions | allowed | store CPU us | lease CPU us | lease / store CPU | store commands | lease commands | lease / store commands | lease EVALSHA | from leases | target |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for t in "hot|hot keys, one instance" "hot-pair|hot keys, two instances" "deny-pair|one key denied, two instances" \
  "cold16|cold keys, -P 16" "cold1|cold keys, -P 1" "p99|bucketd-load at $LOAD_QPS req/s, one instance"; do
  IFS='|' read -r id label <<<"$t"
  sc=$(med "$work" "store-$id" 5) lc=$(med "$work" "lease-$id" 5) sk=$(med "$work" "store-$id" 6) lk=$(med "$work" "lease-$id" 6)
  dec=$(med "$work" "lease-$id" 3) al=$(med "$work" "lease-$id" 4)
  [[ $dec == n/a ]] && dec=$(med "$work" "store-$id" 3) al=$(med "$work" "store-$id" 4)
  target=""
  [[ $id == hot || $id == hot-pair || $id == deny-pair ]] && target="lease <= 0.02 x store"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$(num "$dec" '%.0f')" \
    "$(awk -v a="$al" -v d="$dec" 'BEGIN { if (d > 0) printf "%.1f%%", 100 * a / d; else print "n/a" }')" \
    "$(num "$sc" '%.3f')" "$(num "$lc" '%.4f')" "$(ratio "$lc" "$sc")" "$(num "$sk" '%.3f')" "$(num "$lk" '%.4f')" "$(ratio "$lk" "$sk")" \
    "$(num "$(med "$work" "lease-$id" 7)" '%.4f')" "$(num "$(med "$work" "lease-$id" 8)" '%.4f')" "$target"
done
echo
echo "Per repetition, lease / store Redis CPU per decision: hot $(per_rep_work lease-hot store-hot 5); two instances $(per_rep_work lease-hot-pair store-hot-pair 5); denied $(per_rep_work lease-deny-pair store-deny-pair 5)."
echo
echo "p99 at a fixed rate (bucketd-load, round trip of each request, milliseconds):"
echo
echo "| mode | req/s | p50 | p99 | p99.9 | p99 / memory p99 |"
echo "|---|---:|---:|---:|---:|---:|"
for m in memory store lease; do
  [[ -n ${on[$m]:-} ]] || continue
  printf '| %s | %s | %s | %s | %s | %s |\n' "$m" "$(rps "$m-p99")" "$(num "$(med "$results" "$m-p99" 4)" '%.3f')" \
    "$(num "$(med "$results" "$m-p99" 5)" '%.3f')" "$(num "$(med "$results" "$m-p99" 7)" '%.3f')" \
    "$(ratio "$(med "$results" "$m-p99" 5)" "$(med "$results" memory-p99 5)")"
done
echo
echo "Redis commands per decision, by command (medians):"
echo
echo "| run | commands per decision |"
echo "|---|---|"
awk '{ print $1 }' "$cmds" | sort -u | while read -r id; do
  printf '| %s | %s |\n' "$id" "$(awk -v id="$id" '$1 == id { r[$3] = r[$3] " " $4 / $5 } END { for (c in r) print c, r[c] }' "$cmds" |
    while read -r c vals; do
      m=$(tr ' ' '\n' <<<"$vals" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4g", m }')
      echo "$c $m"
    done | sort | awk '{ printf "%s%s %s", s, $1, $2; s = ", " }')"
done
echo
echo "Validity: every run's decisions matched the requests sent; no error replies from any bucketd, none from Redis but"
echo "the two a new go-redis connection gets for CLIENT SETINFO (Redis 7.0 has no such subcommand), no command on Redis"
echo "rejected or failed; EVALSHA ran in every store and lease run"
echo "(and decisions came from leases in every lease run but the cold keys'); every process was alive at the end."
echo
if [[ -s $degraded ]]; then
  echo "Redis calls that got no reply in time (INFO Store store_redis_errors_total, store_degraded_decisions_total: answered"
  echo "by --on-redis-error; INFO Leases lease_failed_calls_total: the lease dropped), by run:"
  echo
  sed 's/^/- /' "$degraded"
  echo
  echo "The bucketds' warnings and errors (first 10 lines of each log):"
  echo
  echo '```text'
  for n in store store2 lease lease2; do
    [[ -f $tmp/$n.log ]] || continue
    grep -E 'level=(WARN|ERROR)' -- "$tmp/$n.log" | head -10 | sed "s/^/$n: /" || true
  done
  echo '```'
else
  echo "No store errors, degraded decisions or failed lease calls in any run."
fi
