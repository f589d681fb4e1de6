#!/usr/bin/env bash
# test.sh: run every bucketd test, the way CI does. It takes about 6
# minutes on a quiet 2-CPU machine (5 min 49 s, npm ci included; more the
# first time, while the modules download); go test -short ./... is the
# 40-second loop for editing.
#
# What the tests need, which README.md lists too: Go (the version in
# go.mod); redis-server and redis-cli (the end-to-end tests, the Redis
# modes); openssl (the TLS pages of docs/ make their certificates with it);
# Node.js 20+ with npm and redis-py (the client tests, clients/, use
# node-redis, ioredis, valkey-glide and the Debian python3's redis-py);
# systemd-analyze (the deployment checks, deploy/check); curl (the doc
# examples); promtool (Prometheus's rule checker, which evaluates the
# alerting rules). As root with apt-get this script installs the Debian
# packages redis-server, redis-tools, openssl, python3-redis, systemd and
# curl (and nodejs and npm when node is missing); otherwise it stops and
# says what to install. It runs `npm ci` in clients/node when its
# node_modules is missing or older than its package-lock.json, and takes
# promtool from Debian's prometheus package into a cache directory.
#
# Then it sets BUCKETD_REQUIRE_REDIS=1, so a test that needs any of them
# fails instead of skipping, and runs these parts, each even when an
# earlier one failed:
#   gofmt        gofmt -l over the repository
#   vet          go vet in every module
#   root tests   go test -race over every package of the root module
#   gcfloor      internal/gcfloor once more without -race, whose RSS
#                figures the race detector would distort
#   <module> tests  go test -race in each module of its own, which ./... at
#                the root does not enter: the load generator (tools/), the
#                client tests (clients/go), the deployment checks
#                (deploy/check)
#   fuzz         with FUZZTIME=30s (say), every fuzz target for that long
#                (scripts/fuzz.sh)
# The last line says how it went: "test.sh: PASSED (N parts, M min S s)",
# or "test.sh: FAILED: " and the parts that failed, with exit status 1
# ("prerequisites" when it stopped before the parts).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

began=$SECONDS
parts=0
failed=()
# stage is what an exit before the summary reports as failed: a missing
# prerequisite, or the part that was running (an interrupt).
stage=prerequisites
trap 'rc=$?; if [ "$rc" != 0 ] && [ -n "$stage" ]; then echo "test.sh: FAILED: $stage"; fi' EXIT
# An interrupt ends the run, not just the part it hits.
trap 'echo "test.sh: interrupted" >&2; exit 130' INT TERM

# took prints the time since $1 (a $SECONDS reading) as "M min S s".
took() {
	local d=$((SECONDS - $1))
	echo "$((d / 60)) min $((d % 60)) s"
}

# part NAME COMMAND... runs one part and records whether it passed. The
# command is the condition of an if, where set -e does not reach, so a
# command of several steps is a function that returns its own status.
part() {
	local name=$1 start=$SECONDS
	shift
	parts=$((parts + 1))
	stage=$name
	if [ "$(type -t "$1")" = function ]; then
		echo "test.sh: $name"
	else
		echo "test.sh: $name: $*"
	fi
	if "$@"; then
		echo "test.sh: $name passed in $(took "$start")"
	else
		echo "test.sh: $name FAILED in $(took "$start")"
		failed+=("$name")
	fi
}

# summary prints the last line and exits 1 if a part failed.
summary() {
	stage=
	if [ ${#failed[@]} -gt 0 ]; then
		local list
		printf -v list '%s, ' "${failed[@]}"
		echo "test.sh: FAILED: ${list%, }"
		exit 1
	fi
	echo "test.sh: PASSED ($parts parts, $(took "$began"))"
}

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
	command -v curl >/dev/null || echo curl
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

shopt -s nullglob
# Modules of their own: the load generator (tools/), the client tests
# (clients/go) and the deployment checks (deploy/check, which needs the
# Kubernetes API packages).
mods=(tools/*/go.mod clients/*/go.mod deploy/*/go.mod)
export BUCKETD_REQUIRE_REDIS=1

check_gofmt() {
	local unformatted
	unformatted=$(gofmt -l .) || return 1
	if [ -n "$unformatted" ]; then
		echo "test.sh: gofmt needed on:" >&2
		echo "$unformatted" >&2
		return 1
	fi
}

# vet_all runs go vet in every module and fails if any of them fails.
vet_all() {
	local mod rc=0
	go vet ./... || rc=1
	for mod in "${mods[@]}"; do
		go -C "$(dirname -- "$mod")" vet ./... || rc=1
	done
	return "$rc"
}

part gofmt check_gofmt
part vet vet_all
part "root tests" go test -race -count=1 -timeout 20m ./...
part gcfloor go test -count=1 ./internal/gcfloor
for mod in "${mods[@]}"; do
	part "$(dirname -- "$mod") tests" go -C "$(dirname -- "$mod")" test -race -count=1 ./...
done
if [ -n "${FUZZTIME:-}" ]; then
	part fuzz scripts/fuzz.sh
fi
summary
