package shard

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
)

// Kind says what an Op does to its bucket.
type Kind uint8

const (
	// Acquire spends Op.Cost tokens if the bucket holds them (TB.ACQUIRE).
	Acquire Kind = iota
	// Peek answers what Acquire would, changing nothing (TB.PEEK).
	Peek
	// Reset forgets the bucket (TB.RESET); Result.Removed says whether it existed.
	Reset
	// Throttle runs redis-cell's CL.THROTTLE with Op.Throttle.
	Throttle
	// Load stores Op.State with Op.Limit unless the key already has state:
	// how a restarted bucketd takes its buckets back from Redis.
	Load
	// Exists reports in Result.Exists whether the key has state that is not
	// full yet: how replication finds stale keys in Redis.
	Exists
)

// Op is one operation on one bucket. Key is only read until the Batch that
// carries the Op is answered, so it may point into a connection's read
// buffer; the shard copies it when it creates a bucket.
type Op struct {
	Key      []byte
	Limit    bucket.Limit
	Cost     float64
	Throttle bucket.GCRA  // for Kind Throttle
	State    bucket.State // for Kind Load
	LoadGCRA bool         // for Kind Load: State.Last is a CL.THROTTLE TAT
	Kind     Kind

	hash uint64 // of Key, set by Caller.Add: picks the shard and the slot
}

// Result is the answer to one Op.
type Result struct {
	Decision bucket.Decision       // for Acquire and Peek
	Throttle bucket.ThrottleResult // for Throttle
	Removed  bool                  // for Reset: the bucket existed and was removed
	Exists   bool                  // for Exists
	// WrongType: the key holds a CL.THROTTLE state and the op is a token
	// bucket one, or the other way round. Nothing was changed.
	WrongType bool
	// Err, from a store that can fail (Redis), replaces the answer with an
	// error reply: the text after "-" (e.g. "ERR ..."). A store with a
	// fail-open or fail-closed policy answers Decision instead and leaves
	// Err empty. The memory shards never set it.
	Err string
}

// Batch carries all of one caller's operations for one shard in one message,
// and brings the answers back in the same message. Results[i] answers Ops[i].
// The shard sends the Batch on Done when it has answered it; Done must have
// room, so that a caller that is slow to receive never blocks a shard.
type Batch struct {
	Ops     []Op
	Results []Result
	Done    chan *Batch

	Changes    []Change // filled by a Collect batch
	collectMax int
}

// Internal kinds for the replication hooks; they never come from a client.
const (
	collectKind Kind = 100 + iota
	trackAllKind
	dumpKind
)

// Clock returns the current time in microseconds. It must never go
// backwards; the shards read it once per batch.
type Clock func() int64

// MonotonicClock returns a Clock that counts microseconds since the call,
// on the process's monotonic clock, immune to wall-clock steps.
func MonotonicClock() Clock {
	start := time.Now()
	return func() int64 { return int64(time.Since(start) / time.Microsecond) }
}

// Config sets up a Group. The zero value of each field picks its default.
type Config struct {
	// Shards is the number of shards, rounded up to a power of two.
	// Default: 2 × GOMAXPROCS as given by the caller in DefaultShards.
	Shards int
	// QueueDepth bounds each shard's queue of batches. When it is full, a
	// caller's Submit waits: back-pressure instead of unbounded memory.
	// Default 1024.
	QueueDepth int
	// SweepInterval is how often each shard examines a slice of its buckets
	// for expiry. Default 10 ms.
	SweepInterval time.Duration
	// SweepMin is the least number of buckets examined per sweep tick; each
	// tick examines max(SweepMin, buckets/256) so that a whole pass takes
	// about 256 ticks (2.6 s at the default interval) whatever the size.
	// Default 256.
	SweepMin int
	// Clock is the time source; default MonotonicClock().
	Clock Clock
	// TrackChanges, when > 0, makes every shard remember which keys a
	// spending call, a reset or a load changed since the last Collect, up to
	// TrackChanges/shards keys per shard; changes beyond that are dropped
	// and counted (Stats.ChangesDropped). Replication reads them with
	// Collect. 0 turns tracking off: memory mode pays nothing for it.
	TrackChanges int
	// MaxBuckets, when > 0, bounds the live buckets (split evenly over the
	// shards). A new bucket beyond it evicts the bucket, among a random
	// sample, that is closest to full: it carries the least information,
	// and an evicted bucket answers as a full one (fail-open for that key).
	MaxBuckets int
}

