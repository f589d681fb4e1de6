// Package redisstore is bucketd's Redis store mode: Redis (standalone or
// Redis Cluster) decides every TB.ACQUIRE, TB.MACQUIRE, TB.PEEK and
// TB.RESET through the token-bucket script (internal/bucket,
// tokenbucket.lua), with Redis TIME as the clock, so that any number of
// bucketd instances in front of one Redis share exact limits. A *Store is a
// decide.Limiter.
//
// Flow: every connection has a Caller. Caller.Run routes the connection's
// operations to lanes, one lane per Redis server: the standalone Redis, or
// each master of a cluster (the master that owns the key's slot, from
// go-redis's slot map). The operations for one lane are one part; Run puts
// each part on its lane's bounded queue and waits on the Caller's own
// completion channel (made once, reused for every Run). Each lane has one
// dispatcher goroutine, which takes what is waiting, up to MaxBatch
// operations, and hands it to one of Pipelines worker goroutines of the
// lane, which sends it to that server as one pipeline of EVALSHA (acquire,
// peek) and DEL (reset) commands, encoded and sent by internal/redisscript:
// on a cluster on the master's own connection (Batch.SendNode), never
// mixed with another master's commands. When nothing waits and a worker of
// the lane is idle, Run hands its part to the worker directly, saving the
// dispatcher's hop. A part is never split across pipelines, and all
// operations on one key are in one part, so a connection's commands on one
// key reach Redis in the order it sent them. An all-or-nothing group
// (Caller.AddAll, TB.MACQUIRE) is one script call with all its keys,
// routed by its first key, never split, and answered as a whole
// (group.go); on a cluster its keys must share a slot, or Run answers
// decide.ErrCrossSlot without sending anything. A cluster lane that has
// been idle for a minute stops its goroutines; the next operation for that
// master makes a new one.
//
// Lease mode (Config.Leases, Config.Instance; internal/leasestore in
// front): a decide.Lease request is the script's lease op for the record
// l:<Instance>-<Gen> of its key, with Config.LeaseTTL; its reply goes into
// the request's exchange (decide.LeaseOp.Reply, Replied) only when the
// reply answers the request, never after the timer has given it the
// policy's answer. TB.RESET is the script's reset op, which keeps the live
// records. Acquires, peeks and groups are sent as ever: the script honours
// records on every key.
//
// Faults stay on their lane: a master that is down or slow holds only its
// own lane's workers and fails only its own slots' operations; the other
// masters' operations are answered as soon as their own master replies.
// A reply Redis sent is never replaced by the policy's answer: each
// operation is settled from its own command's reply, and go-redis's
// cluster pipeline (which re-queues a failed dial with backoff and, at the
// deadline, marks every command of the pipeline failed, replies included)
// is not used. MOVED and ASK (Redis ran nothing) are followed through the
// cluster client.
//
// Ownership: a Caller's operations, parts and results belong to its
// connection except while a Run is in flight, when each operation belongs
// to the lane, then the pipeline, that carries it until it is answered.
// The store's lanes (the map of a cluster's lanes, their queues' closing)
// are guarded by Store.mu: shared while a Run routes and queues,
// exclusive to add a lane, retire one, or close. Each operation is answered
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
//     retries on. Only commands whose reply was NOSCRIPT, MOVED or ASK
//     (Redis ran nothing) are sent again: with the script itself (EVAL),
//     or where the cluster redirects them.
//   - Counters are atomics; INFO and metrics read them without stopping
//     anything.
package redisstore
