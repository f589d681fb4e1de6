#!/usr/bin/env bash
# test.sh: run every bucketd test, the way CI does.
#
# The end-to-end tests drive bucketd with redis-cli and (for the Redis modes)
# a real redis-server, so this script makes sure both are installed: as root
# with apt-get it installs the Debian packages redis-server and redis-tools;
# otherwise it stops and says what to install. It then sets
# BUCKETD_REQUIRE_REDIS=1, so a test that needs Redis fails instead of
# skipping, and runs gofmt, go vet and `go test -race` over every package,
# then the packages whose memory figures the race detector would distort
# once more without it (internal/gcfloor: the GC ballast's RSS). The tools
# under tools/ (the load generator) are modules of their own, which ./... at
# the root does not enter: go vet and go test -race run in each of them too.
#
# FUZZTIME=30s scripts/test.sh also runs every fuzz target for that long
# (scripts/fuzz.sh).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

need_redis() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null
}

if ! need_redis; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing redis-server and redis-tools with apt-get" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
	else
		echo "test.sh: the tests need redis-server and redis-cli." >&2
		echo "  Debian/Ubuntu: sudo apt-get install -y redis-server redis-tools" >&2
		echo "  macOS:         brew install redis" >&2
		exit 1
	fi
fi
need_redis || { echo "test.sh: redis-server or redis-cli still missing after install" >&2; exit 1; }

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "test.sh: gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
shopt -s nullglob
tool_mods=(tools/*/go.mod)
go vet ./...
for mod in "${tool_mods[@]}"; do
	go -C "$(dirname -- "$mod")" vet ./...
done

export BUCKETD_REQUIRE_REDIS=1
go test -race -count=1 -timeout 20m ./...
go test -count=1 ./internal/gcfloor
for mod in "${tool_mods[@]}"; do
	go -C "$(dirname -- "$mod")" test -race -count=1 ./...
done

if [ -n "${FUZZTIME:-}" ]; then
	scripts/fuzz.sh
fi