// Change is the current state of one key that changed since the last
// Collect: the state to write, or Deleted when the key no longer has state
// (reset, or refilled to full by a call). At is when it changed, in
// microseconds on the shard clock; a deletion carries no State.
type Change struct {
	Key     string
	State   bucket.State
	Limit   bucket.Limit
	At      int64
	Deleted bool
	GCRA    bool // a CL.THROTTLE key: State.Last is its TAT in nanoseconds (Dump only)
}

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("shard: group closed")

// Group is the set of shards. Its methods are safe for concurrent use; the
// shards' state is only ever touched by their own goroutines.
type Group struct {
	shards []*shard
	mask   uint64
	seed   maphash.Seed

	closeOnce sync.Once
	closing   chan struct{} // closed by Close: shards drain their queues and stop
	stopped   chan struct{} // closed when every shard goroutine has returned
	wg        sync.WaitGroup
}

// New starts the shards' goroutines. Call Close to stop them.
func New(cfg Config) *Group {
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	n := 1 << bits.Len(uint(cfg.Shards-1))
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = 1024
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Millisecond
	}
	if cfg.SweepMin <= 0 {
		cfg.SweepMin = 256
	}
	if cfg.Clock == nil {
		cfg.Clock = MonotonicClock()
	}
	g := &Group{
		shards:  make([]*shard, n),
		mask:    uint64(n - 1),
		seed:    maphash.MakeSeed(),
		closing: make(chan struct{}),
		stopped: make(chan struct{}),
	}
	for i := range g.shards {
		s := newShard(cfg, n, g.seed)
		g.shards[i] = s
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			s.run(g.closing, cfg.SweepInterval)
		}()
	}
	go func() {
		g.wg.Wait()
		close(g.stopped)
	}()
	return g
}

// DefaultShards returns the default shard count for gomaxprocs processors:
// twice as many shards as processors, so that one hot shard leaves room for
// the others, and few enough that a pipeline touches few shards.
func DefaultShards(gomaxprocs int) int {
	return max(1, 2*gomaxprocs)
}

// Len returns the number of shards.
func (g *Group) Len() int { return len(g.shards) }

// ShardOf returns the index of the shard that owns key.
func (g *Group) ShardOf(key []byte) int {
	return int(maphash.Bytes(g.seed, key) & g.mask)
}

// hashKey returns key's hash: its low bits pick the shard, its high bits the
// slot inside the shard's table.
func (g *Group) hashKey(key []byte) uint64 { return maphash.Bytes(g.seed, key) }

// Submit hands b to shard i. It waits while that shard's queue is full. The
// shard answers every Op and then sends b on b.Done. Once the shards have
// stopped, Submit returns ErrClosed; a batch that slipped into a queue during
// Close may never be answered, which is why callers wait with Wait.
func (g *Group) Submit(i int, b *Batch) error {
	select {
	case g.shards[i].queue <- b:
		return nil
	case <-g.stopped:
		return ErrClosed
	}
}

// Wait receives the next answered batch from done, or returns ErrClosed if
// the shards stopped before answering.
func (g *Group) Wait(done chan *Batch) (*Batch, error) {
	select {
	case b := <-done:
		return b, nil
	case <-g.stopped:
		select {
		case b := <-done: // answered just before the stop
			return b, nil
		default:
			return nil, ErrClosed
		}
	}
}

