#!/usr/bin/env sh
# build-static.sh OUT: build bucketd as a static binary (no cgo), the one
# build the Dockerfile runs and CI checks. VERSION sets the reported version.
set -eu
out=${1:?usage: build-static.sh OUTPUT-PATH}
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION:-dev}" -o "$out" ./cmd/bucketd
