// Package clients tests bucketd with the Redis client libraries its users
// install, each in its default configuration: go-redis v9 and rueidis here,
// node-redis, ioredis and valkey-glide (clients/node) and redis-py
// (clients/python) through small runner scripts. Every test builds the
// bucketd binary from this repository (or takes BUCKETD_BIN), starts it on a
// free loopback port and checks the replies the client gets: connecting,
// TB.ACQUIRE (also WITHINFO), TB.PEEK, TB.RESET, CL.THROTTLE, and
// transactions that spend each token exactly once.
//
// This is a module of its own so that bucketd's go.mod gains none of the
// client libraries; scripts/test.sh runs it. The client versions are pinned
// in go.mod and clients/node/package-lock.json; clients/README.md lists them.
package clients
