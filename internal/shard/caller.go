package shard

import (
	"slices"

	"github.com/bucketd/bucketd/internal/decide"
)

// op is a client Request with its key's hash, which picks the slot.
type op struct {
	decide.Request
	hash uint64
	// group, on the first of a group's requests in a batch, is how many
	// of the group's requests follow in this batch (itself included); 0
	// outside groups. The batch's shard answers them together (group.go).
	group int32
	// leader marks a group's first request: its shard counts the group's
	// decision.
	leader bool
	// vote, with group, is the vote of a group that spans shards (vote.go);
	// nil for a group on one shard.
	vote *vote
}

// batch carries all of one caller's requests for one shard in one message,
// and brings the answers back in the same message: answers[i] answers
// ops[i]. The shard sends the batch on done when it has answered it; done
// has room for every batch its caller can have in flight, so a caller that
// is slow to receive never blocks a shard.
type batch struct {
	ops     []op
	answers []decide.Answer
	done    chan *batch
}

// Caller gathers one connection's requests, sends each shard involved a
// single batch, and hands back the answers in the order the requests were
// added. It reuses its batches, slices, votes and reply channel, so a
// steady stream of calls allocates nothing. A Caller is not safe for
// concurrent use: each connection owns one.
type Caller struct {
	g       *Group
	batches []batch
	used    []int    // shards that have ops in this round, in first-use order
	where   []uint64 // per added op: shard index << 32 | position in that batch
	answers []decide.Answer
	done    chan *batch
	order   []int   // used in ascending order, for post
	wake    []bool  // per order entry: its owner must be woken (post)
	votes   []*vote // made on first use, reused; votes[:nvotes] are this round's
	nvotes  int

	// AddLeaseTakes' scratch: each request's shard, key hash, and whether
	// its cold filter slot counted no entry.
	takeShard   []int
	takeHash    []uint64
	takeNoEntry []bool
}

// NewCaller returns a Caller bound to g.
func (g *Group) NewCaller() *Caller {
	c := &Caller{
		g:       g,
		batches: make([]batch, len(g.shards)),
		done:    make(chan *batch, len(g.shards)), // room for every batch in flight
	}
	for i := range c.batches {
		c.batches[i].done = c.done
	}
	return c
}

// Add queues r for the next Run. r.Key must stay valid until Run returns.
func (c *Caller) Add(r decide.Request) {
	i, h := c.g.route(r.Key)
	c.add(r, i, h)
}

// add queues r for shard i; h is its key's hash.
func (c *Caller) add(r decide.Request, i int, h uint64) {
	b := &c.batches[i]
	if len(b.ops) == 0 {
		c.used = append(c.used, i)
	}
	c.where = append(c.where, uint64(i)<<32|uint64(len(b.ops)))
	b.ops = append(b.ops, op{Request: r, hash: h})
}

// AddAll queues reqs, Acquire requests on distinct keys with one cost, as
// one all-or-nothing group (TB.MACQUIRE): either every bucket holds the
// cost and each gives it, or none changes. Each request's answer is that
// bucket's (see shard.check); the group was allowed when every answer is.
// Keys that share a {hash tag} share a shard, so a group over co-tagged
// keys is answered by one shard alone; a group across shards is decided
// by a vote of its shards (vote.go).
func (c *Caller) AddAll(reqs []decide.Request) {
	if len(reqs) == 0 {
		return
	}
	from := len(c.where)
	for _, r := range reqs {
		c.Add(r)
	}
	members := c.where[from:]
	var v *vote
	if shards := spread(members); shards > 1 {
		v = c.nextVote()
		v.arm(shards)
	}
	// The group's requests in each batch are contiguous (nothing was added
	// between them): the first of them in each batch counts them.
	for k, w := range members {
		o := &c.batches[w>>32].ops[uint32(w)]
		o.vote, o.leader = v, k == 0
		if head := c.firstInBatch(members[:k], w); head != nil {
			head.group++
		} else {
			o.group = 1
		}
	}
}

