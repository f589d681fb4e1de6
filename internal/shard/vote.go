package shard

import (
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/decide"
)

// vote decides one all-or-nothing group whose buckets live on several
// shards. Each of those shards, when it reaches its part of the group in
// its queue, checks its own buckets and casts its vote; the last shard to
// vote releases the others, and each then takes from its own buckets if
// every vote was yes. So no goroutine ever touches another shard's
// buckets, and while a shard waits for the vote it runs nothing else: its
// buckets stay as it checked them until it takes.
//
// Waiting cannot deadlock: a Run posts its batches to all its shards at
// once (Caller.post), so any two Runs stand in the same order on every
// shard they share, and the groups of one Run come in the order they were
// added on every shard. A shard waiting at a vote waits only for work that
// stands before it on another shard, which itself waits only for earlier
// work, down to work that waits for nothing.
//
// A vote is reused by its Caller, round after round: release has room for
// every waiting shard, so the last voter never blocks.
type vote struct {
	voters  int32        // shards that hold members of the group
	pending atomic.Int32 // voters that have not voted yet
	denied  atomic.Bool  // some voter's buckets did not all hold the cost
	release chan struct{}
}

func newVote(shards int) *vote { return &vote{release: make(chan struct{}, shards)} }

// arm prepares the vote for a group spread over voters shards.
func (v *vote) arm(voters int) {
	v.voters = int32(voters)
	v.pending.Store(int32(voters))
	v.denied.Store(false)
}

// cast records one shard's vote, waits until every shard has voted and
// reports whether all voted yes. The stores to denied happen before the
// last voter's decrement, and the others read it after receiving from
// release, so every voter reads the same outcome.
func (v *vote) cast(yes bool) bool {
	if !yes {
		v.denied.Store(true)
	}
	if v.pending.Add(-1) == 0 {
		for range v.voters - 1 {
			v.release <- struct{}{}
		}
	} else {
		<-v.release
	}
	return !v.denied.Load()
}

// acquireVoted answers this shard's members of a group that spans
// shards: check them, vote, and take from them if the vote allows it. The
// group counts as one decision, on the shard that holds its first request
// (its leader).
func (s *shard) acquireVoted(ops []op, answers []decide.Answer, v *vote, now int64, n *tally) {
	allowed := v.cast(s.check(ops, answers, now))
	if ops[0].leader {
		n.decided(allowed)
	}
	if allowed {
		s.take(ops, answers, now)
	}
}
