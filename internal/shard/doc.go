// Package shard keeps bucketd's buckets in memory, split into shards, each
// owned by exactly one goroutine.
//
// Ownership: a shard's table and bucket states are read and written only by
// that shard's goroutine, and no lock guards them. Everyone else posts the
// shard a task and waits for the answer: a Caller posts client requests
// (decide.Request), one batch per shard, and the maintenance methods of
// Group (Restore, Live, Collect, TrackAll, Walk) post a call that runs on
// the shard's goroutine. The single writer makes every operation on a key
// atomic with respect to every other, which is how concurrent acquires on
// one key never over-grant.
//
// Work across shards has one mechanism: a Run is posted to every shard it
// touches in one step (Caller.post holds those shards' queues, taken in
// ascending order, while it appends a batch to each). Transactions,
// pipelines, TB.MACQUIRE groups and several-limit policies all go this
// way; a single-shard Run, the common TB.ACQUIRE, is the case of one
// queue. An all-or-nothing group whose buckets live on several shards is
// decided by a vote of those shards (vote.go), each checking and taking
// from its own buckets. Keys route by their {hash tag} when they have one
// (Group.route), so the keys of one policy, and co-tagged TB.MACQUIRE
// keys, live on one shard and need no vote.
//
// The invariants, which the tests named after each hold the code to:
//
//  1. A Run is seen whole or not at all. Any two Runs stand in the same
//     order on every shard they share, and a request posted after any
//     effect of a Run is visible stands behind every part of it on every
//     shard. So no client sees a transaction, a group or a pipeline done
//     on some of its buckets and not on others, as in Redis
//     (TestRunIsolatedIsNeverSeenHalfDone, TestUnitIsSeenWholeByLaterRequests,
//     TestPipelineNeverStraddlesAUnit).
//  2. A group never over-grants and a denied group changes nothing: every
//     bucket of the group holds the cost and each gives it, or none
//     changes; while a shard waits for a vote it runs nothing else, so its
//     buckets stay as it checked them (TestAcquireAllNeverOverGrants,
//     TestAcquireAllDeniedChangesNothing).
//  3. A shard's time never goes back: every instant it decides at comes
//     from shard.tick, which never returns one earlier than the last, and
//     is read once per task, so a bucket deleted at one instant is never
//     recreated at an earlier one, even by a batch that waited at a vote
//     (TestUnitNeverDecidesBeforeItsShardsLastInstant,
//     TestUnitThrottleNeverDecidesBeforeItsShardsLastInstant,
//     TestReviewEvictionInAVotedBatchNeverDecidesLater).
//  4. Close never hangs, and neither does any caller: a task posted before
//     Close is run (the shards drain their queues before they stop), and
//     every post after it returns ErrClosed having posted nothing, also
//     to a Caller that already got ErrClosed. Close closes every queue in
//     one step, so once a post has met ErrClosed on any shard, every later
//     post meets it on all of them. A Run is posted to all its shards or
//     to none, so a vote always has all its voters, and so is a walk's
//     cut (invariant 8)
//     (TestGroupAcrossShardsMeetingCloseNeverHangs,
//     TestCallerReusedAfterCloseNeverHangs, TestVotesMeetingCloseAllReturn,
//     TestReviewErrClosedStaysClosed).
//  5. Nothing waits for a shard while holding a queue, and nothing orders
//     work across shards but the queues themselves: a post only appends
//     (it may wait for another post's few appends, to take the next queue).
//     A busy shard delays the work posted to it and, through a vote it
//     takes part in, the work behind that vote on the vote's other shards,
//     which run nothing while they wait (invariant 2), and so on through
//     their later votes; no other work (TestBusyShardDelaysNoWorkElsewhere,
//     TestReviewVoteHoldsUpOnlyTheWorkBehindIt).
//  6. A vote cannot deadlock: by invariant 1 every shard meets the votes
//     of overlapping Runs in the same order, and the votes of one Run in
//     the order they were added, so a shard waiting at a vote waits only
//     for work that stands before it elsewhere (TestUnitsAndPlainCallsNeverDeadlock,
//     TestVotesMeetingCloseAllReturn).
//  7. Queues are bounded by their posters, not by a depth: a Caller has at
//     most one batch in each shard's queue (Run waits for its answers
//     before it returns), and a maintenance call is waited for by the
//     goroutine that posted it. So a queue holds at most one task per
//     connection and maintenance goroutine, and a post never needs to
//     wait for room (invariant 5). The depth is reported as a gauge.
//  8. A snapshot is a cut of every unit. Walk posts its cut to every
//     shard in one step, as a Run is posted (Group.postAll, holding all
//     queues in ascending order), so every Run stands before the cut on
//     all its shards or after it on all of them, and the walk hands out
//     each bucket as it was at its shard's cut: a transaction, a group or
//     a pipeline is in the snapshot for all its buckets or for none.
//     Serving goes on during the walk: taking the cut costs each shard a
//     flipped bit, and a shard copies a bucket only when it changes, goes
//     or moves before the walk reaches it, once per walk, and the walk's
//     chunks take the copies out as it goes (walk.go), so memory holds
//     those changed since the walk last called at their shard, never a
//     copy of the others. With Close: a Walk after Close returns ErrClosed having
//     posted its cut nowhere, a cut posted before Close runs on every
//     shard, and the walk's next chunk returns ErrClosed
//     (TestWalkIsACutOfEveryUnit, TestWalkHandsOutTheCut,
//     TestWalkStopAndReplace, TestKill9SnapshotIsACutOfEveryUnit in
//     cmd/bucketd).
//  9. The cold filter (coldfilter.go, lease mode only), the one table the
//     shards share with every Caller, is advisory: a Caller reads a key's
//     slot to send the key's first call to Redis as a plain acquire
//     without a visit to its shard, and only a shard makes or forgets a
//     lease entry, moving its slot's count. A stale or racing reading
//     costs a Redis call (a key with a new entry sent plain, which Redis
//     answers as store mode does, counting every lease held) or a shard
//     visit (a key without an entry sent to its shard), never a grant;
//     it is atomics only, so nothing waits on it, and Close does not
//     touch it (TestAColdKeysFirstCallSkipsItsShard,
//     TestColdFilterRemembersAFirstCallForTheWindow; never over-granting
//     with it: internal/leasestore's invariant 5).
//
// Time: the shards decide on a monotonic clock (internal/clock); Records
// and Changes, which leave the process, carry Unix time, converted here and
// nowhere else.
//
// Keys without a hash tag go to shard hash(key) & (n-1), with a per-process
// seed (hash/maphash) so that clients cannot aim many keys at one shard.
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
