// Package shard keeps bucketd's buckets in memory, split into shards, each
// owned by exactly one goroutine.
//
// Ownership: a shard's table and bucket states are read and written only by
// that shard's goroutine. Everyone else sends it a task over a bounded
// channel and waits for the answer: a Caller sends client requests
// (decide.Request) as one batch per shard, and the maintenance methods of
// Group (Restore, Live, Collect, TrackAll, Walk) send a call that runs on the
// shard's goroutine. There are no locks on bucket state: the single writer
// makes every operation on a key atomic with respect to every other, which
// is how concurrent acquires on one key never over-grant.
//
// Time: the shards decide on a monotonic clock (internal/clock); Records
// and Changes, which leave the process, carry Unix time, converted here and
// nowhere else.
//
// Keys go to shard hash(key) & (n-1), with a per-process seed (hash/maphash)
// so that clients cannot aim many keys at one shard.
//
// Expiry: a bucket that has refilled to capacity holds no information (it
// answers exactly like a bucket that was never used with the same limit), so
// it is deleted: at once when a call leaves it full, and otherwise by an
// incremental sweeper that every tick examines a bounded slice of the shard.
// Memory therefore tracks the number of buckets that are not yet full.
//
// Counters (live buckets, decisions, queue depth) are atomics that INFO,
// DBSIZE and metrics read without stopping a shard.
package shard
