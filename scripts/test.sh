#!/usr/bin/env bash
# test.sh: run every bucketd test, the way CI does.
#
# The end-to-end tests drive bucketd with redis-cli and (for the Redis modes)
# a real redis-server, and the client tests (clients/) with the Redis client
# libraries themselves: Node.js 20+ with npm for node-redis, ioredis and
# valkey-glide, and redis-py for the Debian python3. So this script makes
# sure they are installed: as root with apt-get it installs the Debian
# packages redis-server, redis-tools, python3-redis (and nodejs and npm when
# node is missing); otherwise it stops and says what to install. It runs
# `npm ci` in clients/node when its node_modules is missing or older than
# its package-lock.json. It then sets BUCKETD_REQUIRE_REDIS=1, so a test that
# needs any of them fails instead of skipping, and runs gofmt, go vet and
# `go test -race` over every package, then the packages whose memory figures
# the race detector would distort once more without it (internal/gcfloor:
# the GC ballast's RSS). The tools under tools/ (the load generator) and the
# client tests under clients/go are modules of their own, which ./... at the
# root does not enter: go vet and go test -race run in each of them too.
#
# FUZZTIME=30s scripts/test.sh also runs every fuzz target for that long
# (scripts/fuzz.sh).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

# python_with_redis succeeds if a python3 the client tests would pick can
# import redis: $PYTHON, the Debian python (which sees python3-redis even
# when a pyenv or virtualenv python3 comes first in PATH), or python3.
python_with_redis() {
	local py
	for py in "${PYTHON:-}" /usr/bin/python3 "$(command -v python3 || true)"; do
		if [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import redis' 2>/dev/null; then
			return 0
		fi
	done
	return 1
}

# missing lists the Debian packages that would provide what is not here.
missing() {
	command -v redis-server >/dev/null || echo redis-server
	command -v redis-cli >/dev/null || echo redis-tools
	python_with_redis || echo python3-redis
	command -v node >/dev/null || echo nodejs
	command -v npm >/dev/null || echo npm
}

mapfile -t need < <(missing)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing ${need[*]} with apt-get" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "test.sh: the tests need ${need[*]}." >&2
		echo "  Debian/Ubuntu: sudo apt-get install -y ${need[*]}" >&2
		echo "  macOS:         brew install redis node; pip3 install redis" >&2
		exit 1
	fi
fi
mapfile -t need < <(missing)
if [ ${#need[@]} -gt 0 ]; then
	echo "test.sh: still missing after install: ${need[*]}" >&2
	exit 1
fi

# The Node clients, at the versions clients/node/package-lock.json pins.
if [ ! -f clients/node/node_modules/.package-lock.json ] ||
	[ clients/node/package-lock.json -nt clients/node/node_modules/.package-lock.json ]; then
	echo "test.sh: npm ci in clients/node" >&2
	(cd clients/node && npm ci --no-audit --no-fund --loglevel=error) >&2
fi

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "test.sh: gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
shopt -s nullglob
mods=(tools/*/go.mod clients/*/go.mod)
go vet ./...
for mod in "${mods[@]}"; do
	go -C "$(dirname -- "$mod")" vet ./...
done

export BUCKETD_REQUIRE_REDIS=1
go test -race -count=1 -timeout 20m ./...
go test -count=1 ./internal/gcfloor
for mod in "${mods[@]}"; do
	go -C "$(dirname -- "$mod")" test -race -count=1 ./...
done

if [ -n "${FUZZTIME:-}" ]; then
	scripts/fuzz.sh
fi
