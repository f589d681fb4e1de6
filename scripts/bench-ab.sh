#!/usr/bin/env bash
# bench-ab.sh: is a change a regression? Two bucketd builds side by side under
# redis-benchmark, same parameters, contenders alternated (A B A B ...).
#
#   BASE=a19f1f7 scripts/bench-ab.sh            # A = that commit, B = the work tree
#   A_BIN=./old B_BIN=./new scripts/bench-ab.sh  # two binaries
#   BARE=1 scripts/bench-ab.sh                   # A = a bare redcon server answering :1
#                                                # (tools/redcon-one): the protocol's own cost
#
# It starts both builds at once (loopback, free ports) and runs, for every test
# and repetition, A then B (odd repetitions) or B then A (even ones), so that a
# drift of the shared machine cannot favour one side. It prints a Markdown table
# of median req/s per side and the ratio B/A, and the median CPU time each
# server spent per request (user + system, from /proc), which other programs
# on a shared machine disturb much less; quote ratios, not the figures.
#
# Tests (redis-benchmark -c CLIENTS -r KEYSPACE, default --threads 1):
#   acq1, acq16     TB.ACQUIRE key:__rand_int__ 100 10 1 at -P 1 and -P 16
#   EXTRA           more tests, "id|pipeline|command words" separated by ';'
#                   (__rand_int__ works as in redis-benchmark), for example
#                   EXTRA='peek16|16|TB.PEEK key:__rand_int__ 100 10'
#
# Environment: BASE (a git revision, default HEAD), A_BIN, B_BIN (binaries; B
# defaults to a build of the work tree), REPS (default 5), N_P1 (default
# 300000), N_P16 (default 3000000), CLIENTS (50), KEYSPACE (100000),
# GOMAXPROCS_AB (GOMAXPROCS for both builds; default unset), FLAGS (extra flags
# for both builds). Method and traps of the 2-core machines: docs/benchmarks.md.
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/.." && pwd -P)
cd -- "$repo_root"

BASE=${BASE:-HEAD}
REPS=${REPS:-5}
N_P1=${N_P1:-300000}
N_P16=${N_P16:-3000000}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-100000}
HOST=127.0.0.1
read -r -a flags <<<"${FLAGS:-}"

log() { printf 'bench-ab: %s\n' "$*" >&2; }
die() { printf 'bench-ab: FAIL: %s\n' "$*" >&2; exit 1; }
for tool in redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (apt-get install -y redis-tools)"
done

# shellcheck source=scripts/bench-lib.sh
. "$script_dir/bench-lib.sh"
run_dir ab

# build REV OUT: bucketd as of git revision REV.
build() {
  mkdir -p -- "$tmp/src-$2"
  git -C "$repo_root" archive "$1" | tar -x -C "$tmp/src-$2"
  (cd -- "$tmp/src-$2" && go build -o "$tmp/$2" ./cmd/bucketd) || die "building $1 failed"
}
if [[ -n ${BARE:-} ]]; then
  log "building A: the bare redcon server (tools/redcon-one)"
  go -C tools/redcon-one build -o "$tmp/bucketd-a" . || die "building tools/redcon-one failed"
  A_BIN=$tmp/bucketd-a
  a_desc="bare redcon server answering :1 (tools/redcon-one)"
elif [[ -z ${A_BIN:-} ]]; then
  log "building A from $BASE"
  build "$BASE" bucketd-a
  A_BIN=$tmp/bucketd-a
  a_desc="$(git rev-parse --short "$BASE")"
else
  a_desc=$A_BIN
fi
if [[ -z ${B_BIN:-} ]]; then
  log "building B from the work tree"
  go build -o "$tmp/bucketd-b" ./cmd/bucketd || die "building the work tree failed"
  B_BIN=$tmp/bucketd-b
  b_desc="work tree at $(git rev-parse --short HEAD)$([[ -n $(git status --porcelain) ]] && echo +dirty || true)"
else
  b_desc=$B_BIN
fi

