package shard

import "github.com/bucketd/bucketd/internal/decide"

// op is a client Request with its key's hash, which picks the shard and
// the slot.
type op struct {
	decide.Request
	hash uint64
	// group, on the first request of an all-or-nothing group (AddAll), is
	// the number of requests in it; 0 otherwise.
	group int32
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

	// gate is set when the batch is one part of a unit (runGated): the
	// shard waits for a signal on it, sent once every part is queued, and
	// then decides at the unit's instant at. nil for a plain Run.
	gate chan struct{}
	at   int64
}

// Caller gathers one connection's requests, sends each shard involved a
// single batch, and hands back the answers in the order the requests were
// added. It reuses its batches, slices and reply channel, so a steady
// stream of calls allocates nothing. A Caller is not safe for concurrent
// use: each connection owns one.
type Caller struct {
	g       *Group
	batches []batch
	used    []int    // shards that have ops in this round, in first-use order
	where   []uint64 // per added op: shard index << 32 | position in that batch
	answers []decide.Answer
	done    chan *batch

	// isolate says an all-or-nothing group added since the last Run
	// spans shards: the Run must be a unit (RunIsolated).
	isolate bool

	// For RunIsolated, made on first use: one park task and one tally
	// per shard, and the members of the group being answered.
	parks   []park
	tallies []tally
	members []member
	gates   []chan struct{} // for runGated, one per shard
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
	h := c.g.hashKey(r.Key)
	i := int(h & c.g.mask)
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
// bucket's (see acquireAll); the group was allowed when every answer is.
// A group whose keys live on several shards makes the next Run a unit
// (RunIsolated), so that no other request sees it half done.
func (c *Caller) AddAll(reqs []decide.Request) {
	if len(reqs) == 0 {
		return
	}
	first := c.g.hashKey(reqs[0].Key) & c.g.mask
	for k, r := range reqs {
		c.Add(r)
		w := c.where[len(c.where)-1]
		if k == 0 {
			c.batches[w>>32].ops[uint32(w)].group = int32(len(reqs))
		}
		if w>>32 != first {
			c.isolate = true
		}
	}
}

// Run sends every queued request to its shard, one batch per shard, waits
// for all answers and returns them in the order the requests were added.
// Requests on one key are answered in the order they were added. The
// returned slice is valid until the next Run. On ErrClosed no answers are
// returned.
//
// Batches for several shards are queued under the units' mutex, as a
// unit's parts are (unit.go), so that a pipeline and a unit stand in the
// same order on every shard: a pipeline sees a transaction or a group on
// all its buckets or on none, as in Redis. A single-shard Run, the common
// TB.ACQUIRE, takes no lock.
func (c *Caller) Run() ([]decide.Answer, error) {
	if c.isolate {
		return c.RunIsolated()
	}
	var err error
	sent := 0
	if len(c.used) > 1 {
		c.g.units.mu.Lock()
	}
	for _, i := range c.used {
		if err = c.g.submit(i, &c.batches[i]); err != nil {
			break
		}
		sent++
	}
	if len(c.used) > 1 {
		c.g.units.mu.Unlock()
	}
	for ; sent > 0; sent-- {
		if _, werr := c.g.wait(c.done); werr != nil {
			err = werr
			break
		}
	}
	return c.finish(err)
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
	c.isolate = false
	return c.answers, err
}
