#!/usr/bin/env bash
# test.sh: run every bucketd test, the way CI does.
#
# The end-to-end tests drive bucketd with redis-cli and (for the Redis modes)
# a real redis-server, and the deployment checks run systemd-analyze, so
# this script makes sure they are installed: as root with apt-get it
# installs the Debian packages redis-server, redis-tools and systemd;
# otherwise it stops and says what to install. It fetches promtool, which
# evaluates the alerting rules, from Debian's prometheus package. It then
# sets BUCKETD_REQUIRE_REDIS=1, so a test that needs Redis or another of
# these tools fails instead of skipping, and runs gofmt, go vet and
# `go test -race` over every package, then the packages whose memory
# figures the race detector would distort once more without it
# (internal/gcfloor: the GC ballast's RSS). The load generator (tools/) and
# the deployment checks (deploy/check) are modules of their own, which ./...
# at the root does not enter: go vet and go test -race run in each of them
# too.
#
# FUZZTIME=30s scripts/test.sh also runs every fuzz target for that long
# (scripts/fuzz.sh).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

# missing_packages lists the Debian packages of the tools the tests need
# that are not installed: redis-server and redis-cli, and systemd-analyze
# (deploy/check verifies the systemd unit with it).
missing_packages() {
	command -v redis-server >/dev/null || echo redis-server
	command -v redis-cli >/dev/null || echo redis-tools
	command -v systemd-analyze >/dev/null || echo systemd
}

missing=$(missing_packages | tr '\n' ' ')
if [ -n "$missing" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing $missing with apt-get" >&2
		apt-get update -qq
		# shellcheck disable=SC2086 # one word per package
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	else
		echo "test.sh: the tests need redis-server, redis-cli and systemd-analyze." >&2
		echo "  Debian/Ubuntu: sudo apt-get install -y $missing" >&2
		echo "  macOS:         brew install redis (the systemd checks need Linux)" >&2
		exit 1
	fi
fi
missing=$(missing_packages | tr '\n' ' ')
[ -z "$missing" ] || { echo "test.sh: $missing still missing after install" >&2; exit 1; }

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
# Modules of their own: the load generator (tools/) and the deployment
# checks (deploy/check, which needs the Kubernetes API packages).
tool_mods=(tools/*/go.mod deploy/*/go.mod)
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
