package shard

import (
	"hash/maphash"

	"github.com/bucketd/bucketd/internal/bucket"
)

// Maintenance: what replication and snapshots ask of the shards. Each is a
// typed method on Group that runs a call on the owning shard's goroutine,
// through the same queue as client batches, so it sees every request
// answered before it, and never touches bucket state from outside.

// call is a maintenance task: fn runs on the shard's goroutine with the
// shard's clock read once.
type call struct {
	fn   func(s *shard, now int64)
	done chan struct{}
}

func (c *call) run(s *shard) {
	c.fn(s, s.tick())
	close(c.done)
}

// on runs fn on shard i's goroutine, after every task posted before it,
// and waits for it. What fn writes is visible to the caller afterwards.
// A posted call always runs, even after Close (invariant 4).
func (g *Group) on(i int, fn func(s *shard, now int64)) error {
	c := &call{fn: fn, done: make(chan struct{})}
	if err := g.submit(i, c); err != nil {
		return err
	}
	<-c.done
	return nil
}

// Restore stores the records (a snapshot's, or the Redis copy's) where
// they are newer than what the shards hold: for keys with no state yet,
// and for keys whose state was itself loaded and is older (the state's
// time decides; see restore). A state decided since the start is always
// kept, so a load retried while clients are served changes no key they
// used. It returns how many records it stored. Restored buckets are not
// tracked as changes: the state came from where it would be written to.
func (g *Group) Restore(recs []Record) (int, error) {
	byShard := make([][]int, len(g.shards))
	for i := range recs {
		s, _ := g.routeString(recs[i].Key)
		byShard[s] = append(byShard[s], i)
	}
	stored := 0
	for si, idx := range byShard {
		if len(idx) == 0 {
			continue
		}
		err := g.on(si, func(s *shard, now int64) {
			for _, i := range idx {
				if s.restore(&recs[i], now) {
					stored++
				}
			}
		})
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// restore stores r unless the shard's state for its key wins: a state
// decided since the start, a loaded state at least as new, or any
// CL.THROTTLE state (their copies come from snapshots only, so there is
// never a second one to compare). A newer record that is full by now
// deletes the older state, which would otherwise say the key is not full.
func (s *shard) restore(r *Record, now int64) bool {
	e := r.entry(s.base)
	e.restored = true
	key := []byte(r.Key)
	h := maphash.Bytes(s.seed, key)
	i, exists := s.t.find(h, key)
	if !exists {
		if e.full(now) {
			return false
		}
		_, stored := s.insert(h, key, e)
		return stored
	}
	old := &s.t.entries[i]
	if !old.restored || old.kind != TokenBucket || e.kind != TokenBucket || e.last <= old.last {
		return false
	}
	if e.full(now) {
		s.removeAt(i)
		return false
	}
	s.overwrite(i, e)
	return true
}

// Live reports, for each key, whether it has a bucket that is not full:
// how replication finds keys its Redis copy holds and memory does not.
func (g *Group) Live(keys []string) ([]bool, error) {
	live := make([]bool, len(keys))
	byShard := make([][]int, len(g.shards))
	hashes := make([]uint64, len(keys))
	for i, k := range keys {
		var s int
		s, hashes[i] = g.routeString(k)
		byShard[s] = append(byShard[s], i)
	}
	for si, idx := range byShard {
		if len(idx) == 0 {
			continue
		}
		err := g.on(si, func(s *shard, now int64) {
			for _, i := range idx {
				e, ok := s.t.find(hashes[i], []byte(keys[i]))
				live[i] = ok && !s.t.entries[e].full(now)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return live, nil
}

// Change is the current state of one key that changed since the last
// Collect: the state to write, or Deleted when the key no longer has a
// bucket (reset, evicted, or refilled to full by a call). Times are Unix
// microseconds; At is when the change was collected, at or after the change
// itself, which is the time a deletion carries.
type Change struct {
	Key     string
	State   bucket.State
	Limit   bucket.Limit
	At      int64
	Deleted bool
}

// Collect moves up to max of shard i's tracked changes into dst and returns
// it; an empty result means the shard has none. Safe for concurrent use
// with everything but itself on the same shard.
func (g *Group) Collect(i int, dst []Change, max int) ([]Change, error) {
	dst = dst[:0]
	err := g.on(i, func(s *shard, now int64) { dst = s.collect(dst, max, now) })
	return dst, err
}

func (s *shard) collect(dst []Change, max int, now int64) []Change {
	at := s.base.UnixMicros(now)
	for key := range s.dirty {
		if len(dst) >= max {
			break
		}
		c := Change{Key: key, At: at, Deleted: true}
		i, ok := s.t.find(maphash.String(s.seed, key), []byte(key))
		if ok {
			e := &s.t.entries[i]
			e.dirty = false
			if e.replicated() {
				r := e.record(nil, s.base)
				c.State, c.Limit, c.Deleted = r.State, r.Limit, false
			}
		}
		dst = append(dst, c)
		delete(s.dirty, key)
	}
	s.pending.Store(int64(len(s.dirty)))
	return dst
}

// track records that key changed; i is its entry, or -1 when the key no
// longer has one (deleted). The key is copied into the set only the first
// time it changes between two collections, and the entry's dirty flag
// spares every later change of a hot key the set lookup.
func (s *shard) track(i int32, key []byte) {
	if s.dirty == nil {
		return
	}
	if i >= 0 && s.t.entries[i].dirty {
		return
	}
	if _, ok := s.dirty[string(key)]; !ok {
		if len(s.dirty) >= s.dirtyMax {
			s.dropped.Add(1)
			return
		}
		s.dirty[string(key)] = struct{}{}
		s.pending.Add(1)
	}
	if i >= 0 {
		s.t.entries[i].dirty = true
	}
}

// TrackAll marks every live replicated bucket of every shard as changed,
// so the next Collects hand out the whole state: how replication catches
// up after it had to drop changes, or after its Redis restarted empty. It
// ignores the tracking capacity on purpose: a resync must reach every
// bucket, and the set it builds is bounded by the live buckets themselves.
func (g *Group) TrackAll() error {
	for i := range g.shards {
		if err := g.on(i, func(s *shard, _ int64) { s.trackAll() }); err != nil {
			return err
		}
	}
	return nil
}

func (s *shard) trackAll() {
	if s.dirty == nil {
		return
	}
	for i := range s.t.entries {
		if e := &s.t.entries[i]; e.replicated() {
			s.dirty[string(s.t.key(e))] = struct{}{}
			e.dirty = true
		}
	}
	s.pending.Store(int64(len(s.dirty)))
}
