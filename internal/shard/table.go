package shard

import (
	"bytes"
	"math"
	"sync/atomic"
)

// table is one shard's bucket storage, laid out so that the garbage
// collector has nothing to scan however many buckets there are: entries
// hold no pointers, keys live in one byte arena, and the index is an
// open-addressing table of uint64 slots (linear probing, backward-shift
// deletion, no tombstones). About 48 bytes of entry, 8–16 of slot and the
// key's own bytes per bucket.
//
// Keys are compared in full on every lookup: two keys whose hashes collide
// never share a bucket, which a cache could tolerate and a limiter cannot.
//
// Entries stay dense, so the sweeper walks them with a cursor; deleting
// moves the last entry into the hole.
//
// The three arrays are allocated outside the Go heap where the platform
// allows (offheap_linux.go): memory per bucket is then the bytes above and
// not twice that while the GC catches up. Call free when the shard stops.
type table struct {
	slots   []uint64 // 0 empty; else uint64(fp)<<32 | (entry index + 1)
	mask    uint64
	entries []entry
	arena   []byte
	garbage int // arena bytes of deleted keys

	// held is the memory the three arrays hold (mapped, whole pages),
	// updated when one of them is reallocated; read by Stats from other
	// goroutines.
	held atomic.Int64
}

const minSlots = 64

func newTable() *table {
	slots, ok := offAlloc[uint64](minSlots)
	if !ok {
		panic("shard: cannot map the first 4 KiB of a bucket table")
	}
	t := &table{slots: slots, mask: minSlots - 1}
	t.account()
	return t
}

// account records the memory held after an array was reallocated.
func (t *table) account() {
	t.held.Store(offSize(t.slots) + offSize(t.entries) + offSize(t.arena))
}

// free releases the table's memory; the table must not be used afterwards.
func (t *table) free() {
	offFree(t.slots)
	offFree(t.entries)
	offFree(t.arena)
	t.slots, t.entries, t.arena, t.mask, t.garbage = nil, nil, nil, 0, 0
	t.account()
}

func (t *table) len() int { return len(t.entries) }

func (t *table) key(e *entry) []byte {
	return t.arena[e.keyOff : e.keyOff+e.keyLen : e.keyOff+e.keyLen]
}

func home(fp uint32, mask uint64) uint64 { return uint64(fp) & mask }

// find returns the index of key's entry (hash is the key's 64-bit hash).
func (t *table) find(hash uint64, key []byte) (int32, bool) {
	fp := uint32(hash >> 32)
	for pos := home(fp, t.mask); ; pos = (pos + 1) & t.mask {
		s := t.slots[pos]
		if s == 0 {
			return 0, false
		}
		if uint32(s>>32) == fp {
			i := int32(uint32(s) - 1)
			if bytes.Equal(t.key(&t.entries[i]), key) {
				return i, true
			}
		}
	}
}

// insert adds e under key, which must not be present, and returns its
// index, or -1 when there is no room: the key arena cannot address one more
// key (4 GiB of keys in one shard) or the kernel refuses more memory. The
// bucket is then not stored and answers as full.
func (t *table) insert(hash uint64, key []byte, e entry) int32 {
	if uint64(len(t.arena))+uint64(len(key)) > math.MaxUint32 {
		t.compactArena()
		if uint64(len(t.arena))+uint64(len(key)) > math.MaxUint32 {
			return -1
		}
	}
	if (len(t.entries)+1)*4 > len(t.slots)*3 && !t.resize(len(t.slots)*2) &&
		(len(t.entries)+1)*16 > len(t.slots)*15 {
		return -1 // cannot grow, and too full to keep probe runs short
	}
	if len(t.arena)+len(key) > cap(t.arena) {
		arena, ok := offResize(t.arena, max(2*cap(t.arena), len(t.arena)+len(key), 4096))
		if !ok {
			return -1
		}
		t.arena = arena
		t.account()
	}
	if len(t.entries) == cap(t.entries) {
		entries, ok := offResize(t.entries, max(2*cap(t.entries), 64))
		if !ok {
			return -1
		}
		t.entries = entries
		t.account()
	}
	e.fp = uint32(hash >> 32)
	e.keyOff, e.keyLen = uint32(len(t.arena)), uint32(len(key))
	t.arena = append(t.arena, key...) // within capacity: never reallocates
	i := int32(len(t.entries))
	t.entries = append(t.entries, e)
	t.place(e.fp, i)
	return i
}

