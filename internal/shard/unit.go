package shard

import (
	"sync"

	"github.com/bucketd/bucketd/internal/decide"
)

// A unit is one piece of work on several shards that no other request may
// interleave with: the commands of a MULTI/EXEC transaction, a TB.MACQUIRE
// whose buckets live on several shards. It keeps the single-writer rule in
// one of two ways.
//
// A unit of independent requests (a transaction) is gated (runGated): each
// shard gets its part as a batch, as in a plain Run, but no part runs
// before every part is queued, and all decide at one instant. Each shard's
// queue is first in, first out, so a request that anyone sends after
// seeing one part's effect is queued behind every other part and sees the
// whole unit; one sent before the unit started is answered before every
// part. The shards go on with their own goroutines; nothing is handed over.
//
// A unit with an all-or-nothing group across shards needs the buckets of
// several shards at one time, so it parks them (parkShards): each shard
// runs a park task, which hands the shard's table to the unit's goroutine
// and blocks the shard's own goroutine until the unit releases it. At
// every instant exactly one goroutine owns a shard's state, and the
// channel hand-overs order every access, so no lock guards bucket state. A
// request on a parked shard simply waits in the shard's queue.
//
// Two units that need overlapping shards must queue their parts in the
// same order on every shard, or each could see the other half done (and
// two parked units would hold a shard the other waits for). Group.units
// orders them: a unit queues all its parts while holding it, and so does a
// plain Run across shards, so that a pipeline, too, sees a unit on all its
// buckets or on none. The mutex is held only while queueing, never while a
// unit runs, and a single-shard Run never touches it: a TB.ACQUIRE outside
// a unit pays nothing for units but one test of its batch's gate.

// park is the task that hands a shard to a unit. It is reused by its
// Caller: parked and release have room for one signal each.
type park struct {
	parked  chan struct{} // the shard has stopped and belongs to the unit
	release chan struct{} // the unit is done: the shard goes on
}

func (p *park) run(*shard) {
	p.parked <- struct{}{}
	<-p.release
}

// units serialises the queueing of batches across shards (units' gated
// batches and park tasks, plain Runs on several shards); see above.
type units struct{ mu sync.Mutex }

// RunIsolated answers every request added since the last Run as one unit:
// in the order they were added, at one instant, so that a request sent
// after any of its answers is seen sees all of it (gated), or with every
// shard parked when a group spans shards. The returned slice is valid
// until the next Run. Requests on a single shard need neither: that
// shard's goroutine already runs them one after another, as a batch.
func (c *Caller) RunIsolated() ([]decide.Answer, error) {
	if len(c.used) <= 1 {
		return c.Run()
	}
	if !c.isolate {
		return c.runGated()
	}
	parked, err := c.parkShards()
	if err == nil {
		c.runParked()
	}
	c.releaseShards(parked)
	return c.finish(err)
}

// runGated answers a unit without groups across shards: one batch per
// shard, all queued (under the units' mutex, so in the same order as any
// other unit's parts) before a signal on each batch's gate lets them run at
// the instant read once the last is queued, or, on a shard that has
// already worked at a later instant (work queued ahead of the part), at
// that one: a shard's time never goes back (shard.last).
func (c *Caller) runGated() ([]decide.Answer, error) {
	g := c.g
	if c.gates == nil {
		c.gates = make([]chan struct{}, len(g.shards))
		for i := range c.gates {
			c.gates[i] = make(chan struct{}, 1)
		}
	}
	g.units.mu.Lock()
	sent := 0
	var err error
	for _, i := range c.used {
		c.batches[i].gate = c.gates[i]
		if err = g.submit(i, &c.batches[i]); err != nil {
			break
		}
		sent++
	}
	g.units.mu.Unlock()
	now := g.clock()
	for _, i := range c.used[:sent] {
		c.batches[i].at = now
		c.gates[i] <- struct{}{} // room for one, taken by each run (while the group runs)
	}
	for k := sent; k > 0; k-- {
		if _, werr := g.wait(c.done); werr != nil {
			err = werr
			break
		}
	}
	for _, i := range c.used {
		c.batches[i].gate = nil
	}
	return c.finish(err)
}

// parkShards parks every shard the queued requests touch and returns how
// many parks were queued (each must be released, parked or not).
func (c *Caller) parkShards() (int, error) {
	g := c.g
	if c.parks == nil {
		c.parks = make([]park, len(g.shards))
		for i := range c.parks {
			c.parks[i] = park{parked: make(chan struct{}, 1), release: make(chan struct{}, 1)}
		}
		c.tallies = make([]tally, len(g.shards))
	}
	g.units.mu.Lock()
	queued := 0
	var err error
	for _, i := range c.used {
		if err = g.submit(i, &c.parks[i]); err != nil {
			break
		}
		queued++
	}
	g.units.mu.Unlock()
	for _, i := range c.used[:queued] {
		if err != nil {
			break
		}
		select {
		case <-c.parks[i].parked:
		case <-g.stopped:
			err = ErrClosed
		}
	}
	return queued, err
}

// runParked answers every queued request, in the order they were added,
// on the parked shards, at one instant.
func (c *Caller) runParked() {
	now := c.g.clock()
	for _, i := range c.used {
		now = max(now, c.g.shards[i].last)
	}
	for _, i := range c.used {
		c.g.shards[i].last = now
		b := &c.batches[i]
		if cap(b.answers) < len(b.ops) {
			b.answers = make([]decide.Answer, len(b.ops))
		}
		b.answers = b.answers[:len(b.ops)]
		c.tallies[i] = tally{}
	}
	for k := 0; k < len(c.where); k++ {
		i, at := c.where[k]>>32, uint32(c.where[k])
		b := &c.batches[i]
		if g := int(b.ops[at].group); g > 1 {
			c.members = c.members[:0]
			for _, w := range c.where[k : k+g] {
				mb := &c.batches[w>>32]
				c.members = append(c.members, member{s: c.g.shards[w>>32], o: &mb.ops[uint32(w)], a: &mb.answers[uint32(w)]})
			}
			acquireAll(c.members, now, &c.tallies[i])
			k += g - 1
			continue
		}
		b.answers[at] = c.g.shards[i].answer(&b.ops[at], now, &c.tallies[i])
	}
	for _, i := range c.used {
		c.g.shards[i].count(c.tallies[i])
	}
}

// releaseShards lets the first n shards of c.used go on. After ErrClosed a
// park may never have run and keeps its release signal; the Caller is of
// no further use then anyway.
func (c *Caller) releaseShards(n int) {
	for _, i := range c.used[:n] {
		c.parks[i].release <- struct{}{}
	}
}
