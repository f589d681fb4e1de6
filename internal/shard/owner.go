package shard

import (
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
)

// entry is one live bucket. The limit of its last spending call is kept so
// the sweeper can tell when the bucket is full again.
type entry struct {
	key   string
	state bucket.State // for a GCRA entry, state.Last is the TAT in nanoseconds
	limit bucket.Limit
	gcra  bool // a CL.THROTTLE key
}

// full reports whether the entry holds no information any more at now
// (microseconds): a token bucket refilled to capacity, or a GCRA whose
// theoretical arrival time has passed.
func (e *entry) full(now int64) bool {
	if e.gcra {
		return e.state.Last <= now*1000
	}
	return e.state.IsFull(e.limit, now)
}

// shard is one single-writer partition. Everything except the atomics and
// the queue is owned by the goroutine running run.
type shard struct {
	queue chan *Batch
	clock Clock

	// index maps a key to its position in entries. Entries are kept dense
	// so the sweeper can walk them with a cursor and delete by swapping
	// the last entry into the hole.
	index    map[string]int32
	entries  []entry
	cursor   int
	sweepMin int

	live    atomic.Int64
	allowed atomic.Int64
	denied  atomic.Int64
	peeks   atomic.Int64
	resets  atomic.Int64
	expired atomic.Int64
	passes  atomic.Int64 // completed sweeps over the whole shard

	// dirty holds the keys changed since the last Collect and when; nil
	// when tracking is off. At most dirtyMax keys.
	dirty    map[string]int64
	dirtyMax int
	pending  atomic.Int64
	dropped  atomic.Int64

	maxEntries int    // 0: no limit
	rng        uint64 // xorshift state for eviction samples
	evicted    atomic.Int64
}

