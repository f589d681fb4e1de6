package shard

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
)

// shard is one single-writer partition. Everything except the atomics and
// the queue is owned by the goroutine running run.
type shard struct {
	queue chan *Batch
	clock Clock

	t        *table // the buckets; see table
	seed     maphash.Seed
	cursor   int
	sweepMin int

	live    atomic.Int64
	allowed atomic.Int64
	denied  atomic.Int64
	peeks   atomic.Int64
	resets  atomic.Int64
	expired atomic.Int64
	passes  atomic.Int64 // completed sweeps over the whole shard

	// dirty holds the keys changed since the last Collect; nil when
	// tracking is off. At most dirtyMax keys.
	dirty    map[string]struct{}
	dirtyMax int
	pending  atomic.Int64
	dropped  atomic.Int64

	maxEntries int    // 0: no limit
	rng        uint64 // xorshift state for eviction samples
	evicted    atomic.Int64
}

func newShard(cfg Config, shards int, seed maphash.Seed) *shard {
	s := &shard{
		queue:    make(chan *Batch, cfg.QueueDepth),
		clock:    cfg.Clock,
		t:        newTable(),
		seed:     seed,
		sweepMin: cfg.SweepMin,
	}
	if cfg.TrackChanges > 0 {
		s.dirty = make(map[string]struct{})
		s.dirtyMax = max(1, cfg.TrackChanges/shards)
	}
	if cfg.MaxBuckets > 0 {
		s.maxEntries = max(1, cfg.MaxBuckets/shards)
	}
	s.rng = uint64(time.Now().UnixNano()) | 1
	return s
}

// evictionSample is how many random buckets are compared to choose the one
// to evict, as Redis samples keys for its approximate LRU: the result is
// close to the best choice at a fixed cost.
const evictionSample = 16

// evictOne removes, among a random sample, the bucket that is closest to
// full at now (smallest share of its capacity missing), never entry keep:
// it runs when a new bucket, keep, has just taken the shard past
// MaxBuckets. It returns keep's index afterwards (the last entry moves into
// the evicted one's place).
func (s *shard) evictOne(now int64, keep int32) int32 {
	best, bestMissing := -1, 2.0
	for range evictionSample {
		s.rng ^= s.rng << 13
		s.rng ^= s.rng >> 7
		s.rng ^= s.rng << 17
		i := int(s.rng % uint64(s.t.len()))
		if i == int(keep) {
			continue
		}
		e := &s.t.entries[i]
		missing := 0.0 // a refilled or GCRA-expired bucket: nothing to lose
		if !e.full(now) {
			if e.gcra {
				missing = 0.5 // no token count to compare: rank in the middle
			} else {
				missing = 1 - e.state.TokensAt(e.limit, now)/e.limit.Capacity
			}
		}
		if missing < bestMissing {
			best, bestMissing = i, missing
		}
	}
	if best < 0 { // every sample was keep (a tiny shard): take its neighbour
		best = (int(keep) + 1) % s.t.len()
	}
	if !s.t.entries[best].gcra {
		s.track(-1, s.t.key(&s.t.entries[best])) // the copy in Redis must forget it too
	}
	last := int32(s.t.len() - 1)
	s.removeAt(int32(best))
	s.evicted.Add(1)
	if keep == last {
		keep = int32(best)
	}
	return keep
}

