// Package leasestore is lease mode: Redis keeps every bucket, as in store
// mode, and this instance answers most calls from leases of tokens it holds
// from those buckets (internal/lease), in its shards' memory, asking Redis
// only when a lease cannot answer, ahead of need to renew one, and to give
// one back.
//
// A Store is a decide.Limiter over two parts: a shard group in lease mode
// (internal/shard, its entries owned by the shards' goroutines), which
// answers what a lease can; and the Redis store (internal/redisstore),
// which answers what it cannot, with its batching, timeouts and fail-open
// or fail-closed answers. A Caller's Run sends its TB.ACQUIREs to the
// shards; those the shards cannot answer go to Redis as lease calls (the
// script's "lease" op: the call's own cost, a report of what the lease
// spent, and the tokens it wants to hold), and the replies go back to the
// shards before Run returns. Calls the shards start by themselves
// (renewals ahead of need, leases given back when idle) go out through the
// renewer (renewer.go) without making any client wait.
//
// What lease mode answers differently from store mode: TB.MACQUIRE and the
// groups of several-limit policies are sent to Redis as in store mode
// (never from a lease, so never over-granting, at store mode's speed);
// TB.PEEK and TB.RESET go to Redis (a PEEK's remaining is what Redis holds,
// without the leases of any instance; a RESET leaves the leases of other
// instances in place, and their recent denials stand until their
// retry_after_ms); MULTI/EXEC runs its bucket commands as a pipeline would
// (isolated from this instance's other clients by the shards, not from
// other instances: a lease's tokens are this instance's alone);
// CL.THROTTLE is not available, as in store mode.
//
// Invariants (the lease rules of internal/lease hold for every entry);
// each names the tests that hold the code to it:
//
//  1. Every lease call the shards ask for is answered to them, by Apply
//     when Redis replied and by Fail when it did not, before the Caller's
//     Run returns (for calls of a Run) or before the renewer takes its next
//     batch (for the calls the shards started): an entry is never left in
//     flight, which would send every later call of its key to Redis.
//     TestRedisDownRunsReturnWithinTheTimeoutAndKeysLeaseAgain (a key held
//     and a key first asked while Redis was down both lease again after).
//  2. Close gives every lease back through the renewer and waits for those
//     calls about one Redis timeout when Redis does not answer (once
//     closed, a batch Redis replied nothing to makes the renewer fail the
//     rest of its queue unsent), and only then closes the shards; a Run
//     racing Close returns, and a Caller used after Close gets ErrClosed at
//     once. TestCloseWhileRunsAreInFlightAndRedisIsPaused,
//     TestCloseWithManyLeasesAndRedisPausedTakesOneTimeout.
//  3. Every Run returns within about the Redis timeout whatever Redis does
//     (slow, paused, down): nothing waits on Redis but the Redis store,
//     which bounds every reply. TestRedisDownRunsReturnWithinTheTimeoutAndKeysLeaseAgain,
//     TestRenewerQueueFullDropsTheLease.
//  4. What a client can make the store hold is bounded: lease entries by
//     shard.MaxLeaseEntries per shard (a key asked once makes none: a
//     fixed table of key hashes, the shards' cold filter, remembers its
//     first call, which goes to Redis without a visit to its shard;
//     TestAColdKeyGetsNoLeaseEntry, TestAColdKeysFirstCallSkipsItsShard),
//     the renewer's queue by maxRenewQueue; a renewal or give-back the
//     full queue refuses drops the lease (lease rule 2), never blocks a
//     shard.
//     TestRenewerQueueFullDropsTheLease.
//  5. The instances together never grant more, in any window of length w,
//     than capacity + rate*w: through Redis paused past the lease TTL,
//     replies later than the Redis timeout, TB.RESET racing renewals, calls
//     with another limit while a lease is held, and TB.MACQUIRE, which
//     counts the leases out; a key never returns to a record an earlier
//     entry or call of it used, so a late call cannot drop a live record
//     (internal/shard's TestALeaseRecordIsNeverReusedForAKey).
//     TestThreeInstancesNeverOverGrantThroughFaults,
//     TestResetRacingRenewalsNeverOverGrants,
//     TestParameterChangesWhileLeasesAreHeldNeverOverGrant,
//     TestMacquireCountsTheLeasesOut, TestMacquireBesideHotLeasesNeverOverGrants.
//  6. A hot key answered from its lease allocates nothing per call.
//     TestHotKeySteadyStateAllocatesNothing.
//  7. The renewer holds a call back, to send it with others in one Redis
//     command, for at most renewGather and at most a quarter of its Slack
//     (how long the lease it renews lasts at the key's demand), and not at
//     all once closing; a lease's deadline counts from before that wait
//     (the shard stamps the call when it starts it), so waiting costs no
//     over-grant, only a lease run dry if the demand jumps.
//     TestRenewerSendsByTheMostUrgentCall.
package leasestore

import (
	"errors"
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/shard"
)

// ErrClosed is returned by Caller.Run after Close.
var ErrClosed = errors.New("leasestore: store closed")

// Config sets up a Store.
type Config struct {
	// Shards are the shards' settings; Lease is set by New.
	Shards shard.Config
	// Redis answers what the leases cannot: the Redis store, built with
	// this instance's lease id (redisstore.Config.Instance).
	Redis decide.Limiter
	// Policy sizes and keeps the leases (lease.DefaultPolicy when zero).
	Policy lease.Policy
}

// Store is lease mode's decide.Limiter. Safe for concurrent use.
type Store struct {
	group  *shard.Group
	redis  decide.Limiter
	policy lease.Policy
	ren    *renewer
	n      counters
	closed atomic.Bool
}

// counters are lease mode's own: what Redis answered and what the leases
// did, beside the shards' counts of local answers.
type counters struct {
	fromRedis  atomic.Int64 // client decisions Redis made
	allowed    atomic.Int64 // of them, allowed
	leaseCalls atomic.Int64 // lease calls sent (a client's miss, a renewal, a give-back)
	plainCalls atomic.Int64 // plain acquires sent (a key's first call, a miss while a lease call was out)
	failed     atomic.Int64 // lease calls that got no reply: the lease was dropped
}

// New starts the shards in lease mode and the renewer.
func New(cfg Config) *Store {
	if cfg.Policy == (lease.Policy{}) {
		cfg.Policy = lease.DefaultPolicy
	}
	s := &Store{redis: cfg.Redis, policy: cfg.Policy}
	s.ren = newRenewer(s)
	cfg.Shards.Lease = &shard.LeaseConfig{Policy: cfg.Policy, Outbox: s.ren.post}
	s.group = shard.New(cfg.Shards)
	s.ren.start()
	return s
}

// NewCaller returns a Caller for one connection.
func (s *Store) NewCaller() decide.Caller { return s.newCaller() }

// Stats sums the shards' local answers and Redis's.
func (s *Store) Stats() decide.Stats {
	st := s.group.Stats().Stats
	rs := s.redis.Stats()
	redisAllowed := s.n.allowed.Load()
	st.Allowed += redisAllowed
	st.Denied += s.n.fromRedis.Load() - redisAllowed
	st.Peeks += rs.Peeks
	st.Resets += rs.Resets
	st.Buckets = rs.Buckets
	st.QueueDepth += rs.QueueDepth
	return st
}

// Close gives every lease back, then stops the renewer and the shards
// (invariant 2). Safe to call more than once.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.group.GiveBackAll() //nolint:errcheck // the group is not closed yet
	s.ren.close()
	s.group.Close()
}
