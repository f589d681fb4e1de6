// Package redisstore is bucketd's Redis store mode: Redis (standalone or
// Redis Cluster) decides every TB.ACQUIRE, TB.PEEK and TB.RESET through the
// token-bucket script (internal/bucket, tokenbucket.lua), with Redis TIME as
// the clock, so that any number of bucketd instances in front of one Redis
// share exact limits. A *Store is a resp.Limiter.
//
// Flow: every connection has a Caller. Caller.Run puts the connection's
// operations, as one unit, on the store's bounded queue and waits on the
// Caller's own completion channel (made once, reused for every Run). One
// dispatcher goroutine takes what is waiting, up to MaxBatch operations,
// and hands it to one of Pipelines worker goroutines, which sends it to
// Redis as one pipeline of EVALSHA (acquire, peek) and DEL (reset) commands,
// encoded and sent by internal/redisscript.
// When nothing waits and a worker is idle, Run hands its unit to the worker
// directly, saving the dispatcher's hop. A connection's operations are
// never split across pipelines, so its commands on one key reach Redis in
// the order it sent them.
//
// Ownership: a Caller's operations and results belong to its connection
// except while a Run is in flight, when each operation belongs to the
// pipeline that carries it until it is answered. Each operation is answered
// exactly once: a per-operation compare-and-swap decides between the worker
// (Redis answered) and the pipeline's timer (Redis did not answer in time).
// Keys are copied into the pipeline before it is sent, so a timed-out
// pipeline that Redis answers late never touches a connection's buffers.
//
// Invariants:
//   - Every reply comes within Config.Timeout of Run (plus scheduling),
//     whatever Redis does: the deadline runs from Run, covers the wait for
//     a free worker, and is enforced both by the pipeline's context and by a
//     timer that answers what the Redis client has not returned.
//   - A command Redis may have executed is never sent again: the commands
//     are marked not-retryable for go-redis and New refuses clients with
//     retries on. Only commands whose reply was NOSCRIPT (the script was
//     not run) are sent again, with the script itself (EVAL).
//   - Counters are atomics; INFO and metrics read them without stopping
//     anything.
package redisstore
