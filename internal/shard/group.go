package shard

import (
	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// member is one bucket of an all-or-nothing group: its request, the shard
// that owns it, and where its answer goes. Whoever answers the group holds
// every member's shard: the shard's own goroutine when the group lives on
// one shard, a unit's goroutine (RunIsolated) when it spans several.
type member struct {
	s *shard
	o *op
	a *decide.Answer
}

// acquireAll answers an all-or-nothing group at now (TB.MACQUIRE). Every
// bucket is checked first (bucket.Check: does it alone hold the cost?); if
// every one does, each gives the cost as TB.ACQUIRE would and answers with
// its decision. Otherwise no bucket changes at all (not even the clamping
// or refill a denied TB.ACQUIRE writes back), and each answers what it
// holds now, with whether it alone had the tokens. A key of the other kind
// answers decide.ErrWrongType and fails the group. The group counts as one
// decision, in n.
func acquireAll(ms []member, now int64, n *tally) {
	all := true
	for k := range ms {
		m := &ms[k]
		_, st, exists, err := m.s.tokenBucket(m.o)
		if err != nil {
			*m.a = decide.Answer{Err: err}
			all = false
			continue
		}
		d := bucket.Check(st, exists, m.o.Limit, m.o.Cost, now)
		*m.a = decide.Answer{Decision: d}
		all = all && d.Allowed
	}
	n.decided(all)
	if !all || ms[0].o.Cost == 0 { // cost 0 is a look at every bucket: nothing to store
		return
	}
	var counted tally // the group was counted once above
	for k := range ms {
		*ms[k].a = ms[k].s.acquire(ms[k].o, now, &counted)
	}
}