// dump copies every live bucket into b.Changes.
func (s *shard) dump(b *Batch, now int64) {
	for i := range s.t.entries {
		e := &s.t.entries[i]
		if e.full(now) {
			continue
		}
		b.Changes = append(b.Changes, Change{Key: string(s.t.key(e)), State: e.state, Limit: e.limit, At: now, GCRA: e.gcra})
	}
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

// collect moves up to b.collectMax tracked changes into b.Changes. A
// deletion carries the time of the collection: it is at or after the
// deletion itself, and any newer state would still be in memory.
func (s *shard) collect(b *Batch, now int64) {
	for key := range s.dirty {
		if len(b.Changes) >= b.collectMax {
			break
		}
		c := Change{Key: key, At: now}
		i, ok := s.t.find(maphash.String(s.seed, key), []byte(key))
		if ok {
			s.t.entries[i].dirty = false
		}
		if ok && !s.t.entries[i].gcra {
			c.State, c.Limit = s.t.entries[i].state, s.t.entries[i].limit
		} else {
			c.Deleted = true
		}
		b.Changes = append(b.Changes, c)
		delete(s.dirty, key)
	}
	s.pending.Store(int64(len(s.dirty)))
}

// trackAll marks every live bucket changed. It ignores the tracking
// capacity on purpose: a resync must reach every bucket, and the set it
// builds is bounded by the live buckets themselves.
func (s *shard) trackAll() {
	if s.dirty == nil {
		return
	}
	for i := range s.t.entries {
		if e := &s.t.entries[i]; !e.gcra {
			s.dirty[string(s.t.key(e))] = struct{}{}
			e.dirty = true
		}
	}
	s.pending.Store(int64(len(s.dirty)))
}

// load stores a state read back from Redis unless the key already has one:
// anything this process decided since it started is newer.
func (s *shard) load(op *Op) {
	if _, exists := s.t.find(op.hash, op.Key); exists {
		return
	}
	s.store(op, 0, false, false, entry{state: op.State, limit: op.Limit, gcra: op.LoadGCRA})
}

// run is the shard's goroutine: answer batches as they come, sweep on every
// tick, and on closing answer what is still queued before returning.
func (s *shard) run(closing <-chan struct{}, sweepEvery time.Duration) {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case b := <-s.queue:
			s.answer(b)
		case <-tick.C:
			s.sweep(s.clock())
		case <-closing:
			for {
				select {
				case b := <-s.queue:
					s.answer(b)
				default:
					s.t.free() // nothing reads the table once run returns
					return
				}
			}
		}
	}
}

// answer applies every op of b in order at one instant and sends b back.
// Done has room for every batch its caller can have in flight, so the send
// never blocks the shard.
func (s *shard) answer(b *Batch) {
	now := s.clock()
	if cap(b.Results) < len(b.Ops) {
		b.Results = make([]Result, len(b.Ops))
	}
	b.Results = b.Results[:len(b.Ops)]
	var allowed, denied, peeks, resets int64
	for i := range b.Ops {
		op := &b.Ops[i]
		switch op.Kind {
		case Acquire:
			r := s.acquire(op, now)
			b.Results[i] = r
			switch {
			case r.WrongType:
			case r.Decision.Allowed:
				allowed++
			default:
				denied++
			}
		case Peek:
			idx, ok := s.t.find(op.hash, op.Key)
			if ok && s.t.entries[idx].gcra {
				b.Results[i] = Result{WrongType: true}
				continue
			}
			var st bucket.State
			if ok {
				st = s.t.entries[idx].state
			}
			b.Results[i] = Result{Decision: bucket.Peek(st, ok, op.Limit, op.Cost, now)}
			peeks++
		case Load:
			s.load(op)
		case Exists:
			idx, ok := s.t.find(op.hash, op.Key)
			b.Results[i] = Result{Exists: ok && !s.t.entries[idx].full(now)}
		case collectKind:
			s.collect(b, now)
		case trackAllKind:
			s.trackAll()
		case dumpKind:
			s.dump(b, now)
		case Throttle:
			r := s.throttle(op, now)
			b.Results[i] = r
			switch {
			case r.WrongType:
			case r.Throttle.Limited:
				denied++
			default:
				allowed++
			}
		case Reset:
			removed := s.reset(op, now)
			b.Results[i] = Result{Removed: removed}
			if removed {
				resets++
			}
		}
	}
	s.count(allowed, denied, peeks, resets)
	b.Done <- b
}

func (s *shard) count(allowed, denied, peeks, resets int64) {
	if allowed != 0 {
		s.allowed.Add(allowed)
	}
	if denied != 0 {
		s.denied.Add(denied)
	}
	if peeks != 0 {
		s.peeks.Add(peeks)
	}
	if resets != 0 {
		s.resets.Add(resets)
	}
}