func (t *table) place(fp uint32, i int32) {
	pos := home(fp, t.mask)
	for t.slots[pos] != 0 {
		pos = (pos + 1) & t.mask
	}
	t.slots[pos] = uint64(fp)<<32 | uint64(uint32(i)+1)
}

// slotOf returns the position of the slot that points at entry i.
func (t *table) slotOf(i int32) uint64 {
	want := uint64(uint32(i) + 1)
	for pos := home(t.entries[i].fp, t.mask); ; pos = (pos + 1) & t.mask {
		if t.slots[pos]&0xffffffff == want {
			return pos
		}
	}
}

// remove deletes entry i: its slot by backward shift, its place in entries
// by moving the last entry into it.
func (t *table) remove(i int32) {
	t.deleteSlot(t.slotOf(i))
	t.garbage += int(t.entries[i].keyLen)
	last := int32(len(t.entries) - 1)
	if i != last {
		pos := t.slotOf(last)
		t.slots[pos] = t.slots[pos]&^0xffffffff | uint64(uint32(i)+1)
		t.entries[i] = t.entries[last]
	}
	t.entries = t.entries[:last]
	t.shrinkIfSparse()
}

// deleteSlot empties pos and shifts back the entries of the probe run after
// it that may move, so that lookups never need tombstones.
func (t *table) deleteSlot(pos uint64) {
	for {
		t.slots[pos] = 0
		next := pos
		for {
			next = (next + 1) & t.mask
			s := t.slots[next]
			if s == 0 {
				return
			}
			h := home(uint32(s>>32), t.mask)
			// The entry at next may fill the hole at pos unless its home
			// lies cyclically in (pos, next].
			if (next > pos && (h <= pos || h > next)) || (next < pos && h <= pos && h > next) {
				t.slots[pos] = s
				pos = next
				break
			}
		}
	}
}

// resize rebuilds the slot array with n slots (a power of two). It reports
// false, leaving the table as it was, when the memory is refused.
func (t *table) resize(n int) bool {
	slots, ok := offAlloc[uint64](n)
	if !ok {
		return false
	}
	offFree(t.slots)
	t.slots, t.mask = slots, uint64(n-1)
	for i := range t.entries {
		t.place(t.entries[i].fp, int32(i))
	}
	t.account()
	return true
}

// shrinkIfSparse gives memory back after most buckets have gone: the slot
// table shrinks, and the arena is rewritten once deleted keys fill half of
// it. Both are O(live buckets), paid for by the deletions before them.
func (t *table) shrinkIfSparse() {
	if len(t.slots) > minSlots && len(t.entries)*8 < len(t.slots) {
		t.resize(max(minSlots, len(t.slots)/4))
	}
	if t.garbage > 64<<10 && t.garbage*2 > len(t.arena) {
		t.compactArena()
	}
	if c := cap(t.entries); c > 1024 && len(t.entries) < c/4 {
		t.entries, _ = offResize(t.entries, c/2) // kept as is if refused
		t.account()
	}
}

// compactArena rewrites the arena without the keys of deleted entries. If
// the memory for the new arena is refused the old one stays.
func (t *table) compactArena() {
	fresh, ok := offAlloc[byte](len(t.arena) - t.garbage)
	if !ok {
		return
	}
	fresh = fresh[:0]
	for i := range t.entries {
		e := &t.entries[i]
		k := t.key(e)
		e.keyOff = uint32(len(fresh))
		fresh = append(fresh, k...) // within capacity
	}
	offFree(t.arena)
	t.arena, t.garbage = fresh, 0
	t.account()
}
