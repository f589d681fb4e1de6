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
}

func newShard(cfg Config) *shard {
	return &shard{
		queue:    make(chan *Batch, cfg.QueueDepth),
		clock:    cfg.Clock,
		index:    make(map[string]int32),
		sweepMin: cfg.SweepMin,
	}
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
	s.store(op, i, exists, next.Tokens >= op.Limit.Capacity, entry{state: next, limit: op.Limit})
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
// result is full, updates it in place, or creates it.
func (s *shard) store(op *Op, i int32, exists, full bool, e entry) {
	switch {
	case exists && full:
		s.removeAt(i)
	case exists:
		e.key = s.entries[i].key
		s.entries[i] = e
	case !full:
		e.key = string(op.Key) // the one allocation: a new bucket's key
		s.index[e.key] = int32(len(s.entries))
		s.entries = append(s.entries, e)
		s.live.Add(1)
	}
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
