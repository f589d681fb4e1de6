// Package redisscript is the one client of bucketd's token-bucket script
// (bucket.Script) on Redis. Replication (internal/replica) and store mode
// (internal/redisstore) both call the script through it, so these rules
// live here once:
//
//   - Encoding: the keys (with their prefix) and the six ARGV of each call,
//     numbers in the shortest form that reads back as the same float64, are
//     formatted into one string per Batch that the commands point into;
//     acquire and peek pass an empty now (RedisTime) so that the script reads
//     Redis TIME, put and del carry bucketd's Unix microseconds.
//   - Layout: up to BatchKeys calls share one EVALSHA on a standalone Redis
//     (the script's batch form); on a Redis Cluster each call has its own,
//     because the keys of one call would have to share a hash slot
//     (KeysPerCall). A Reset is a plain DEL and ends a run, so each key sees
//     its operations in the order they were added. In lease mode a reset
//     is the script's reset op (LeaseReset), which keeps live lease
//     records, and a lease call (Lease) carries its holder, epoch, report,
//     want and TTL in its ARGV[6]: both are script calls like the others. An all-or-nothing group
//     (AcquireAll, TB.MACQUIRE) is never split: all its keys are in one
//     EVALSHA, alone on a cluster (where its keys must share a slot, which
//     the caller checks), and on a standalone Redis with other calls when it
//     fits.
//   - Sending: EVALSHA, and EVAL only for the commands Redis answered
//     NOSCRIPT (it ran nothing of them): once per node first, then for all
//     that still fail. No command is ever sent again by go-redis itself.
//     SendNode sends a batch to one master of a cluster on that master's
//     own connection, and only the commands it answered MOVED or ASK (it
//     ran nothing of them) again through the cluster client.
//   - Replies: a batch's array of per-call replies with error elements
//     (Batch.Reply), the acquire/peek reply as a bucket.Decision
//     (ParseDecision), and what an error means (Classify).
//
// The name says what it is: the Redis side of the script, where
// internal/bucket holds the script itself and the math it must equal. The
// script and its SHA-1 stay in internal/bucket (go:embed), next to the Go
// math the differential tests hold it equal to.
//
// Allocation: a Batch reuses its buffers from one use to the next; each
// Build allocates the string the commands point into, their arguments and
// the commands themselves, never per call more than their share of those.
// The strings and arguments are new per Build because go-redis may still
// hold a command of an earlier Batch that timed out.
package redisscript
