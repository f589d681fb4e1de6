package leasesim

import (
	"math"
	"strconv"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/lease"
)

// sweepEvery is how often an instance sweeps its entries, on its own
// clock: the shards' default sweep interval.
const sweepEvery = 10_000

// clock is an instance's monotonic clock: it reads offset when the
// instance starts, at true instant start, and runs at rate of the true
// clock's speed.
type clock struct {
	start, offset int64
	rate          float64
}

// local is the instance's reading at true instant t.
func (c clock) local(t int64) int64 { return c.offset + int64(float64(t-c.start)*c.rate) }

// trueDur is how long on the true clock a duration d of the instance's
// clock lasts.
func (c clock) trueDur(d int64) int64 { return int64(math.Ceil(float64(d) / c.rate)) }

// callKind is what a call to Redis is for, which decides what its reply
// (or its absence) does.
type callKind uint8

const (
	clientLease callKind = iota // a client's miss, as a lease call (lease.Ask)
	clientPlain                 // a client's miss while a lease call is out (lease.Plain)
	renewal                     // a renewal ahead of need (the renewer)
	giveBack                    // an idle lease given back (the sweep)
)

// call is one call out to Redis.
type call struct {
	key   *keyState
	kind  callKind
	cost  float64
	limit bucket.Limit // a plain acquire's
	req   lease.Request
}

// instance is one bucketd in lease mode: its entries, owned (as a shard
// owns them) by the event loop, and its calls out.
type instance struct {
	s       *sim
	name    string
	alive   bool
	clock   clock
	entries map[string]*lease.Entry
	pending map[uint64]call
	next    uint64
	gen     uint32 // the last record generation handed out, as a shard's (internal/shard)
}

// nextGen hands out a record generation the instance has not used, as
// internal/shard does for new entries and after failed calls.
func (in *instance) nextGen() uint32 {
	in.gen++
	return in.gen
}

// take answers a client's call of cost on key k, as shard.leaseTake and
// leasestore's Caller do: from the lease, or by a call to Redis.
func (in *instance) take(k *keyState, cost float64) {
	s, p := in.s, &in.s.cfg.Policy
	now := in.clock.local(s.loop.now)
	e := in.entries[k.Name]
	if e == nil {
		e = &lease.Entry{Gen: in.nextGen()}
		in.entries[k.Name] = e
	}
	l := k.limitAt(s.loop.now)
	out, d, req, renew := p.Take(e, l, cost, now)
	switch out {
	case lease.Local:
		s.res.Decisions++
		if d.Allowed {
			k.check.allow(cost, s.loop.now)
		}
		if renew {
			in.send(call{key: k, kind: renewal, req: p.Renew(e, now)})
		}
	case lease.Ask:
		in.send(call{key: k, kind: clientLease, cost: cost, req: req})
	case lease.Plain:
		s.res.PlainCalls++
		in.send(call{key: k, kind: clientPlain, cost: cost, limit: l})
	}
}

// send puts a call on the network, and arms its timeout on the
// instance's clock.
func (in *instance) send(c call) {
	s := in.s
	s.res.RedisCalls++
	id := in.next
	in.next++
	in.pending[id] = c
	s.loop.at(s.loop.now+in.clock.trueDur(s.cfg.Timeout), func() { in.timeout(id) })
	d, lost := s.cfg.Net.leg(s.rng)
	if lost {
		s.res.Lost++
		return
	}
	s.loop.at(s.loop.now+d, func() { s.serve(in, id, c) })
}

// reply takes in Redis's reply, run at true instant ranAt, if the call is
// still waiting for it.
func (in *instance) reply(id uint64, r bucket.LeaseReply, ranAt int64) {
	c, ok := in.pending[id]
	if !in.alive || !ok {
		return
	}
	delete(in.pending, id)
	s := in.s
	if e := in.entries[c.key.Name]; c.kind == clientPlain && e != nil {
		s.cfg.Policy.PlainReply(e, c.limit, r.Decision, c.cost, in.clock.local(s.loop.now)) // rule 4
	}
	if c.kind != clientPlain {
		e := in.entries[c.key.Name]
		if e != nil && e.InFlight {
			s.cfg.Policy.Apply(e, lease.Reply{Decision: r.Decision, Epoch: r.Epoch, Held: r.Held}, c.cost, in.clock.local(s.loop.now))
			if s.cfg.IgnoreDeadline && e.Epoch != 0 {
				e.Deadline = math.MaxInt64
			}
		}
	}
	if c.kind == clientLease || c.kind == clientPlain {
		s.res.Decisions++
		if r.Decision.Allowed {
			c.key.check.allow(c.cost, ranAt)
		}
	}
}

// timeout fails a call that got no reply in time: the lease is dropped
// (lease rule 2) and its client denied.
func (in *instance) timeout(id uint64) {
	c, ok := in.pending[id]
	if !in.alive || !ok {
		return
	}
	delete(in.pending, id)
	s := in.s
	s.res.TimedOut++
	if c.kind != clientPlain {
		if e := in.entries[c.key.Name]; e != nil && e.InFlight {
			s.cfg.Policy.Fail(e)
			e.Gen = in.nextGen()
		}
	}
	if c.kind == clientLease || c.kind == clientPlain {
		s.res.Decisions++
	}
}

// sweep does what shard.leaseSweep does on each tick: an entry holding
// nothing is forgotten, and an idle lease is given back. Keys are taken
// in a fixed order, for determinism.
func (in *instance) sweep() {
	if !in.alive {
		return
	}
	s, p := in.s, &in.s.cfg.Policy
	now := in.clock.local(s.loop.now)
	for _, k := range s.keys {
		e := in.entries[k.Name]
		switch {
		case e == nil:
		case p.Forgettable(e, now):
			delete(in.entries, k.Name)
		case p.Unused(e, now):
			if r, ok := p.GiveBack(e, now); ok {
				in.send(call{key: k, kind: giveBack, req: r})
			}
		}
	}
	s.loop.at(s.loop.now+in.clock.trueDur(sweepEvery), in.sweep)
}

// holder is the name of the instance's record for a call: its name and
// the record's generation (lease.Request.Gen).
func (in *instance) holder(gen uint32) string {
	return in.name + "-" + strconv.FormatUint(uint64(gen), 10)
}
