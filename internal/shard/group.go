package shard

import (
	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// All-or-nothing groups (TB.MACQUIRE, a policy of several limits): either
// every bucket of the group holds the cost and each gives it, or none
// changes. A group whose buckets all live on one shard is answered by that
// shard alone (acquireAll); one that spans shards is answered by each of
// them for its own buckets, after a vote (vote.go). Either way the same two
// steps run: check every bucket, then take from each if all of them hold
// the cost.

// acquireAll answers a group that lives on this shard at now: ops are its
// requests, answers where their answers go. The group counts as one
// decision, in n.
func (s *shard) acquireAll(ops []op, answers []decide.Answer, now int64, n *tally) {
	allowed := s.check(ops, answers, now)
	n.decided(allowed)
	if allowed {
		s.take(ops, answers, now)
	}
}

// check answers each request of a group with what its bucket holds now
// (bucket.Check: does it alone hold the cost?) and reports whether every
// one does. Nothing changes, not even the clamping or refill a denied
// TB.ACQUIRE writes back. A key of the other kind answers
// decide.ErrWrongType and fails the group.
func (s *shard) check(ops []op, answers []decide.Answer, now int64) bool {
	all := true
	for k := range ops {
		o := &ops[k]
		_, st, exists, err := s.tokenBucket(o)
		if err != nil {
			answers[k] = decide.Answer{Err: err}
			all = false
			continue
		}
		d := bucket.Check(st, exists, o.Limit, o.Cost, now)
		answers[k] = decide.Answer{Decision: d}
		all = all && d.Allowed
	}
	return all
}

// take spends the cost from every bucket of a group that check allowed,
// as TB.ACQUIRE would, and answers each with its decision. Cost 0 is a
// look at every bucket: there is nothing to store.
func (s *shard) take(ops []op, answers []decide.Answer, now int64) {
	if ops[0].Cost == 0 {
		return
	}
	var counted tally // the group was counted once, as one decision
	for k := range ops {
		answers[k] = s.acquire(&ops[k], now, &counted)
	}
}
