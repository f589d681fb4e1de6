package shard

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/clock"
	"github.com/bucketd/bucketd/internal/decide"
)

// task is what travels on a shard's queue: a client batch, or a
// maintenance call (maintain.go). Both run on the shard's goroutine, in the
// order they were queued.
type task interface{ run(s *shard) }

// shard is one single-writer partition. Everything except the atomics and
// the queue is owned by the goroutine running run.
type shard struct {
	queue *queue
	clock clock.Clock
	base  clock.Base

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

	// dirty holds the keys changed since the last Collect; nil when
	// tracking is off. At most dirtyMax keys.
	dirty    map[string]struct{}
	dirtyMax int
	pending  atomic.Int64
	dropped  atomic.Int64

	maxEntries int    // 0: no limit
	rng        uint64 // xorshift state for eviction samples
	evicted    atomic.Int64

	walk *walk // the snapshot walk in progress (walk.go); nil when none
	// phase is what entry.phase holds once the walk in progress has
	// handed the entry out; each cut flips it (walk.go).
	phase bool

	leases      *leases      // lease mode's entries (lease.go); nil in the other modes
	leaseCount  atomic.Int64 // entries holding a lease
	leaseTokens LeaseCounts  // the tokens its leases moved

	// last is the latest instant the shard has worked at: tick never
	// returns an earlier one, so a bucket deleted at one instant is never
	// recreated at an earlier one (its refill would count twice), whatever
	// the clock does.
	last int64
}

// sweepTick is what the shard does on each tick of its sweep timer.
func (s *shard) sweepTick() {
	now := s.tick()
	s.sweep(now)
	if s.leases != nil {
		s.leaseSweep(now, s.sweepMin)
	}
}

// tick reads the shard's clock and remembers the reading as its latest
// instant. Every instant the shard works at comes from here, read once at
// the start of each task (batch.run, call.run, sweepTick); what runs
// within the task works at that instant, s.last, and never reads the
// clock again: a batch may wait long at a vote, and a later reading in
// its middle would let it delete a bucket at one instant and recreate it
// at the earlier one.
func (s *shard) tick() int64 {
	s.last = max(s.last, s.clock())
	return s.last
}