read -r port_a port_b < <(free_ports 2) || die "no free ports"
declare -A side_pid
start() { # start BIN PORT NAME
  if [[ -n ${GOMAXPROCS_AB:-} ]]; then
    env GOMAXPROCS="$GOMAXPROCS_AB" "$1" --addr "$HOST:$2" --metrics-addr= ${flags[@]+"${flags[@]}"} >"$tmp/$3.log" 2>&1 &
  else
    env -u GOMAXPROCS "$1" --addr "$HOST:$2" --metrics-addr= ${flags[@]+"${flags[@]}"} >"$tmp/$3.log" 2>&1 &
  fi
  pids+=($!)
  side_pid[$3]=$!
  wait_ready "$3" "$2" "$!" "$tmp/$3.log"
}
start "$A_BIN" "$port_a" a
start "$B_BIN" "$port_b" b

tests=("acq1|1|TB.ACQUIRE key:__rand_int__ 100 10 1" "acq16|16|TB.ACQUIRE key:__rand_int__ 100 10 1")
if [[ -n ${EXTRA:-} ]]; then
  IFS=';' read -r -a extra <<<"$EXTRA"
  tests+=("${extra[@]}")
fi
results=$tmp/results.txt
: >"$results"
hz=$(getconf CLK_TCK)
for ((rep = 1; rep <= REPS; rep++)); do
  order=(a b)
  ((rep % 2 == 0)) && order=(b a)
  for t in "${tests[@]}"; do
    IFS='|' read -r id pipe words <<<"$t"
    read -r -a cmd <<<"$words"
    n=$N_P16
    ((pipe == 1)) && n=$N_P1
    for side in "${order[@]}"; do
      port=$port_a
      [[ $side == b ]] && port=$port_b
      t0=$(cpu_ticks "${side_pid[$side]}")
      run_bench "$port" "$n" "$pipe" "$tmp/$id-$side-$rep.csv" "${cmd[@]}"
      t1=$(cpu_ticks "${side_pid[$side]}")
      parsed=$(parse_csv "$tmp/$id-$side-$rep.csv") || die "cannot parse redis-benchmark output"
      cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.3f", t / hz * 1e6 / n }')
      echo "$id $side $rep $parsed $cpu" >>"$results"
      log "rep $rep/$REPS $id $side: $parsed $cpu (req/s, p50 ms, p99 ms, server CPU us/request)"
    done
  done
done

median() { # median ID SIDE [FIELD: 4 req/s (default), 7 CPU us/request]
  awk -v t="$1" -v s="$2" -v f="${3:-4}" '$1 == t && $2 == s { print $f }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m }'
}
cat <<EOF
## bucketd A/B: $(date -u '+%Y-%m-%d %H:%M UTC')

- A: $a_desc; B: $b_desc; GOMAXPROCS ${GOMAXPROCS_AB:-unset}; flags: ${FLAGS:-none}
- redis-benchmark -c $CLIENTS -r $KEYSPACE -n $N_P1 (-P 1) / $N_P16 (-P 16); $REPS repetitions, sides alternated

| test | A req/s | B req/s | B/A | B/A per repetition | A CPU us/req | B CPU us/req | B/A CPU |
|---|---:|---:|---:|---|---:|---:|---:|
EOF
for t in "${tests[@]}"; do
  IFS='|' read -r id _ _ <<<"$t"
  a=$(median "$id" a)
  b=$(median "$id" b)
  per=$(awk -v t="$id" '$1 == t { v[$2 $3] = $4; if ($3 > n) n = $3 }
    END { for (r = 1; r <= n; r++) printf "%s%.2f", (r > 1 ? " " : ""), v["b" r] / v["a" r] }' "$results")
  ac=$(median "$id" a 7)
  bc=$(median "$id" b 7)
  printf '| %s | %.0f | %.0f | %s | %s | %s | %s | %s |\n' "$id" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')" "$per" \
    "$ac" "$bc" "$(awk -v a="$ac" -v b="$bc" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "n/a" }')"
done
