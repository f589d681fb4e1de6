package shard

// Caller gathers one connection's operations, sends each shard involved a
// single Batch, and hands back the answers in the order the operations were
// added. It reuses its batches, slices and reply channel, so a steady stream
// of calls allocates nothing. A Caller is not safe for concurrent use: each
// connection owns one.
type Caller struct {
	g       *Group
	batches []Batch
	used    []int    // shards that have ops in this round, in first-use order
	where   []uint64 // per added op: shard index << 32 | position in that batch
	results []Result
	done    chan *Batch
}

// NewCaller returns a Caller bound to g.
func (g *Group) NewCaller() *Caller {
	c := &Caller{
		g:       g,
		batches: make([]Batch, len(g.shards)),
		done:    make(chan *Batch, len(g.shards)), // room for every batch in flight
	}
	for i := range c.batches {
		c.batches[i].Done = c.done
	}
	return c
}

// Add queues op for the next Run. Op.Key must stay valid until Run returns.
func (c *Caller) Add(op Op) {
	op.hash = c.g.hashKey(op.Key)
	i := int(op.hash & c.g.mask)
	b := &c.batches[i]
	if len(b.Ops) == 0 {
		c.used = append(c.used, i)
	}
	c.where = append(c.where, uint64(i)<<32|uint64(len(b.Ops)))
	b.Ops = append(b.Ops, op)
}

// Pending returns the number of ops added since the last Run.
func (c *Caller) Pending() int { return len(c.where) }

// Run sends every queued op to its shard, one Batch per shard, waits for all
// answers and returns them in the order the ops were added. The returned
// slice is valid until the next Run. On ErrClosed no answers are returned.
func (c *Caller) Run() ([]Result, error) {
	var err error
	sent := 0
	for _, i := range c.used {
		if err = c.g.Submit(i, &c.batches[i]); err != nil {
			break
		}
		sent++
	}
	for ; sent > 0; sent-- {
		if _, werr := c.g.Wait(c.done); werr != nil {
			err = werr
			break
		}
	}
	c.results = c.results[:0]
	if err == nil {
		for _, w := range c.where {
			c.results = append(c.results, c.batches[w>>32].Results[uint32(w)])
		}
	}
	for _, i := range c.used {
		b := &c.batches[i]
		clear(b.Ops) // drop references to the connection's buffers
		b.Ops = b.Ops[:0]
	}
	c.used = c.used[:0]
	c.where = c.where[:0]
	return c.results, err
}
