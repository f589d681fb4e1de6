# shellcheck shell=bash
# bench-lib.sh: helpers shared by the bench-*.sh scripts and bench.sh; sourced, not
# run. The caller defines HOST, CLIENTS, KEYSPACE, die and log.

# stop_pids PID...: SIGTERM each process, wait for each about 5 s at most,
# then SIGKILL that one PID; empty arguments are skipped.
stop_pids() {
  local pid
  for pid in "$@"; do
    [[ -n $pid ]] && kill "$pid" 2>/dev/null || true
  done
  for pid in "$@"; do
    [[ -n $pid ]] || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# run_dir NAME: make the run's temporary directory ($tmp, under TMPDIR,
# named after NAME) and the list of processes it starts ($pids), and, when
# the script exits, stop those and remove the directory. For scripts that
# need nothing else at exit; the others write a cleanup of their own.
run_dir() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/bucketd-$1.XXXXXX")
  pids=()
  trap_exit stop_run
}

# stop_run is run_dir's exit: the run's processes stopped, its directory
# removed, the script's exit status kept.
stop_run() {
  local rc=$?
  stop_pids ${pids[@]+"${pids[@]}"}
  rm -rf -- "$tmp"
  exit "$rc"
}

# trap_exit FUNC: run FUNC when the script exits, also on INT and TERM.
trap_exit() {
  trap "$1" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# cpu_ticks PID: user + system CPU time of PID so far, in clock ticks (0
# when gone). A server's CPU per request is much less disturbed by other
# programs on the machine than its requests per second.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# free_ports [N]: N (default 2) distinct free TCP ports on 127.0.0.1.
free_ports() {
  local count=${1:-2}
  if command -v python3 >/dev/null 2>&1; then
    python3 -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "$count"
  else
    local p found=()
    for _ in $(seq 500); do
      p=$((20000 + RANDOM % 30000))
      [[ " ${found[*]} " == *" $p "* ]] && continue
      if [[ -z $(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null) ]]; then
        found+=("$p")
        ((${#found[@]} == count)) && break
      fi
    done
    ((${#found[@]} == count)) || return 1
    echo "${found[*]}"
  fi
}

# wait_ready NAME PORT PID LOGFILE: PING until +PONG, bounded (about 10 s).
wait_ready() {
  local name=$1 port=$2 pid=$3 logf=$4 out
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || { cat -- "$logf" >&2 || true; die "$name exited during startup"; }
    out=$(redis-cli -h "$HOST" -p "$port" PING 2>/dev/null || true)
    [[ $out == PONG ]] && return 0
    sleep 0.1
  done
  cat -- "$logf" >&2 || true
  die "$name did not answer PING on $HOST:$port"
}

# run_bench PORT N PIPELINE OUTFILE CMD...: one redis-benchmark run, CSV to OUTFILE.
# redis-benchmark 7.0 exits non-zero on the first error reply, so a server answering
# errors cannot pass as fast.
run_bench() {
  local port=$1 n=$2 pipe=$3 outf=$4
  shift 4
  # pin_rest: set by a caller that pins processes to CPUs (bench-modes.sh PIN_REDIS=1).
  if ! ${pin_rest[@]+"${pin_rest[@]}"} redis-benchmark -h "$HOST" -p "$port" -c "$CLIENTS" -n "$n" -r "$KEYSPACE" \
    -P "$pipe" --csv "$@" >"$outf" 2>"$outf.err"; then
    cat -- "$outf" "$outf.err" >&2 || true
    die "redis-benchmark failed on port $port: $*"
  fi
}

# parse_csv FILE: prints "rps p50 p99" from redis-benchmark --csv output. The data line
# is the last line; its last 7 fields are rps,avg,min,p50,p95,p99,max.
parse_csv() {
  awk -F',' '
    NR == 1 { if ($2 != "\"rps\"" || $5 != "\"p50_latency_ms\"" || $7 != "\"p99_latency_ms\"") bad = 1; next }
    NF >= 8 { gsub(/"/, ""); rps = $(NF-6); p50 = $(NF-3); p99 = $(NF-1); n++ }
    END {
      if (bad || n != 1 || rps !~ /^[0-9.]+$/ || p50 !~ /^[0-9.]+$/ || p99 !~ /^[0-9.]+$/) exit 1
      print rps, p50, p99
    }' "$1"
}