// spread is the number of distinct shards among members (where entries).
func spread(members []uint64) int {
	n := 0
	for k, w := range members {
		if !slices.ContainsFunc(members[:k], func(e uint64) bool { return e>>32 == w>>32 }) {
			n++
		}
	}
	return n
}

// firstInBatch returns the first of earlier (where entries) in w's batch,
// or nil.
func (c *Caller) firstInBatch(earlier []uint64, w uint64) *op {
	for _, e := range earlier {
		if e>>32 == w>>32 {
			return &c.batches[e>>32].ops[uint32(e)]
		}
	}
	return nil
}

// nextVote returns a vote for this round, reusing the Caller's.
func (c *Caller) nextVote() *vote {
	if c.nvotes == len(c.votes) {
		c.votes = append(c.votes, newVote(len(c.g.shards)))
	}
	c.nvotes++
	return c.votes[c.nvotes-1]
}

// Run answers every request added since the last Run and returns the
// answers in the order the requests were added; the slice is valid until
// the next Run. Requests on one key take effect in the order they were
// added. The whole Run is one unit: it is posted to every shard it touches
// at once (post), so no other request sees it on some of its buckets and
// not on others (the package doc's invariant 1). On ErrClosed no request
// was posted and none took effect, and the Caller may be used again (it
// answers ErrClosed again).
func (c *Caller) Run() ([]decide.Answer, error) {
	err := c.post()
	if err == nil {
		for range c.used {
			<-c.done // every posted batch is answered, even after Close (invariant 4)
		}
	}
	return c.finish(err)
}

// RunIsolated is Run: every Run is already a unit. It exists for the
// stores, such as Redis, where isolation costs something (decide.Caller).
func (c *Caller) RunIsolated() ([]decide.Answer, error) { return c.Run() }

// post puts each batch of this round in its shard's queue, all in one
// step: it holds the queues of every shard involved, taken in ascending
// shard order so that two posts never wait for each other in a circle,
// while it appends, and appends nothing if any of them is closed. Holding
// a queue costs its other posters only the few appends; nothing here
// waits for the shards to do anything.
func (c *Caller) post() error {
	switch len(c.used) {
	case 0:
		return nil
	case 1: // one shard, the common TB.ACQUIRE: its queue alone
		i := c.used[0]
		return c.g.shards[i].queue.put(&c.batches[i])
	}
	c.order = append(c.order[:0], c.used...)
	sortInts(c.order)
	shards := c.g.shards
	open := true
	for _, i := range c.order {
		shards[i].queue.mu.Lock()
		open = open && !shards[i].queue.closed
	}
	c.wake = c.wake[:0]
	if open {
		for _, i := range c.order {
			c.wake = append(c.wake, shards[i].queue.pushLocked(&c.batches[i]))
		}
	}
	for k := len(c.order) - 1; k >= 0; k-- {
		shards[c.order[k]].queue.mu.Unlock()
	}
	if !open {
		return ErrClosed
	}
	for k, i := range c.order {
		if c.wake[k] {
			shards[i].queue.ring()
		}
	}
	return nil
}

// sortInts sorts a few shard indexes in place (insertion sort: no
// allocation, and a Run touches few shards).
func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// finish gathers the answers in the order the requests were added (none
// on an error) and empties the batches for the next round.
func (c *Caller) finish(err error) ([]decide.Answer, error) {
	c.answers = c.answers[:0]
	if err == nil {
		for _, w := range c.where {
			c.answers = append(c.answers, c.batches[w>>32].answers[uint32(w)])
		}
	}
	for _, i := range c.used {
		b := &c.batches[i]
		clear(b.ops) // drop references to the connection's buffers
		b.ops = b.ops[:0]
	}
	c.used = c.used[:0]
	c.where = c.where[:0]
	c.nvotes = 0
	return c.answers, err
}