func newShard(cfg Config, shards int) *shard {
	s := &shard{
		queue:    make(chan *Batch, cfg.QueueDepth),
		clock:    cfg.Clock,
		index:    make(map[string]int32),
		sweepMin: cfg.SweepMin,
	}
	if cfg.TrackChanges > 0 {
		s.dirty = make(map[string]int64)
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
// full at now (smallest share of its capacity missing). It runs only when a
// new bucket would exceed MaxBuckets.
func (s *shard) evictOne(now int64) {
	best, bestMissing := -1, 2.0
	for range evictionSample {
		s.rng ^= s.rng << 13
		s.rng ^= s.rng >> 7
		s.rng ^= s.rng << 17
		i := int(s.rng % uint64(len(s.entries)))
		e := &s.entries[i]
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
	if !s.entries[best].gcra {
		s.track(s.entries[best].key, now) // the copy in Redis must forget it too
	}
	s.removeAt(int32(best))
	s.evicted.Add(1)
}

// dump copies every live bucket into b.Changes.
func (s *shard) dump(b *Batch, now int64) {
	for i := range s.entries {
		e := &s.entries[i]
		if e.full(now) {
			continue
		}
		b.Changes = append(b.Changes, Change{Key: e.key, State: e.state, Limit: e.limit, At: now, GCRA: e.gcra})
	}
}

// track records that key changed at now. The key string is the entry's own
// (or, for a deleted key, the one the entry had), so tracking allocates
// nothing but map growth.
func (s *shard) track(key string, now int64) {
	if s.dirty == nil {
		return
	}
	if _, ok := s.dirty[key]; !ok {
		if len(s.dirty) >= s.dirtyMax {
			s.dropped.Add(1)
			return
		}
		s.pending.Add(1)
	}
	s.dirty[key] = now
}

// collect moves up to b.collectMax tracked changes into b.Changes.
func (s *shard) collect(b *Batch) {
	for key, at := range s.dirty {
		if len(b.Changes) >= b.collectMax {
			break
		}
		c := Change{Key: key, At: at}
		if i, ok := s.index[key]; ok && !s.entries[i].gcra {
			c.State, c.Limit = s.entries[i].state, s.entries[i].limit
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
func (s *shard) trackAll(now int64) {
	if s.dirty == nil {
		return
	}
	for i := range s.entries {
		if !s.entries[i].gcra {
			s.dirty[s.entries[i].key] = now
		}
	}
	s.pending.Store(int64(len(s.dirty)))
}

// load stores a state read back from Redis unless the key already has one:
// anything this process decided since it started is newer.
func (s *shard) load(op *Op) {
	if _, exists := s.index[string(op.Key)]; exists {
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
			idx, ok := s.index[string(op.Key)]
			if ok && s.entries[idx].gcra {
				b.Results[i] = Result{WrongType: true}
				continue
			}
			var st bucket.State
			if ok {
				st = s.entries[idx].state
			}
			b.Results[i] = Result{Decision: bucket.Peek(st, ok, op.Limit, op.Cost, now)}
			peeks++
		case Load:
			s.load(op)
		case Exists:
			idx, ok := s.index[string(op.Key)]
			b.Results[i] = Result{Exists: ok && !s.entries[idx].full(now)}
		case collectKind:
			s.collect(b)
		case trackAllKind:
			s.trackAll(now)
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
			removed := s.reset(op.Key, now)
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
// The map lookups with string(op.Key) do not allocate: the compiler
// special-cases them.
func (s *shard) acquire(op *Op, now int64) Result {
	i, exists := s.index[string(op.Key)]
	var st bucket.State
	if exists {
		if s.entries[i].gcra {
			return Result{WrongType: true}
		}
		st = s.entries[i].state
	}
	next, d := bucket.Acquire(st, exists, op.Limit, op.Cost, now)
	if op.Cost == 0 {
		return Result{Decision: d} // a peek: nothing stored, nothing created
	}
	key := s.store(op, i, exists, next.Tokens >= op.Limit.Capacity, entry{state: next, limit: op.Limit})
	if key != "" {
		s.track(key, now)
	}
	return Result{Decision: d}
}

// throttle runs one CL.THROTTLE op on a GCRA entry.
func (s *shard) throttle(op *Op, now int64) Result {
	i, exists := s.index[string(op.Key)]
	var tat int64
	if exists {
		if !s.entries[i].gcra {
			return Result{WrongType: true}
		}
		tat = s.entries[i].state.Last
	}
	newTat, keep, r := bucket.Throttle(tat, exists, op.Throttle, now*1000)
	s.store(op, i, exists, !keep, entry{state: bucket.State{Last: newTat}, gcra: true})
	return Result{Throttle: r}
}

// store writes e (state and limit) for op.Key: deletes the entry when the
// result is full, updates it in place, or creates it. It returns the key as
// a string it did not have to allocate ("" when nothing was or is stored),
// for change tracking.
func (s *shard) store(op *Op, i int32, exists, full bool, e entry) string {
	switch {
	case exists && full:
		key := s.entries[i].key
		s.removeAt(i)
		return key
	case exists:
		e.key = s.entries[i].key
		s.entries[i] = e
		return e.key
	case !full:
		if s.maxEntries > 0 && len(s.entries) >= s.maxEntries {
			s.evictOne(s.clock())
		}
		e.key = string(op.Key) // the one allocation: a new bucket's key
		s.index[e.key] = int32(len(s.entries))
		s.entries = append(s.entries, e)
		s.live.Add(1)
		return e.key
	}
	return ""
}

// reset forgets key and reports whether a bucket existed. A bucket that has
// refilled but not yet been swept is deleted too, but not counted: it had
// logically expired, and Redis DEL does not count expired keys either.
func (s *shard) reset(key []byte, now int64) bool {
	i, ok := s.index[string(key)]
	if !ok {
		return false
	}
	existed := !s.entries[i].full(now)
	if !s.entries[i].gcra {
		s.track(s.entries[i].key, now)
	}
	s.removeAt(i)
	if !existed {
		s.expired.Add(1)
	}
	return existed
}

// removeAt deletes entries[i] by moving the last entry into its place.
func (s *shard) removeAt(i int32) {
	last := int32(len(s.entries) - 1)
	delete(s.index, s.entries[i].key)
	if i != last {
		s.entries[i] = s.entries[last]
		s.index[s.entries[i].key] = i
	}
	s.entries[last] = entry{} // drop the key string for the GC
	s.entries = s.entries[:last]
	s.live.Add(-1)
	// Give memory back after a large shard has mostly expired.
	if c := cap(s.entries); c > 1024 && len(s.entries) < c/4 {
		s.entries = append(make([]entry, 0, c/2), s.entries...)
	}
}

// sweep examines a bounded slice of entries from the cursor and deletes the
// buckets that are full again at now. The work per tick is
// max(sweepMin, len/256), so a full pass takes about 256 ticks whatever the
// shard's size, and one tick never stalls the shard for long.
func (s *shard) sweep(now int64) {
	budget := max(s.sweepMin, len(s.entries)/256)
	if len(s.entries) == 0 {
		s.passes.Add(1) // an empty shard is swept by definition
	}
	for ; budget > 0 && len(s.entries) > 0; budget-- {
		if s.cursor >= len(s.entries) {
			s.cursor = 0
			s.passes.Add(1)
		}
		if s.entries[s.cursor].full(now) {
			s.removeAt(int32(s.cursor)) // the last entry moves here: look at it next
			s.expired.Add(1)
			continue
		}
		s.cursor++
	}
}
