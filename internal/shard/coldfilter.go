package shard

import (
	"math"
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
)

// coldFilter lets a connection in lease mode send a key's first call
// straight to Redis, without a visit to the key's shard: a cold key (asked
// once) is lease mode's one Redis call, as in store mode, and at pipeline
// depth 1 the shard's wake-up cost it a fifth of its CPU. It is shared by
// the shards and every Caller, and only advisory: a lease entry is still
// the shard's alone, and a call sent to Redis without its shard is a plain
// acquire, which Redis answers exactly as store mode does (it takes no
// lease, and Redis counts every lease held). So a stale reading costs a
// Redis call (a key with a new entry sent plain) or a shard visit (a key
// without one sent to its shard), never a grant.
//
// Its slots are picked by the low bits of a key's hash (filterSlots of
// them, 16 bytes each: 1 MiB in all). A slot's two fields share a cache
// line, so a cold key's call reads one line of the table, not two: at
// -P 16 on keys each asked once, the filter was most of what lease mode
// added to a cold key's CPU in bucketd.
type coldFilter struct {
	slots  []coldSlot
	window int64 // the demand window, ms (at least 1)
}

// coldSlot is one slot of the cold filter.
type coldSlot struct {
	// seen remembers the last first call of a key without an entry in the
	// slot: the upper 24 bits of its hash, the millisecond it came (mod
	// 2^24, 4.6 hours) and its cost (the upper half of its float32), so
	// that the key's second call within the demand window is sent to its
	// shard, which makes the entry then (leases.firstCall).
	seen atomic.Uint64
	// entries counts the lease entries whose keys fall in the slot, moved
	// by the shards as they make and forget entries. A key whose slot
	// counts none has no entry anywhere.
	entries atomic.Int32
	_       int32 // 16 bytes a slot: four to a cache line, none across two
}

// filterSlots is the number of slots of the cold filter: a hot key's
// second call finds its first remembered unless a cold key of the same
// slot came in between.
const filterSlots = 1 << 16

// seenTime masks the millisecond of a seen slot (bits 16-39).
const seenTime = 1<<24 - 1

func newColdFilter(windowUs int64) *coldFilter {
	return &coldFilter{
		slots:  make([]coldSlot, filterSlots),
		window: max(1, (windowUs+999)/1000),
	}
}

func slotOf(hash uint64) uint64 { return hash & (filterSlots - 1) }

// firstCall reports whether the key of hash was asked without an entry
// within the window before nowUs, and when (forgetting that call);
// otherwise it remembers this call as the key's first. The shards call it
// for a key without an entry. Safe for concurrent use: two racing calls of
// one slot may both read as first, which costs only a later entry.
func (f *coldFilter) firstCall(hash uint64, cost float64, nowUs int64) (at int64, firstCost float64, ok bool) {
	slot := &f.slots[slotOf(hash)].seen
	if v, ago, ok := f.recent(slot, hash, nowUs); ok {
		slot.CompareAndSwap(v, 0)
		return nowUs - ago*1000, float64(math.Float32frombits(uint32(v&0xffff) << 16)), true
	}
	f.remember(slot, hash, cost, nowUs)
	return 0, 0, false
}

// recent reports whether slot holds a call of the key of hash within the
// window before nowUs, ago ms before it; v is the slot's value.
func (f *coldFilter) recent(slot *atomic.Uint64, hash uint64, nowUs int64) (v uint64, ago int64, ok bool) {
	v = slot.Load()
	if v == 0 || v>>40 != hash>>40 {
		return v, 0, false
	}
	ago = int64((uint64(nowUs/1000) - v>>16) & seenTime)
	return v, ago, ago < f.window
}

func (f *coldFilter) remember(slot *atomic.Uint64, hash uint64, cost float64, nowUs int64) {
	c := uint64(math.Float32bits(float32(cost)) >> 16)
	slot.Store(hash>>40<<40 | (uint64(nowUs/1000)&seenTime)<<16 | c)
}

// made and forgot move the count of the entries of hash's slot; only the
// shards call them, as they make and forget entries.
func (f *coldFilter) made(hash uint64)   { f.slots[slotOf(hash)].entries.Add(1) }
func (f *coldFilter) forgot(hash uint64) { f.slots[slotOf(hash)].entries.Add(-1) }

// BatchClock is the group's clock read at most once for a batch of lease
// takes (AddLeaseTakes), and only if one of them needs it: the cold
// filter counts in milliseconds, and a clock reading cost a cold key's
// call as much as the filter itself. Its zero value is unread; Reset it
// between batches. Owned by one Caller's user.
type BatchClock struct {
	us   int64
	read bool
}

// Reset makes the next reading read the clock again.
func (b *BatchClock) Reset() { b.read = false }

func (b *BatchClock) now(g *Group) int64 {
	if !b.read {
		b.us, b.read = g.clock(), true
	}
	return b.us
}

// AddLeaseTakes queues each request of rs, a decide.LeaseTake, in order,
// unless its key has no lease entry and this is its first call within the
// demand window: then it remembers the call (the key's second goes to the
// shard, which makes the entry), queues nothing, sets its Lease.Outcome to
// lease.Cold and cold[k] (cold has len(rs) elements), and the caller sends
// Redis a plain acquire without the shard. clk is the time of the
// caller's batch (BatchClock). Outside lease mode it queues them all.
//
// It reads the cold filter's slots of all the requests before it decides
// any, so that the memory reads of a pipeline overlap instead of each
// waiting for the last: at -P 16 on keys asked once, that one read per
// key, a miss in a table of 1 MiB that every connection writes, was most
// of the CPU lease mode adds to a cold key's call.
func (c *Caller) AddLeaseTakes(rs []*decide.Request, cold []bool, clk *BatchClock) {
	c.takeShard, c.takeHash = c.takeShard[:0], c.takeHash[:0]
	for _, r := range rs {
		i, h := c.g.route(r.Key)
		c.takeShard, c.takeHash = append(c.takeShard, i), append(c.takeHash, h)
	}
	f := c.g.cold
	c.takeNoEntry = c.takeNoEntry[:0]
	for _, h := range c.takeHash {
		c.takeNoEntry = append(c.takeNoEntry, f != nil && f.slots[slotOf(h)].entries.Load() == 0)
	}
	for k, r := range rs {
		cold[k] = c.takeRouted(*r, c.takeShard[k], c.takeHash[k], c.takeNoEntry[k], clk)
	}
}

// takeRouted decides r, routed to shard i by its key's hash h, as
// AddLeaseTakes says; noEntry: the key's slot of the cold filter counted
// no entry. It reports whether r is cold.
func (c *Caller) takeRouted(r decide.Request, i int, h uint64, noEntry bool, clk *BatchClock) (cold bool) {
	if noEntry {
		f := c.g.cold
		seen, nowUs := &f.slots[slotOf(h)].seen, clk.now(c.g)
		if _, _, second := f.recent(seen, h, nowUs); !second {
			f.remember(seen, h, r.Cost, nowUs)
			r.Lease.Outcome = lease.Cold
			return true
		}
	}
	c.add(r, i, h)
	return false
}
