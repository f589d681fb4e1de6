#!/usr/bin/env bash
# bench-tx.sh: what transactions cost, in one run, with tools/bucketd-load.
#
#   tx16 / pipe16   50 connections sending MULTI, 16 TB.ACQUIREs on random keys
#                   and EXEC (--tx 16) against the same connections sending plain
#                   pipelines of 16 (--pipeline 16): TB.ACQUIRE/s of each, ratio.
#   beside          a client's pipelined TB.ACQUIREs (--conns 50 --pipeline 16,
#                   as fast as it can) while 8 other connections send RATE
#                   TB.ACQUIRE/s as transactions of 16, or as pipelines of 16:
#                   the client's TB.ACQUIRE/s next to each, ratio. For each RATE
#                   in RATES.
#
# Contenders alternate within each repetition (the order flips every
# repetition); the report gives every ratio and their median. The machine is
# shared: quote ratios, not the figures. How the shards isolate a transaction,
# and these figures: docs/architecture.md.
#
# Environment: REPS (4), SECONDS_EACH (3), RATES ("20000 100000"), KEYSPACE
# (100000), BUCKETD_BIN (else a build of the work tree), BUCKETD_FLAGS, and
# CALIBRATE=1 to give the "with transactions" side pipelines too: the ratios
# then show what the method itself scatters on this machine.
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/.." && pwd -P)
cd -- "$repo_root"

REPS=${REPS:-4}
CALIBRATE=${CALIBRATE:-0}
SECONDS_EACH=${SECONDS_EACH:-3}
RATES=${RATES:-20000 100000}
KEYSPACE=${KEYSPACE:-100000}
BUCKETD_BIN=${BUCKETD_BIN:-}
read -r -a bucketd_flags <<<"${BUCKETD_FLAGS:-}"

die() { printf 'bench-tx: FAIL: %s\n' "$*" >&2; exit 1; }
for v in REPS SECONDS_EACH KEYSPACE; do
  [[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} >= 1)) || die "$v must be a positive integer, got '${!v}'"
done
command -v python3 >/dev/null || die "python3 not found (it reads bucketd-load's JSON)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bucketd-tx.XXXXXX")
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf -- "$tmp"
}
trap cleanup EXIT

if [[ -z $BUCKETD_BIN ]]; then
  go build -o "$tmp/bucketd" ./cmd/bucketd
  BUCKETD_BIN=$tmp/bucketd
fi
(cd tools/bucketd-load && go build -o "$tmp/bucketd-load" .)
load=$tmp/bucketd-load

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BUCKETD_BIN" --addr "127.0.0.1:$port" --metrics-addr "" "${bucketd_flags[@]}" >"$tmp/bucketd.log" 2>&1 &
server_pid=$!
for _ in $(seq 50); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  sleep 0.1
done

# rps ARGS...: TB.ACQUIRE/s of one bucketd-load run.
rps() {
  "$load" --addr "127.0.0.1:$port" --keys "$KEYSPACE" --no-info --json "$@" 2>>"$tmp/load.err" |
    python3 -c 'import json,sys; print(int(json.load(sys.stdin)["throughput_rps"]))'
}

# beside MODE RATE: the client's TB.ACQUIRE/s while 8 connections send RATE
# TB.ACQUIRE/s as MODE (tx or pipe) for a little longer than the client runs.
beside() {
  local nb=(--pipeline 16)
  [[ $1 == tx && $CALIBRATE != 1 ]] && nb=(--tx 16)
  "$load" --addr "127.0.0.1:$port" --keys "$KEYSPACE" --no-info --json --conns 8 "${nb[@]}" \
    --qps "$2" --duration "$((SECONDS_EACH + 2))s" >"$tmp/neighbour.json" 2>&1 &
  local np=$!
  sleep 1
  rps --conns 50 --pipeline 16 --duration "${SECONDS_EACH}s"
  wait "$np" || die "the neighbouring client failed: $(tail -3 "$tmp/neighbour.json")"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# compare NAME A-COMMAND B-COMMAND: REPS alternated pairs, one line each, then the median ratio.
compare() {
  local name=$1 a=$2 b=$3 ratios="" ra rb
  for r in $(seq 1 "$REPS"); do
    if ((r % 2)); then ra=$(eval "$a"); rb=$(eval "$b"); else rb=$(eval "$b"); ra=$(eval "$a"); fi
    ratios+="$(ratio "$ra" "$rb") "
    printf '| %s | %d | %s | %s | %s |\n' "$name" "$r" "$ra" "$rb" "$(ratio "$ra" "$rb")"
  done
  printf '| %s | median | | | **%s** |\n' "$name" "$(echo "$ratios" | median)"
}

tx_side=(--tx 16)
[[ $CALIBRATE == 1 ]] && tx_side=(--pipeline 16)
printf '## bench-tx: %s UTC, %s\n\n' "$(date -u '+%Y-%m-%d %H:%M')" "$("$BUCKETD_BIN" --version)"
[[ $CALIBRATE == 1 ]] && printf 'CALIBRATE=1: both sides send pipelines.\n\n'
printf '| test | repetition | with transactions | with pipelines | ratio |\n|---|---:|---:|---:|---:|\n'
compare "tx16 vs pipe16 (TB.ACQUIRE/s)" \
  "rps --conns 50 ${tx_side[*]} --duration ${SECONDS_EACH}s" \
  "rps --conns 50 --pipeline 16 --duration ${SECONDS_EACH}s"
for rate in $RATES; do
  compare "client beside $rate/s (TB.ACQUIRE/s)" "beside tx $rate" "beside pipe $rate"
done
