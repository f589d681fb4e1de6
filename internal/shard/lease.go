package shard

import (
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
)

// Lease mode: the buckets live in Redis, and each key this instance uses
// has a lease entry (internal/lease) on its shard, owned by the shard's
// goroutine like a bucket: its lease of the Redis bucket, its demand, a
// recent denial. The shard answers a TB.ACQUIRE (decide.LeaseTake) from the
// entry when it can, and otherwise says what to ask Redis; the lease store
// (internal/leasestore) asks, and hands the reply back (decide.LeaseApply,
// decide.LeaseFail). Renewals ahead of need and leases given back when idle
// start here, on the shard's goroutine, and go out through the outbox,
// which must never block.

// LeaseConfig turns a Group's shards into lease mode's.
type LeaseConfig struct {
	Policy lease.Policy
	// Outbox takes a lease call the shard starts by itself: a renewal
	// ahead of need, or an idle lease given back. It must not block; it
	// reports false when it cannot take the call, and the shard then drops
	// the lease as a call without a reply would (lease rule 2; its tokens
	// are counted in LeaseCounts.Dropped).
	Outbox func(key string, limit bucket.Limit, r lease.Request) bool
}

// MaxLeaseEntries bounds a shard's lease entries: a client that sends ever
// new keys would otherwise make them grow for as long as an entry is kept
// (lease.Policy.Idle). A key beyond the bound is sent to Redis as a plain
// acquire, as store mode sends it.
const MaxLeaseEntries = 1 << 16

// leases is a shard's lease entries; nil outside lease mode.
type leases struct {
	cfg LeaseConfig
	// m is the entries by the hash of their key (op.hash): a lookup
	// hashes no string, the key was hashed once already to route it.
	// Two keys of one hash share no entry: the second is answered as a
	// cold key (lookup).
	m map[uint64]*keyEntry
	// peak is the most entries m has held since it was last made anew: a
	// Go map never shrinks, and the sweep walks its empty slots too.
	peak int
	// cold is the group's cold filter: the first calls of keys without an
	// entry, and how many entries each of its slots has (coldfilter.go).
	cold *coldFilter
	// gen is the last record generation handed out. Every entry made and
	// every record given up takes the next one, so a key never goes back
	// to a record an earlier entry or call of it used, however often its
	// entry is forgotten and made again (lease rule 2); the instance id,
	// new at each start, does the same across restarts.
	gen uint32
}

// keyEntry is a lease entry with its key, for the calls the shard starts
// by itself and to tell keys of one hash apart.
type keyEntry struct {
	key string
	lease.Entry
}

// lookup returns the entry of o's key, nil when it has none.
func (l *leases) lookup(o *op) *keyEntry {
	if e := l.m[o.hash]; e != nil && e.key == string(o.Key) {
		return e
	}
	return nil
}

// nextGen hands out a record generation no entry of this shard has used.
func (l *leases) nextGen() uint32 {
	l.gen++
	return l.gen
}

// LeaseCounts are the tokens a shard's leases moved, in millionths of a
// token so that they add up exactly.
type LeaseCounts struct {
	Leased   atomic.Int64 // granted by Redis into a lease
	Returned atomic.Int64 // reported back to Redis unspent
	Dropped  atomic.Int64 // given up without a reply (a failed call): Redis lets them lapse
}

// micro is tokens in millionths, for LeaseCounts.
func micro(tokens float64) int64 { return int64(tokens * 1e6) }

// leaseEntry returns o's entry, making one for a key asked a second time
// within the policy's demand window of its first call, and seeding its
// demand with that call; nil for a key asked for the first time (or not
// since long: a cold key), when the shard holds MaxLeaseEntries already,
// and when another key of the same hash has one. A cold key is then one
// plain acquire, as in store mode, with no copy of its key kept.
func (s *shard) leaseEntry(o *op, now int64) *lease.Entry {
	e, taken := s.leases.m[o.hash]
	if taken && e.key == string(o.Key) {
		return &e.Entry
	}
	at, cost, ok := s.leases.cold.firstCall(o.hash, o.Cost, now)
	if !ok || taken || len(s.leases.m) >= MaxLeaseEntries {
		return nil
	}
	e = &keyEntry{key: string(o.Key), Entry: lease.Entry{Gen: s.leases.nextGen()}}
	s.leases.cfg.Policy.Observed(&e.Entry, cost, at)
	s.leases.m[o.hash] = e
	s.leases.cold.made(o.hash)
	s.leases.peak = max(s.leases.peak, len(s.leases.m))
	return &e.Entry
}

// held reports whether e holds a lease, for the current-leases gauge,
// which count moves by.
func held(e *lease.Entry) bool { return e.Epoch != 0 }

// recount moves the current-leases gauge by what an operation on an entry
// changed (had: whether it held a lease before).
func (s *shard) recount(had bool, e *lease.Entry) {
	switch now := held(e); {
	case now && !had:
		s.leaseCount.Add(1)
	case had && !now:
		s.leaseCount.Add(-1)
	}
}

