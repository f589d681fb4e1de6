package leasestore

import (
	"slices"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/shard"
)

// Caller runs one connection's requests in lease mode. Not safe for
// concurrent use: each connection owns one. It reuses everything it
// builds, so a steady stream of calls answered by leases allocates
// nothing.
type Caller struct {
	s      *Store
	shards *shard.Caller // the lease entries
	redis  decide.Caller // what the leases cannot answer

	items   []item
	ops     []*decide.LeaseOp // the exchanges of this Run's TB.ACQUIREs: ops[:used]
	used    int
	clk     shard.BatchClock  // the time of this Run's TB.ACQUIREs, for the cold filter
	takes   []*decide.Request // placeTakes' scratch: the TB.ACQUIREs of the Run
	cold    []bool            // and whether each is a cold key's
	group   []decide.Request  // a group's requests while it is sent
	answers []decide.Answer
}

// where an item is answered.
type where uint8

const (
	atShards    where = iota // a TB.ACQUIRE: the lease, or Redis when it cannot
	coldKey                  // a TB.ACQUIRE of a key with no lease entry: Redis, as a plain acquire
	atRedis                  // TB.PEEK, TB.RESET, CL.THROTTLE: Redis
	groupStart               // the first request of a group sent to Redis (n requests)
	groupMember              // a later request of that group
)

// item is one request of the Run, in the order added.
type item struct {
	req     decide.Request
	where   where
	n       int // groupStart: the group's size
	shardAt int // atShards: its answer's index among the shards'
	redisAt int // its answer's index among Redis's, or -1
}

func (s *Store) newCaller() *Caller {
	return &Caller{s: s, shards: s.group.NewCaller(), redis: s.redis.NewCaller()}
}

// Add queues r: a TB.ACQUIRE for the shards, anything else for Redis.
func (c *Caller) Add(r decide.Request) {
	it := item{req: r, where: atRedis, redisAt: -1}
	if r.Kind == decide.Acquire {
		it.req.Kind, it.req.Lease, it.where = decide.LeaseTake, c.nextOp(), atShards
	}
	c.items = append(c.items, it)
}

// placeTakes gives the shards this Run's TB.ACQUIREs, in the order added,
// all at once (shard.Caller.AddLeaseTakes: their cold filter slots are
// read together), and marks those the filter answers cold.
func (c *Caller) placeTakes() {
	c.takes = c.takes[:0]
	for i := range c.items {
		if it := &c.items[i]; it.where == atShards {
			c.takes = append(c.takes, &it.req)
		}
	}
	if len(c.takes) == 0 {
		return
	}
	c.cold = slices.Grow(c.cold[:0], len(c.takes))[:len(c.takes)]
	c.shards.AddLeaseTakes(c.takes, c.cold, &c.clk)
	k := 0
	for i := range c.items {
		if it := &c.items[i]; it.where == atShards {
			if c.cold[k] {
				it.where = coldKey
			}
			k++
		}
	}
	clear(c.takes) // drop the pointers into items
}

// AddAll queues a group for Redis, answered as store mode answers it: a
// group is never answered from leases.
func (c *Caller) AddAll(reqs []decide.Request) {
	for k, r := range reqs {
		w := groupMember
		if k == 0 {
			w = groupStart
		}
		c.items = append(c.items, item{req: r, where: w, n: len(reqs), redisAt: -1})
	}
}

// nextOp returns an exchange for one TB.ACQUIRE of this Run.
func (c *Caller) nextOp() *decide.LeaseOp {
	if c.used == len(c.ops) {
		c.ops = append(c.ops, new(decide.LeaseOp))
	}
	op := c.ops[c.used]
	*op = decide.LeaseOp{}
	c.used++
	return op
}

// RunIsolated is Run: lease mode isolates a transaction's bucket commands
// from this instance's other clients (the shards do), not from other
// instances (a lease's tokens are this instance's alone); see the package
// doc.
func (c *Caller) RunIsolated() ([]decide.Answer, error) { return c.Run() }

// Run answers every request added since the last Run, in order: the
// leases first, then Redis for what they could not answer, then the shards
// take Redis's lease replies in (invariant 1).
func (c *Caller) Run() ([]decide.Answer, error) {
	defer c.reset()
	if c.s.closed.Load() {
		return nil, ErrClosed
	}
	c.placeTakes()
	local, err := c.runShards()
	if err != nil {
		return nil, c.closedErr(err)
	}
	if c.allLocal() {
		// The steady state of hot keys: nothing for Redis, nothing to hand
		// back to the shards, and local is in the order the requests were
		// added (it is valid until this Caller's next Run).
		return local, nil
	}
	remote, err := c.runRedis()
	if err == nil {
		c.collect(local, remote) // before applyReplies: the shards' next Run reuses local
	}
	if aerr := c.applyReplies(err == nil); err == nil {
		err = aerr
	}
	if err != nil {
		return nil, c.closedErr(err)
	}
	return c.answers, nil
}

