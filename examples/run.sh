#!/usr/bin/env bash
# run.sh: build bucketd, start it on a free loopback port, run every example
# against it and check what each one prints. Prints PASS or FAIL per example
# and exits 1 if any failed.
#
# The examples need Node.js with npm, redis-cli (Debian package redis-tools)
# and redis-py for the Debian python (python3-redis). Run as root, this
# script installs whichever of them is missing with apt-get; and when
# examples/node/node_modules is absent it runs `npm ci` there (which fetches
# ioredis from the npm registry). Go builds the rest.
#
#   examples/run.sh
#
# PYTHON=/path/to/python3 picks the interpreter for the Python example
# (default: /usr/bin/python3, else python3 from PATH, whichever has redis-py).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

say() { echo "run.sh: $*" >&2; }

# python_with_redis prints a python3 that can import redis. The Debian
# python comes first: it is the one that sees python3-redis, while a pyenv or
# virtualenv python3 earlier in PATH usually does not.
python_with_redis() {
	local py
	for py in "${PYTHON:-}" /usr/bin/python3 "$(command -v python3 || true)"; do
		if [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import redis' 2>/dev/null; then
			echo "$py"
			return 0
		fi
	done
	return 1
}

# --- What the examples need.
missing=()
python_with_redis >/dev/null || missing+=(python3-redis)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		say "installing ${missing[*]} with apt-get"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	else
		say "missing ${missing[*]}; install with: sudo apt-get install -y ${missing[*]}"
	fi
fi
if [ ! -d examples/node/node_modules ] && command -v npm >/dev/null; then
	say "npm ci in examples/node"
	(cd examples/node && npm ci --no-audit --no-fund --loglevel=error) >&2 ||
		say "npm ci failed; the Node example will fail"
fi

# --- Build bucketd and start it on a port the kernel picks.
tmp=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf -- "$tmp"
}
trap cleanup EXIT

say "building bucketd"
go build -o "$tmp/bucketd" ./cmd/bucketd
"$tmp/bucketd" --addr 127.0.0.1:0 2>"$tmp/bucketd.log" &
pid=$!

# bucketd logs "msg=listening addr=127.0.0.1:PORT" once it has bound the port.
addr=
for _ in $(seq 1 100); do
	addr=$(sed -n 's/.*msg=listening.* addr=\([^ ]*\).*/\1/p' "$tmp/bucketd.log")
	if [ -n "$addr" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
	sleep 0.1
done
pong=
if [ -n "$addr" ] && exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}"; then
	printf 'PING\r\n' >&3
	IFS= read -r -t 5 pong <&3 || true
	exec 3<&-
fi
if [ "$pong" != $'+PONG\r' ]; then
	say "bucketd did not start (addr '$addr', PING answered '$pong'); its log:"
	cat "$tmp/bucketd.log" >&2
	exit 1
fi
export BUCKETD_ADDR=$addr
say "bucketd (pid $pid) listening on $BUCKETD_ADDR"

# --- The checker: every example must print exactly these 14 lines.
#   acquire 1: allowed ... acquire 10: allowed
#   acquire 11: denied, acquire 12: denied
#   withinfo: allowed=0 remaining=0 retry_after_ms=R reset_after_ms=S
#     with 0 < R <= 1000 and 0 < S <= 10000 (they vary with timing)
#   reset: 1
# check reads an output on stdin, prints what is wrong with it and fails,
# or prints nothing and succeeds.
check() {
	awk '
	function fail(msg) { printf "line %d: %s\n", NR, msg; bad = 1 }
	NR <= 12 {
		want = "acquire " NR ": " (NR <= 10 ? "allowed" : "denied")
		if ($0 != want) fail("got \"" $0 "\", want \"" want "\"")
		next
	}
	NR == 13 {
		if ($0 !~ /^withinfo: allowed=0 remaining=0 retry_after_ms=-?[0-9]+ reset_after_ms=-?[0-9]+$/) {
			fail("got \"" $0 "\", want \"withinfo: allowed=0 remaining=0 retry_after_ms=R reset_after_ms=S\"")
			next
		}
		split($4, r, "="); split($5, s, "=")
		if (!(r[2] + 0 > 0 && r[2] + 0 <= 1000)) fail("retry_after_ms=" r[2] ", want 0 < retry_after_ms <= 1000")
		if (!(s[2] + 0 > 0 && s[2] + 0 <= 10000)) fail("reset_after_ms=" s[2] ", want 0 < reset_after_ms <= 10000")
		next
	}
	NR == 14 {
		if ($0 != "reset: 1") fail("got \"" $0 "\", want \"reset: 1\"")
		next
	}
	{ fail("unexpected extra line \"" $0 "\"") }
	END {
		if (NR < 14) { printf "%d lines, want 14\n", NR; bad = 1 }
		exit bad
	}'
}

# --- Run the examples.
failed=0
fail() { # name, reason, [output file, error file]
	echo "FAIL $1"
	echo "$2" | sed 's/^/    /'
	if [ $# -gt 2 ]; then
		echo "  stdout:" && sed 's/^/    /' "$3"
		echo "  stderr:" && sed 's/^/    /' "$4"
	fi
	failed=1
}
run_example() { # name, command...
	local name=$1 status=0 problems
	shift
	timeout 120 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || status=$?
	problems=$(check <"$tmp/$name.out") || true
	if [ "$status" = 0 ] && [ -z "$problems" ]; then
		echo "PASS $name"
	else
		[ "$status" = 0 ] || problems="exit status $status${problems:+$'\n'}$problems"
		fail "$name" "$problems" "$tmp/$name.out" "$tmp/$name.err"
	fi
}

if go build -o "$tmp/example-go" ./examples/go 2>"$tmp/go-build.err"; then
	run_example go "$tmp/example-go"
else
	fail go "go build ./examples/go failed:
$(cat "$tmp/go-build.err")"
fi

if py=$(python_with_redis); then
	run_example python "$py" examples/python/bucketd_example.py
else
	fail python "no python3 that can import redis (Debian: apt-get install -y python3-redis)"
fi

if command -v node >/dev/null; then
	run_example node node examples/node/index.js
else
	fail node "node not found (Debian: apt-get install -y nodejs npm)"
fi

if command -v redis-cli >/dev/null; then
	run_example redis-cli examples/redis-cli.sh
else
	fail redis-cli "redis-cli not found (Debian: apt-get install -y redis-tools)"
fi

exit "$failed"