func newShard(cfg Config, shards int, seed maphash.Seed, cold *coldFilter) *shard {
	s := &shard{
		queue:    newQueue(),
		clock:    cfg.Clock,
		base:     cfg.Base,
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
	if cfg.Lease != nil {
		s.leases = &leases{cfg: *cfg.Lease, m: make(map[uint64]*keyEntry), cold: cold}
	}
	s.rng = uint64(time.Now().UnixNano()) | 1
	return s
}

// run is the shard's goroutine: run what is posted, all that waits at
// once, and sweep on every tick, also between rounds of a busy queue.
// Once the queue is closed and empty it frees the table and returns.
func (s *shard) run(sweepEvery time.Duration) {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	var spare []task
	for {
		tasks, closed := s.queue.take(spare)
		if closed {
			s.t.free() // nothing reads the table once run returns
			return
		}
		if len(tasks) == 0 {
			select {
			case <-s.queue.wake:
			case <-tick.C:
				s.sweepTick()
			}
			continue
		}
		for _, t := range tasks {
			t.run(s)
		}
		clear(tasks) // drop the references to answered batches
		spare = tasks
		if cap(spare) > maxSpareTasks {
			spare = nil // a burst of connections is over: do not keep its list
		}
		select {
		case <-tick.C:
			s.sweepTick()
		default:
		}
	}
}

// maxSpareTasks is the longest task list a shard keeps for reuse.
const maxSpareTasks = 4096

// tally counts one batch's outcomes, added to the shard's atomics once.
type tally struct{ allowed, denied, peeks, resets int64 }

func (t *tally) decided(allowed bool) {
	if allowed {
		t.allowed++
	} else {
		t.denied++
	}
}

// run answers every request of b in order, at one instant, and sends b
// back. The members of an all-or-nothing group are answered together: by
// this shard alone when the group lives here, or with a vote of every
// shard the group spans (vote.go).
func (b *batch) run(s *shard) {
	now := s.tick()
	if cap(b.answers) < len(b.ops) {
		b.answers = make([]decide.Answer, len(b.ops))
	}
	b.answers = b.answers[:len(b.ops)]
	var n tally
	for i := 0; i < len(b.ops); i++ {
		o := &b.ops[i]
		if o.group == 0 {
			b.answers[i] = s.answer(o, now, &n)
			continue
		}
		k := int(o.group)
		ops, answers := b.ops[i:i+k], b.answers[i:i+k]
		if o.vote == nil {
			s.acquireAll(ops, answers, now, &n)
		} else {
			s.acquireVoted(ops, answers, o.vote, now, &n)
		}
		i += k - 1
	}
	s.count(n)
	b.done <- b
}

// answer runs one client request at now: the one place the shards look at
// a request's kind (a table of functions would cost an allocation: the
// tally would escape through the indirect call).
func (s *shard) answer(o *op, now int64, n *tally) decide.Answer {
	switch o.Kind {
	case decide.Acquire:
		return s.acquire(o, now, n)
	case decide.Peek:
		return s.peek(o, now, n)
	case decide.Reset:
		return s.reset(o, now, n)
	case decide.Throttle:
		return s.throttle(o, now, n)
	case decide.LeaseTake:
		if s.leases != nil {
			return s.leaseTake(o, now, n)
		}
	case decide.LeaseApply:
		if s.leases != nil {
			return s.leaseApply(o, now)
		}
	case decide.LeaseFail:
		if s.leases != nil {
			return s.leaseFail(o)
		}
	case decide.LeaseReset:
		if s.leases != nil {
			return s.leaseReset(o)
		}
	}
	return decide.Answer{Err: decide.ErrUnsupported}
}

func (s *shard) count(n tally) {
	if n.allowed != 0 {
		s.allowed.Add(n.allowed)
	}
	if n.denied != 0 {
		s.denied.Add(n.denied)
	}
	if n.peeks != 0 {
		s.peeks.Add(n.peeks)
	}
	if n.resets != 0 {
		s.resets.Add(n.resets)
	}
}

// find returns the entry of o's key, or ok=false; a key of the other kind
// is reported as wrongType.
func (s *shard) find(o *op, want Kind) (i int32, ok, wrongType bool) {
	i, ok = s.t.find(o.hash, o.Key)
	if ok && s.t.entries[i].kind != want {
		return i, true, true
	}
	return i, ok, false
}

// tokenBucket finds o's token bucket: its entry and state, or exists=false
// for a key with no bucket (which is full). A key holding a CL.THROTTLE
// state gives decide.ErrWrongType.
func (s *shard) tokenBucket(o *op) (i int32, st bucket.State, exists bool, err error) {
	i, exists, wrong := s.find(o, TokenBucket)
	switch {
	case wrong:
		return i, st, false, decide.ErrWrongType
	case exists:
		st = s.t.entries[i].bucketState()
	}
	return i, st, exists, nil
}

// acquire spends tokens and stores the outcome: a bucket left full is
// deleted (or never created), anything else is kept with the request's
// limit.
func (s *shard) acquire(o *op, now int64, n *tally) decide.Answer {
	i, st, exists, err := s.tokenBucket(o)
	if err != nil {
		return decide.Answer{Err: err}
	}
	next, d := bucket.Acquire(st, exists, o.Limit, o.Cost, now)
	n.decided(d.Allowed)
	if o.Cost == 0 {
		return decide.Answer{Decision: d} // a peek: nothing stored, nothing created
	}
	full := next.Tokens >= o.Limit.Capacity
	if at, changed := s.store(o, i, exists, full, tokenEntry(next, o.Limit)); changed {
		s.track(at, o.Key)
	}
	return decide.Answer{Decision: d}
}

// peek answers what acquire would, changing nothing.
func (s *shard) peek(o *op, now int64, n *tally) decide.Answer {
	_, st, exists, err := s.tokenBucket(o)
	if err != nil {
		return decide.Answer{Err: err}
	}
	n.peeks++
	return decide.Answer{Decision: bucket.Peek(st, exists, o.Limit, o.Cost, now)}
}

// throttle runs one CL.THROTTLE on a GCRA entry.
func (s *shard) throttle(o *op, now int64, n *tally) decide.Answer {
	i, exists, wrong := s.find(o, GCRA)
	if wrong {
		return decide.Answer{Err: decide.ErrWrongType}
	}
	var tat int64
	if exists {
		tat = s.t.entries[i].tat()
	}
	newTat, keep, r := bucket.Throttle(tat, exists, o.Quota, clock.Nanos(now))
	n.decided(!r.Limited)
	s.store(o, i, exists, !keep, gcraEntry(newTat))
	return decide.Answer{Throttle: r}
}

// store writes e for o.Key: deletes the entry when the result is full,
// updates it in place, or creates it. It returns the entry's index
// afterwards (-1 when there is none) and whether anything was or is
// stored, for change tracking.
func (s *shard) store(o *op, i int32, exists, full bool, e entry) (int32, bool) {
	switch {
	case exists && full:
		s.removeAt(i)
		return -1, true
	case exists:
		s.overwrite(i, e)
		return i, true
	case !full:
		return s.insert(o.hash, o.Key, e)
	}
	return -1, false
}

// overwrite stores e's state in entry i, which keeps its key, its place
// in the change set and its phase; a walk that has yet to reach the entry
// keeps its state at the cut first (walk.go).
func (s *shard) overwrite(i int32, e entry) {
	s.changing(i)
	old := &s.t.entries[i]
	e.keyOff, e.keyLen, e.fp, e.dirty, e.phase = old.keyOff, old.keyLen, old.fp, old.dirty, old.phase
	*old = e
}

// insert creates the entry e for key. When the shard then holds more than
// its share of MaxBuckets, another bucket is evicted: after the insert, so
// that an insert refused for lack of memory never costs another bucket. A
// new entry is newer than any cut in progress: the walk leaves it out.
func (s *shard) insert(hash uint64, key []byte, e entry) (int32, bool) {
	e.phase = s.phase
	at := s.t.insert(hash, key, e) // copies the key into the arena
	if at < 0 {
		s.evicted.Add(1) // no room for the key: the bucket answers as full
		return -1, false
	}
	s.live.Add(1)
	if s.maxEntries > 0 && s.t.len() > s.maxEntries {
		at = s.evictOne(s.last, at) // the task's instant (see tick)
	}
	return at, true
}

// reset forgets the key and reports whether a bucket existed. A bucket that
// has refilled but not yet been swept is deleted too, but not counted: it
// had logically expired, and Redis DEL does not count expired keys either.
func (s *shard) reset(o *op, now int64, n *tally) decide.Answer {
	i, ok := s.t.find(o.hash, o.Key)
	if !ok {
		return decide.Answer{}
	}
	e := &s.t.entries[i]
	existed := !e.full(now)
	if e.replicated() {
		s.track(-1, o.Key) // the entry goes next: track the key only
	}
	s.removeAt(i)
	if !existed {
		s.expired.Add(1)
		return decide.Answer{}
	}
	n.resets++
	return decide.Answer{Removed: true}
}

// removeAt deletes entry i; the last entry moves into its place. A walk
// in progress keeps the state at its cut of an entry it has yet to reach
// that goes, and of one that moves to where it has been (walk.go).
func (s *shard) removeAt(i int32) {
	s.changing(i)
	if w := s.walk; w != nil && int(i) < w.cursor {
		s.changing(int32(s.t.len() - 1))
	}
	s.t.remove(i)
	s.live.Add(-1)
}

// sweep examines a bounded slice of entries from the cursor and deletes the
// buckets that are full again at now. The work per tick is
// max(sweepMin, len/256), so a full pass takes about 256 ticks whatever the
// shard's size, and one tick never stalls the shard for long.
func (s *shard) sweep(now int64) {
	budget := max(s.sweepMin, s.t.len()/256)
	for ; budget > 0 && s.t.len() > 0; budget-- {
		if s.cursor >= s.t.len() {
			s.cursor = 0
		}
		if s.t.entries[s.cursor].full(now) {
			s.removeAt(int32(s.cursor)) // the last entry moves here: look at it next
			s.expired.Add(1)
			continue
		}
		s.cursor++
	}
}

// evictionSample is how many random buckets are compared to choose the one
// to evict, as Redis samples keys for its approximate LRU: the result is
// close to the best choice at a fixed cost.
const evictionSample = 16

// evictOne removes, among a random sample, the bucket that would lose the
// least (entry.missingShare), never entry keep: it runs when a new bucket,
// keep, has just taken the shard past MaxBuckets. It returns keep's index
// afterwards (the last entry moves into the evicted one's place).
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
		if missing := s.t.entries[i].missingShare(now); missing < bestMissing {
			best, bestMissing = i, missing
		}
	}
	if best < 0 { // every sample was keep (a tiny shard): take its neighbour
		best = (int(keep) + 1) % s.t.len()
	}
	if e := &s.t.entries[best]; e.replicated() {
		s.track(-1, s.t.key(e)) // the copy in Redis must forget it too
	}
	last := int32(s.t.len() - 1)
	s.removeAt(int32(best))
	s.evicted.Add(1)
	if keep == last {
		keep = int32(best)
	}
	return keep
}