// closedErr is err, or ErrClosed when the store was closed meanwhile: a
// Run that began before Close meets the closed shards (or Redis store)
// and their own error, which the caller must not have to know.
func (c *Caller) closedErr(err error) error {
	if c.s.closed.Load() {
		return ErrClosed
	}
	return err
}

// runShards runs the TB.ACQUIREs Add gave the shards, numbering their
// answers.
func (c *Caller) runShards() ([]decide.Answer, error) {
	n := 0
	for i := range c.items {
		if it := &c.items[i]; it.where == atShards {
			it.shardAt = n
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	return c.shards.Run()
}

// allLocal reports whether every request of the Run was a TB.ACQUIRE its
// lease answered.
func (c *Caller) allLocal() bool {
	for i := range c.items {
		if it := &c.items[i]; it.where != atShards || it.req.Lease.Outcome != lease.Local {
			return false
		}
	}
	return true
}

// runRedis sends Redis, in order, what the leases could not answer and the
// requests meant for it.
func (c *Caller) runRedis() ([]decide.Answer, error) {
	n := 0
	for i := range c.items {
		it := &c.items[i]
		switch it.where {
		case atShards:
			if !c.addMiss(it) {
				continue
			}
		case coldKey:
			c.s.n.plainCalls.Add(1)
			c.redis.Add(decide.Request{Kind: decide.Acquire, Key: it.req.Key, Limit: it.req.Limit, Cost: it.req.Cost})
		case atRedis:
			c.redis.Add(it.req)
		case groupStart:
			c.group = c.group[:0]
			for k := range it.n {
				c.items[i+k].redisAt = n + k
				c.group = append(c.group, c.items[i+k].req)
			}
			c.redis.AddAll(c.group)
			clear(c.group) // drop references to the connection's buffers
			n += it.n
			continue
		case groupMember:
			continue
		}
		it.redisAt = n
		n++
	}
	if n == 0 {
		return nil, nil
	}
	return c.redis.Run()
}

// addMiss sends Redis a TB.ACQUIRE its lease could not answer, if so: as a
// lease call, or as a plain acquire when one is out already for the key or
// the key has no entry (lease.Cold).
func (c *Caller) addMiss(it *item) bool {
	op := it.req.Lease
	r := decide.Request{Kind: decide.Acquire, Key: it.req.Key, Limit: it.req.Limit, Cost: it.req.Cost}
	switch op.Outcome {
	case lease.Local:
		return false
	case lease.Ask:
		c.s.n.leaseCalls.Add(1)
		r.Kind, r.Lease = decide.Lease, op
	default:
		c.s.n.plainCalls.Add(1)
		r.Lease = op // the Redis store says in it whether Redis answered (lease rule 4)
	}
	c.redis.Add(r)
	return true
}

// collect puts the answers, the shards' and Redis's, in the order the
// requests were added, and counts the client decisions Redis made.
func (c *Caller) collect(local, remote []decide.Answer) {
	c.answers = c.answers[:0]
	for i := range c.items {
		it := &c.items[i]
		a := decide.Answer{}
		switch {
		case it.redisAt >= 0:
			a = remote[it.redisAt]
			if (it.where == atShards || it.where == coldKey) && a.Err == nil {
				c.s.n.fromRedis.Add(1)
				if a.Decision.Allowed {
					c.s.n.allowed.Add(1)
				}
			}
		default:
			a = local[it.shardAt]
		}
		c.answers = append(c.answers, a)
	}
}

// applyReplies hands the shards what Redis did with the lease calls:
// Apply when it replied, Fail when it did not or the Run failed (replied
// false); Redis's answers to plain acquires of keys with an entry (lease
// rule 4; a cold key's answer goes nowhere, so a cold key costs the shards
// one visit, not two); and the end of a remembered denial for each key
// reset.
func (c *Caller) applyReplies(replied bool) error {
	n := 0
	for i := range c.items {
		it := &c.items[i]
		switch {
		case it.where == atShards && it.req.Lease.Outcome == lease.Ask:
			k := decide.LeaseFail
			if replied && it.req.Lease.Replied {
				k = decide.LeaseApply
			} else {
				c.s.n.failed.Add(1)
			}
			c.shards.Add(decide.Request{Kind: k, Key: it.req.Key, Cost: it.req.Cost, Lease: it.req.Lease})
			n++
		case it.where == atShards && it.req.Lease.Outcome == lease.Plain && replied && it.req.Lease.Replied:
			c.shards.Add(decide.Request{Kind: decide.LeaseApply, Key: it.req.Key, Limit: it.req.Limit, Cost: it.req.Cost, Lease: it.req.Lease})
			n++
		case it.where == atRedis && it.req.Kind == decide.Reset && replied:
			c.shards.Add(decide.Request{Kind: decide.LeaseReset, Key: it.req.Key})
			n++
		}
	}
	if n == 0 {
		return nil
	}
	_, err := c.shards.Run()
	return err
}

// reset empties the Caller for the next Run.
func (c *Caller) reset() {
	clear(c.items) // drop references to the connection's buffers
	c.items = c.items[:0]
	c.used = 0
	c.clk.Reset()
}