// Close stops the shards after they have answered every batch already in
// their queues, and waits for their goroutines to end. Callers should stop
// submitting first; Submit after Close returns ErrClosed.
func (g *Group) Close() {
	g.closeOnce.Do(func() { close(g.closing) })
	<-g.stopped
}

// Stats are totals over all shards, read from atomics without stopping them.
type Stats struct {
	Buckets    int64 // live buckets (DBSIZE)
	Allowed    int64 // acquires allowed
	Denied     int64 // acquires denied
	Peeks      int64 // peeks answered
	Resets     int64 // buckets removed by TB.RESET
	Expired    int64 // full buckets deleted by the sweeper
	QueueDepth int64 // batches waiting in shard queues right now

	ChangesPending int64 // changed keys waiting for Collect (TrackChanges)
	ChangesDropped int64 // changes not tracked because a shard's set was full
	Evicted        int64 // buckets evicted to stay within MaxBuckets

	// TableBytes is the memory the bucket tables hold: whole pages mapped
	// outside the Go heap on Linux (pages not yet touched included), so it
	// is not part of the runtime's heap figures.
	TableBytes int64
}

// Stats sums the shards' counters.
func (g *Group) Stats() Stats {
	var st Stats
	for _, s := range g.shards {
		st.Buckets += s.live.Load()
		st.Allowed += s.allowed.Load()
		st.Denied += s.denied.Load()
		st.Peeks += s.peeks.Load()
		st.Resets += s.resets.Load()
		st.Expired += s.expired.Load()
		st.QueueDepth += int64(len(s.queue))
		st.ChangesPending += s.pending.Load()
		st.ChangesDropped += s.dropped.Load()
		st.Evicted += s.evicted.Load()
		st.TableBytes += s.t.held.Load()
	}
	return st
}

// Dump appends every live bucket of shard i (refilled ones excluded) to dst,
// for snapshots. It copies the whole shard in one batch: a pause of the
// shard proportional to its size (tens of milliseconds per million buckets).
func (g *Group) Dump(i int, dst []Change) ([]Change, error) {
	b := &Batch{Ops: []Op{{Kind: dumpKind}}, Done: make(chan *Batch, 1), Changes: dst}
	if err := g.Submit(i, b); err != nil {
		return dst, err
	}
	if _, err := g.Wait(b.Done); err != nil {
		return dst, err
	}
	return b.Changes, nil
}

// Collect moves up to max of shard i's tracked changes into dst and returns
// it; an empty result means the shard has none. It travels through the
// shard's queue like any batch, so it sees every operation answered before
// it. Safe for concurrent use with everything but itself on the same shard.
func (g *Group) Collect(i int, dst []Change, max int) ([]Change, error) {
	b := &Batch{Ops: []Op{{Kind: collectKind}}, Done: make(chan *Batch, 1), Changes: dst[:0], collectMax: max}
	if err := g.Submit(i, b); err != nil {
		return dst[:0], err
	}
	if _, err := g.Wait(b.Done); err != nil {
		return dst[:0], err
	}
	return b.Changes, nil
}

// TrackAll marks every live key of every shard as changed, so the next
// Collects hand out the whole state: how replication catches up after it
// had to drop changes. It may exceed the tracking capacity, up to the number
// of live buckets.
func (g *Group) TrackAll() error {
	for i := range g.shards {
		b := &Batch{Ops: []Op{{Kind: trackAllKind}}, Done: make(chan *Batch, 1)}
		if err := g.Submit(i, b); err != nil {
			return err
		}
		if _, err := g.Wait(b.Done); err != nil {
			return err
		}
	}
	return nil
}

// QueueDepths appends each shard's current queue length to dst.
func (g *Group) QueueDepths(dst []int) []int {
	for _, s := range g.shards {
		dst = append(dst, len(s.queue))
	}
	return dst
}