// acquire runs one Acquire op and stores the outcome: a bucket left full is
// deleted (or never created), anything else is kept with the op's limit.
func (s *shard) acquire(op *Op, now int64) Result {
	i, exists := s.t.find(op.hash, op.Key)
	var st bucket.State
	if exists {
		if s.t.entries[i].gcra {
			return Result{WrongType: true}
		}
		st = s.t.entries[i].state
	}
	next, d := bucket.Acquire(st, exists, op.Limit, op.Cost, now)
	if op.Cost == 0 {
		return Result{Decision: d} // a peek: nothing stored, nothing created
	}
	if at, changed := s.store(op, i, exists, next.Tokens >= op.Limit.Capacity, entry{state: next, limit: op.Limit}); changed {
		s.track(at, op.Key)
	}
	return Result{Decision: d}
}

// throttle runs one CL.THROTTLE op on a GCRA entry.
func (s *shard) throttle(op *Op, now int64) Result {
	i, exists := s.t.find(op.hash, op.Key)
	var tat int64
	if exists {
		if !s.t.entries[i].gcra {
			return Result{WrongType: true}
		}
		tat = s.t.entries[i].state.Last
	}
	newTat, keep, r := bucket.Throttle(tat, exists, op.Throttle, now*1000)
	s.store(op, i, exists, !keep, entry{state: bucket.State{Last: newTat}, gcra: true})
	return Result{Throttle: r}
}

// store writes e (state and limit) for op.Key: deletes the entry when the
// result is full, updates it in place, or creates it. It returns the
// entry's index afterwards (-1 when there is none) and whether anything was
// or is stored, for change tracking.
func (s *shard) store(op *Op, i int32, exists, full bool, e entry) (int32, bool) {
	switch {
	case exists && full:
		s.removeAt(i)
		return -1, true
	case exists:
		old := &s.t.entries[i]
		e.keyOff, e.keyLen, e.fp, e.dirty = old.keyOff, old.keyLen, old.fp, old.dirty
		*old = e
		return i, true
	case !full:
		at := s.t.insert(op.hash, op.Key, e) // copies the key into the arena
		if at < 0 {
			s.evicted.Add(1) // no room for the key: the bucket answers as full
			return -1, false
		}
		s.live.Add(1)
		// Evict after the insert, so that an insert refused for lack of
		// memory never costs another bucket.
		if s.maxEntries > 0 && s.t.len() > s.maxEntries {
			at = s.evictOne(s.clock(), at)
		}
		return at, true
	}
	return -1, false
}

// reset forgets key and reports whether a bucket existed. A bucket that has
// refilled but not yet been swept is deleted too, but not counted: it had
// logically expired, and Redis DEL does not count expired keys either.
func (s *shard) reset(op *Op, now int64) bool {
	i, ok := s.t.find(op.hash, op.Key)
	if !ok {
		return false
	}
	existed := !s.t.entries[i].full(now)
	if !s.t.entries[i].gcra {
		s.track(-1, op.Key) // the entry goes next: track the key only
	}
	s.removeAt(i)
	if !existed {
		s.expired.Add(1)
	}
	return existed
}

// removeAt deletes entry i; the last entry moves into its place.
func (s *shard) removeAt(i int32) {
	s.t.remove(i)
	s.live.Add(-1)
}

// sweep examines a bounded slice of entries from the cursor and deletes the
// buckets that are full again at now. The work per tick is
// max(sweepMin, len/256), so a full pass takes about 256 ticks whatever the
// shard's size, and one tick never stalls the shard for long.
func (s *shard) sweep(now int64) {
	budget := max(s.sweepMin, s.t.len()/256)
	if s.t.len() == 0 {
		s.passes.Add(1) // an empty shard is swept by definition
	}
	for ; budget > 0 && s.t.len() > 0; budget-- {
		if s.cursor >= s.t.len() {
			s.cursor = 0
			s.passes.Add(1)
		}
		if s.t.entries[s.cursor].full(now) {
			s.removeAt(int32(s.cursor)) // the last entry moves here: look at it next
			s.expired.Add(1)
			continue
		}
		s.cursor++
	}
}
