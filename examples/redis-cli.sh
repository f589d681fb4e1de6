#!/usr/bin/env bash
# bucketd example for the shell, with redis-cli (Debian package redis-tools):
# a burst of 12 TB.ACQUIRE calls on a bucket of capacity 10 refilling at
# 1 token per second (10 allowed, 2 denied), one TB.ACQUIRE ... WITHINFO to
# see how long to wait, then TB.RESET.
#
#   BUCKETD_ADDR=127.0.0.1:6380 examples/redis-cli.sh
set -euo pipefail

addr=${BUCKETD_ADDR:-127.0.0.1:6380}
host=${addr%:*} port=${addr##*:}
host=${host#[} host=${host%]}

capacity=10 # the bucket holds at most 10 tokens
rate=1      # and refills at 1 token per second

# One redis-cli call per command; --raw prints bare values, one per line.
cli() {
	redis-cli -h "$host" -p "$port" --raw "$@"
}

# A key of its own per run, so runs don't share a bucket.
key="example:cli:$(date +%s)-$$-$RANDOM"

# TB.ACQUIRE key capacity rate [cost] answers 1 (allowed) or 0 (denied).
for i in {1..12}; do
	allowed=$(cli TB.ACQUIRE "$key" "$capacity" "$rate")
	case $allowed in
	1) echo "acquire $i: allowed" ;;
	0) echo "acquire $i: denied" ;;
	*) echo "TB.ACQUIRE: unexpected reply: $allowed" >&2; exit 1 ;;
	esac
done

# With WITHINFO: [allowed, remaining, retry_after_ms, reset_after_ms], one per line.
info=$(cli TB.ACQUIRE "$key" "$capacity" "$rate" 1 WITHINFO)
{ read -r allowed; read -r remaining; read -r retry_after_ms; read -r reset_after_ms; } <<<"$info"
echo "withinfo: allowed=$allowed remaining=$remaining retry_after_ms=$retry_after_ms reset_after_ms=$reset_after_ms"

# TB.RESET key [key ...] answers how many buckets it removed.
removed=$(cli TB.RESET "$key")
echo "reset: $removed"
