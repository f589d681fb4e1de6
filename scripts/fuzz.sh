#!/usr/bin/env bash
# fuzz.sh: run every go test -fuzz target for FUZZTIME each (default 10m),
# one after another, and keep any crasher in the package's testdata/fuzz as
# a regression case (go test does that by itself). Exits non-zero on the
# first target that finds a failure.
#
#   FUZZTIME=10m scripts/fuzz.sh            # the campaign
#   FUZZTIME=30s scripts/fuzz.sh            # a quick pass
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
FUZZTIME=${FUZZTIME:-10m}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz.sh: $pkg $target for $FUZZTIME" >&2
		start=$SECONDS
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tail -3
		echo "fuzz.sh: $target done in $((SECONDS - start)) s" >&2
	done
done
