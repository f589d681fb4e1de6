package shard

import (
	"bytes"
	"errors"
	"hash/maphash"
	"math/bits"
	"strings"
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
	// Lease, when set, makes the shards lease mode's: they keep lease
	// entries (lease.go) and answer the lease kinds of decide.
	Lease *LeaseConfig
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
	cold   *coldFilter // lease mode's (coldfilter.go); nil otherwise

	closeOnce sync.Once
	wg        sync.WaitGroup // one per shard goroutine
}

// New starts the shards' goroutines. Call Close to stop them.
func New(cfg Config) *Group {
	n := 1 << bits.Len(uint(max(cfg.Shards, 1)-1))
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
		shards: make([]*shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		clock:  cfg.Clock,
		base:   cfg.Base,
	}
	if cfg.Lease != nil {
		g.cold = newColdFilter(cfg.Lease.Policy.DemandWindow())
	}
	for i := range g.shards {
		s := newShard(cfg, n, g.seed, g.cold)
		g.shards[i] = s
		g.wg.Go(func() { s.run(cfg.SweepInterval) })
	}
	return g
}

// Len returns the number of shards.
func (g *Group) Len() int { return len(g.shards) }

// route returns where key lives: the shard, and the key's own hash, whose
// high bits pick its slot in the shard's table. The shard comes from the
// low bits of the hash of the key's hash tag when it has one (the part
// between the first '{' and the next '}', when not empty, as Redis Cluster
// defines it), so keys that share a tag share a shard, and of the key's own
// hash otherwise. Hashing is seeded per process (hash/maphash), so clients
// cannot aim untagged keys at one shard; tagged keys go where their tag
// says, which is the point.
func (g *Group) route(key []byte) (shard int, hash uint64) {
	hash = maphash.Bytes(g.seed, key)
	if tag, ok := hashTag(key); ok {
		return int(maphash.Bytes(g.seed, tag) & g.mask), hash
	}
	return int(hash & g.mask), hash
}

// routeString is route for a key held as a string (maintenance).
func (g *Group) routeString(key string) (shard int, hash uint64) {
	hash = maphash.String(g.seed, key)
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return int(maphash.String(g.seed, key[i+1:i+1+j]) & g.mask), hash
		}
	}
	return int(hash & g.mask), hash
}

// hashTag returns key's hash tag, as Redis Cluster finds it: the bytes
// between the first '{' and the first '}' after it, if there are any.
func hashTag(key []byte) ([]byte, bool) {
	i := bytes.IndexByte(key, '{')
	if i < 0 {
		return nil, false
	}
	j := bytes.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return nil, false
	}
	return key[i+1 : i+1+j], true
}

// submit posts one task to shard i (maintenance, tests).
func (g *Group) submit(i int, t task) error { return g.shards[i].queue.put(t) }

// postAll posts tasks[i] to shard i, for every shard, in one step: it
// holds every queue, taken in ascending order as a Run's post takes them,
// while it appends, so every Run stands before all of these tasks or
// after all of them on the shards it shares with them (Walk's cut). It
// appends nothing once the group is closed.
func (g *Group) postAll(tasks []task) error {
	g.lockAll()
	closed := g.shards[0].queue.closed // Close closes them all in one step
	wake := make([]bool, len(g.shards))
	if !closed {
		for i, s := range g.shards {
			wake[i] = s.queue.pushLocked(tasks[i])
		}
	}
	g.unlockAll()
	if closed {
		return ErrClosed
	}
	for i, s := range g.shards {
		if wake[i] {
			s.queue.ring()
		}
	}
	return nil
}

// lockAll takes every shard's queue in ascending order; unlockAll gives
// them back.
func (g *Group) lockAll() {
	for _, s := range g.shards {
		s.queue.mu.Lock()
	}
}

func (g *Group) unlockAll() {
	for i := len(g.shards) - 1; i >= 0; i-- {
		g.shards[i].queue.mu.Unlock()
	}
}

// Close stops the shards after they have run every task already posted,
// and waits for their goroutines to end. Every later call returns
// ErrClosed; every call posted before is answered (invariant 4 of the
// package doc).
//
// The queues close in one step, all held at once in ascending order as a
// post holds them: closed one after another, a caller that had just met
// ErrClosed on one shard could still be served by another.
func (g *Group) Close() {
	g.closeOnce.Do(func() {
		g.lockAll()
		for _, s := range g.shards {
			s.queue.closed = true
		}
		g.unlockAll()
		for _, s := range g.shards {
			s.queue.ring()
		}
	})
	g.wg.Wait()
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
		st.QueueDepth += int64(s.queue.len())
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
		dst = append(dst, s.queue.len())
	}
	return dst
}

// Limiter returns g as the protocol front sees a bucket store.
func (g *Group) Limiter() decide.Limiter { return limiter{g} }

type limiter struct{ g *Group }

func (l limiter) NewCaller() decide.Caller { return l.g.NewCaller() }
func (l limiter) Stats() decide.Stats      { return l.g.Stats().Stats }
