package shard

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

	"github.com/bucketd/bucketd/internal/clock"
	"github.com/bucketd/bucketd/internal/decide"
)

// Config sets up a Group. The zero value of each field picks its default.
type Config struct {
	// Shards is the number of shards, rounded up to a power of two.
	// Default: 1; bucketd passes DefaultShards.
	Shards int
	// QueueDepth bounds each shard's queue of batches. When it is full, a
	// caller waits: back-pressure instead of unbounded memory. Default 1024.
	QueueDepth int
	// SweepInterval is how often each shard examines a slice of its buckets
	// for expiry. Default 10 ms.
	SweepInterval time.Duration
	// SweepMin is the least number of buckets examined per sweep tick; each
	// tick examines max(SweepMin, buckets/256) so that a whole pass takes
	// about 256 ticks (2.6 s at the default interval) whatever the size.
	// Default 256.
	SweepMin int
	// Clock is the time source, and Base ties it to Unix time for the
	// Records and Changes that leave the group. Default: clock.Start().
	Clock clock.Clock
	Base  clock.Base
	// TrackChanges, when > 0, makes every shard remember which keys a
	// spending call, a reset or an eviction changed since the last Collect,
	// up to TrackChanges/shards keys per shard; changes beyond that are
	// dropped and counted (Stats.ChangesDropped). Replication reads them
	// with Collect. 0 turns tracking off: memory mode pays nothing for it.
	TrackChanges int
	// MaxBuckets, when > 0, bounds the live buckets (split evenly over the
	// shards). A new bucket beyond it evicts the bucket, among a random
	// sample, that is closest to full: it carries the least information,
	// and an evicted bucket answers as a full one (fail-open for that key).
	MaxBuckets int
}

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("shard: group closed")

// Group is the set of shards. Its methods are safe for concurrent use; the
// shards' state is only ever touched by their own goroutines.
type Group struct {
	shards []*shard
	mask   uint64
	seed   maphash.Seed
	clock  clock.Clock
	base   clock.Base
	units  units // orders the queueing of units' parts (unit.go)

	closeOnce sync.Once
	closing   chan struct{} // closed by Close: shards drain their queues and stop
	stopped   chan struct{} // closed when every shard goroutine has returned
	wg        sync.WaitGroup
}

// New starts the shards' goroutines. Call Close to stop them.
func New(cfg Config) *Group {
	n := 1 << bits.Len(uint(max(cfg.Shards, 1)-1))
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
		cfg.Clock, cfg.Base = clock.Start()
	}
	g := &Group{
		shards:  make([]*shard, n),
		mask:    uint64(n - 1),
		seed:    maphash.MakeSeed(),
		clock:   cfg.Clock,
		base:    cfg.Base,
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

// Len returns the number of shards.
func (g *Group) Len() int { return len(g.shards) }

// hashKey returns key's hash: its low bits pick the shard, its high bits the
// slot inside the shard's table.
func (g *Group) hashKey(key []byte) uint64 { return maphash.Bytes(g.seed, key) }

// submit hands t to shard i, waiting while that shard's queue is full. Once
// the shards have stopped it returns ErrClosed; a task that slipped into a
// queue during Close may never run, which is why callers wait with wait.
func (g *Group) submit(i int, t task) error {
	select {
	case g.shards[i].queue <- t:
		return nil
	case <-g.stopped:
		return ErrClosed
	}
}

// wait receives the next answered batch from done, or returns ErrClosed if
// the shards stopped before answering.
func (g *Group) wait(done chan *batch) (*batch, error) {
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

// Close stops the shards after they have run every task already in their
// queues, and waits for their goroutines to end. Later calls return
// ErrClosed.
func (g *Group) Close() {
	g.closeOnce.Do(func() { close(g.closing) })
	<-g.stopped
}

// Stats are totals over all shards, read from atomics without stopping them.
type Stats struct {
	decide.Stats
	ChangesPending int64 // changed keys waiting for Collect (TrackChanges)
	ChangesDropped int64 // changes not tracked because a shard's set was full
}

// Stats sums the shards' counters. TableBytes is the memory the bucket
// tables hold: whole pages mapped outside the Go heap on Linux (pages not
// yet touched included), so it is not part of the runtime's heap figures.
func (g *Group) Stats() Stats {
	st := Stats{Stats: decide.Stats{Shards: int64(len(g.shards))}}
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

// QueueDepths appends each shard's current queue length to dst.
func (g *Group) QueueDepths(dst []int) []int {
	for _, s := range g.shards {
		dst = append(dst, len(s.queue))
	}
	return dst
}
