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
// them, each a few bytes: 768 KiB in all):
//   - entries counts the lease entries whose keys fall in the slot, moved
//     by the shards as they make and forget entries. A key whose slot
//     counts none has no entry anywhere.
//   - seen remembers the last first call of a key without an entry in the
//     slot: the upper 24 bits of its hash, the millisecond it came (mod
//     2^24, 4.6 hours) and its cost (the upper half of its float32), so that
//     the key's second call within the demand window is sent to its shard,
//     which makes the entry then (leases.firstCall).
type coldFilter struct {
	entries []atomic.Int32
	seen    []atomic.Uint64
	window  int64 // the demand window, ms (at least 1)
}

// filterSlots is the number of slots of the cold filter: a hot key's
// second call finds its first remembered unless a cold key of the same
// slot came in between.
const filterSlots = 1 << 16

// seenTime masks the millisecond of a seen slot (bits 16-39).
const seenTime = 1<<24 - 1

func newColdFilter(windowUs int64) *coldFilter {
	return &coldFilter{
		entries: make([]atomic.Int32, filterSlots),
		seen:    make([]atomic.Uint64, filterSlots),
		window:  max(1, (windowUs+999)/1000),
	}
}

func slotOf(hash uint64) uint64 { return hash & (filterSlots - 1) }

// firstCall reports whether the key of hash was asked without an entry
// within the window before nowUs, and when (forgetting that call);
// otherwise it remembers this call as the key's first. The shards call it
// for a key without an entry. Safe for concurrent use: two racing calls of
// one slot may both read as first, which costs only a later entry.
func (f *coldFilter) firstCall(hash uint64, cost float64, nowUs int64) (at int64, firstCost float64, ok bool) {
	slot := &f.seen[slotOf(hash)]
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
func (f *coldFilter) made(hash uint64)   { f.entries[slotOf(hash)].Add(1) }
func (f *coldFilter) forgot(hash uint64) { f.entries[slotOf(hash)].Add(-1) }

// AddLeaseTake queues r, a decide.LeaseTake, unless its key has no lease
// entry and this is its first call within the demand window: then it
// remembers the call (the key's second goes to the shard, which makes the
// entry), queues nothing, sets r.Lease.Outcome to lease.Cold and reports
// true, and the caller sends Redis a plain acquire without the shard.
// Outside lease mode it is Add.
func (c *Caller) AddLeaseTake(r decide.Request) (cold bool) {
	i, h := c.g.route(r.Key)
	if f := c.g.cold; f != nil && f.entries[slotOf(h)].Load() == 0 {
		slot, now := &f.seen[slotOf(h)], c.g.clock()
		if _, _, second := f.recent(slot, h, now); !second {
			f.remember(slot, h, r.Cost, now)
			r.Lease.Outcome = lease.Cold
			return true
		}
	}
	c.add(r, i, h)
	return false
}
