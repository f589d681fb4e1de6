#!/usr/bin/env bash
# test.sh: run every bucketd test, the way CI does.
#
# The end-to-end tests drive bucketd with redis-cli and (for the Redis modes)
# a real redis-server; the client tests (clients/) use the Redis client
# libraries themselves: Node.js 20+ with npm for node-redis, ioredis and
# valkey-glide, and redis-py for the Debian python3; the deployment checks
# run systemd-analyze. So this script makes sure they are installed: as root
# with apt-get it installs the Debian packages redis-server, redis-tools, openssl,
# python3-redis and systemd (and nodejs and npm when node is missing);
# otherwise it stops and says what to install. It runs `npm ci` in
# clients/node when its node_modules is missing or older than its
# package-lock.json, and fetches promtool, which evaluates the alerting
# rules, from Debian's prometheus package. It then sets
# BUCKETD_REQUIRE_REDIS=1, so a test that needs any of them fails instead of
# skipping, and runs gofmt, go vet and `go test -race` over every package,
# then the packages whose memory figures the race detector would distort
# once more without it (internal/gcfloor: the GC ballast's RSS). The load
# generator (tools/), the client tests (clients/go) and the deployment
# checks (deploy/check) are modules of their own, which ./... at the root
# does not enter: go vet and go test -race run in each of them too.
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
	command -v openssl >/dev/null || echo openssl # the TLS pages of docs/ make their certificates
	command -v systemd-analyze >/dev/null || echo systemd
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
		echo "  macOS:         brew install redis node; pip3 install redis (the systemd checks need Linux)" >&2
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

# promtool (Prometheus's rule checker) evaluates docs/prometheus-alerts.yml
# in internal/metrics. Debian ships it in the prometheus package; only that
# one binary is taken from it, into a cache directory (installing the
# package would start a Prometheus server).
if ! command -v promtool >/dev/null && [ -z "${BUCKETD_PROMTOOL:-}" ]; then
	promtool_dir=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/bucketd
	if [ ! -x "$promtool_dir/promtool" ]; then
		if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
			echo "test.sh: the tests need promtool: put it on PATH (macOS: brew install prometheus)" >&2
			exit 1
		fi
		echo "test.sh: fetching promtool from Debian's prometheus package" >&2
		deb_dir=$(mktemp -d)
		if ! (cd "$deb_dir" && apt-get download -qq prometheus 2>/dev/null) && [ "$(id -u)" = 0 ]; then
			apt-get update -qq # a fresh machine has no package lists yet
			(cd "$deb_dir" && apt-get download -qq prometheus 2>/dev/null)
		fi
		mkdir -p "$promtool_dir"
		dpkg-deb --fsys-tarfile "$deb_dir"/prometheus_*.deb | tar -xO ./usr/bin/promtool >"$promtool_dir/promtool.tmp"
		chmod +x "$promtool_dir/promtool.tmp"
		mv "$promtool_dir/promtool.tmp" "$promtool_dir/promtool"
		rm -rf "$deb_dir"
	fi
	export BUCKETD_PROMTOOL=$promtool_dir/promtool
fi

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "test.sh: gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
shopt -s nullglob
# Modules of their own: the load generator (tools/), the client tests
# (clients/go) and the deployment checks (deploy/check, which needs the
# Kubernetes API packages).
mods=(tools/*/go.mod clients/*/go.mod deploy/*/go.mod)
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