// leaseTake answers a TB.ACQUIRE from the lease, or says in o.Lease what
// Redis must answer; a local answer is counted here as a decision.
func (s *shard) leaseTake(o *op, now int64, n *tally) decide.Answer {
	e := s.leaseEntry(o, now)
	if e == nil {
		o.Lease.Outcome = lease.Cold
		return decide.Answer{}
	}
	// Take changes no record (held), so only a dropped lease moves the
	// current-leases gauge, in leaseDrop.
	p := &s.leases.cfg.Policy
	out, d, req, renew := p.Take(e, o.Limit, o.Cost, now)
	o.Lease.Outcome, o.Lease.Call = out, req
	if out != lease.Local {
		return decide.Answer{}
	}
	n.decided(d.Allowed)
	if renew {
		if r := p.Renew(e, now); !s.leases.cfg.Outbox(string(o.Key), e.Limit, r) {
			s.leaseDrop(e, r.Returned)
		}
	}
	return decide.Answer{Decision: d}
}

// leaseApply takes in Redis's reply to the entry's call in flight, or its
// answer to a plain acquire of the key (o.Lease.Outcome lease.Plain).
func (s *shard) leaseApply(o *op, now int64) decide.Answer {
	ke := s.leases.lookup(o)
	if ke == nil {
		return decide.Answer{}
	}
	e := &ke.Entry
	if o.Lease.Outcome == lease.Plain {
		s.leases.cfg.Policy.PlainReply(e, o.Limit, o.Lease.Reply.Decision, o.Cost, now)
		return decide.Answer{}
	}
	if e.InFlight {
		had := held(e)
		s.leases.cfg.Policy.Apply(e, o.Lease.Reply, o.Cost, now)
		s.recount(had, e)
		call, r := &o.Lease.Call, &o.Lease.Reply
		if r.Epoch != 0 && r.Held > call.Holding {
			s.leaseTokens.Leased.Add(micro(r.Held - call.Holding))
		}
		s.leaseTokens.Returned.Add(micro(call.Returned))
	}
	return decide.Answer{}
}

// leaseFail takes in that the entry's call in flight got no reply.
func (s *shard) leaseFail(o *op) decide.Answer {
	if e := s.leases.lookup(o); e != nil && e.InFlight {
		s.leaseDrop(&e.Entry, o.Lease.Call.Returned)
	}
	return decide.Answer{}
}

// leaseDrop gives e's lease up without a reply (lease rule 2): what it
// held, and what a call out gave back, lapse in Redis.
func (s *shard) leaseDrop(e *lease.Entry, givenBack float64) {
	had := held(e)
	s.leaseTokens.Dropped.Add(micro(e.Tokens + givenBack))
	s.leases.cfg.Policy.Fail(e)
	e.Gen = s.leases.nextGen() // not Fail's Gen+1, which another entry of the key may have used
	s.recount(had, e)
}

// leaseReset ends the denial the entry remembers: the bucket was reset in
// Redis.
func (s *shard) leaseReset(o *op) decide.Answer {
	if e := s.leases.lookup(o); e != nil {
		e.DenyUntil = 0
	}
	return decide.Answer{}
}

// leaseSweep looks at up to budget entries: an idle lease is given back
// through the outbox, and an entry that holds nothing is forgotten. Map
// iteration starts at a random place each tick, so over the ticks every
// entry is looked at.
func (s *shard) leaseSweep(now int64, budget int) {
	p := s.leases.cfg.Policy
	for h, ke := range s.leases.m {
		if budget--; budget < 0 {
			return
		}
		e := &ke.Entry
		switch {
		case p.Forgettable(e, now):
			delete(s.leases.m, h)
			s.leases.cold.forgot(h)
		case p.Unused(e, now):
			if r, ok := p.GiveBack(e, now); ok && !s.leases.cfg.Outbox(ke.key, e.Limit, r) {
				s.leaseDrop(e, r.Returned)
			}
		}
	}
	if n := len(s.leases.m); s.leases.peak > 1024 && n < s.leases.peak/4 {
		m := make(map[uint64]*keyEntry, n)
		for k, e := range s.leases.m {
			m[k] = e
		}
		s.leases.m, s.leases.peak = m, n
	}
}

// GiveBackAll gives every lease back through the outbox (at shutdown) and
// returns how many calls it started.
func (g *Group) GiveBackAll() (int, error) {
	n := 0
	for i := range g.shards {
		err := g.on(i, func(s *shard, now int64) {
			if s.leases == nil {
				return
			}
			for _, ke := range s.leases.m {
				e := &ke.Entry
				r, ok := s.leases.cfg.Policy.GiveBack(e, now)
				switch {
				case !ok:
				case s.leases.cfg.Outbox(ke.key, e.Limit, r):
					n++
				default:
					s.leaseDrop(e, r.Returned)
				}
			}
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Leases is the number of keys whose lease entry holds a lease now (a
// record in Redis), for the current-leases gauge.
func (g *Group) Leases() int64 {
	var n int64
	for _, s := range g.shards {
		n += s.leaseCount.Load()
	}
	return n
}

// LeaseTokens sums the tokens the shards' leases moved, in tokens.
func (g *Group) LeaseTokens() (leased, returned, dropped float64) {
	for _, s := range g.shards {
		leased += float64(s.leaseTokens.Leased.Load()) / 1e6
		returned += float64(s.leaseTokens.Returned.Load()) / 1e6
		dropped += float64(s.leaseTokens.Dropped.Load()) / 1e6
	}
	return leased, returned, dropped
}

// LeaseEntries is the number of lease entries the shards keep, for tests
// and for sizing.
func (g *Group) LeaseEntries() (int, error) {
	n := 0
	for i := range g.shards {
		if err := g.on(i, func(s *shard, _ int64) {
			if s.leases != nil {
				n += len(s.leases.m)
			}
		}); err != nil {
			return n, err
		}
	}
	return n, nil
}
