package shard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bucketd/bucketd/internal/decide"
)

// keysOnDistinctShards returns n keys that live on n different shards.
func keysOnDistinctShards(t *testing.T, g *Group, n int) [][]byte {
	t.Helper()
	seen := map[int]bool{}
	var keys [][]byte
	for i := 0; len(keys) < n; i++ {
		k := []byte(fmt.Sprint("key-", i))
		if s, _ := g.route(k); !seen[s] {
			seen[s] = true
			keys = append(keys, k)
		}
		if i > 10_000 {
			t.Fatalf("found only %d shards for %d keys", len(keys), n)
		}
	}
	return keys
}

// TestRunIsolatedIsNeverSeenHalfDone: writers spend one token from each
// of several buckets on different shards in one isolated unit; readers peek
// at all of them in one isolated unit and must always see every bucket at
// the same count. With Run instead of RunIsolated a reader sees the
// buckets between two writers' shards (the test fails).
func TestRunIsolatedIsNeverSeenHalfDone(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	keys := keysOnDistinctShards(t, g, 4)
	const writers, readers, rounds = 4, 4, 300
	var wg sync.WaitGroup
	var torn atomic.Int64
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.NewCaller()
			for range rounds {
				for _, k := range keys {
					c.Add(acquire(string(k), 1e9, 1e-9, 1))
				}
				if _, err := c.RunIsolated(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.NewCaller()
			for range rounds {
				for _, k := range keys {
					c.Add(decide.Request{Kind: decide.Peek, Key: k, Limit: acquire("", 1e9, 1e-9, 1).Limit, Cost: 0})
				}
				res, err := c.RunIsolated()
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range res[1:] {
					if r.Decision.Remaining != res[0].Decision.Remaining {
						torn.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := torn.Load(); n != 0 {
		t.Fatalf("%d readers saw a unit half done", n)
	}
	c := g.NewCaller()
	for _, k := range keys {
		if d := runOne(t, c, acquire(string(k), 1e9, 1e-9, 0)).Decision; d.Remaining != 1e9-writers*rounds {
			t.Fatalf("%s: %d left, want %d", k, d.Remaining, int64(1e9-writers*rounds))
		}
	}
}

// TestUnitIsSeenWholeByLaterRequests: writers spend one token from each of
// several buckets on different shards in one unit; readers peek at the
// buckets one plain call at a time, in order. A reader that saw a unit's
// token gone from one bucket must see it gone from every bucket it reads
// afterwards, so the counts it reads never go up along its reads. (A unit
// whose parts could run before the last is queued fails this: a reader
// sees the first shard's part, then the next shard without it.)
func TestUnitIsSeenWholeByLaterRequests(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	keys := keysOnDistinctShards(t, g, 4)
	const writers, readers, rounds = 4, 4, 400
	var wg sync.WaitGroup
	var torn atomic.Int64
	var writing atomic.Int64
	writing.Store(writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer writing.Add(-1)
			c := g.NewCaller()
			for range rounds {
				for _, k := range keys {
					c.Add(acquire(string(k), 1e9, 1e-9, 1))
				}
				if _, err := c.RunIsolated(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	reads := atomic.Int64{}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.NewCaller()
			for writing.Load() > 0 {
				last := int64(1e9)
				for _, k := range keys {
					d := runOne(t, c, acquire(string(k), 1e9, 1e-9, 0)).Decision
					if d.Remaining > last {
						torn.Add(1)
					}
					last = d.Remaining
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := torn.Load(); n != 0 {
		t.Fatalf("%d of %d rounds of reads saw a unit half done", n, reads.Load())
	}
	if reads.Load() == 0 {
		t.Fatal("no reader finished a round while the writers ran")
	}
}

// TestUnitsAndPlainCallsNeverDeadlock: many units over overlapping shards
// in different orders, mixed with plain pipelines, all finish, and a
// bucket shared by all of them never over-grants.
func TestUnitsAndPlainCallsNeverDeadlock(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	keys := keysOnDistinctShards(t, g, 8)
	const workers, rounds, capacity = 16, 200, 1000
	var granted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.NewCaller()
			for r := range rounds {
				// A different subset and order of shards each round; the
				// shared bucket "hot" is always in it.
				c.Add(acquire("hot", capacity, 1e-9, 1))
				for j := range 3 {
					k := keys[(w+r+j*3)%len(keys)]
					c.Add(acquire(string(k), 1e9, 1e-9, 1))
				}
				run := c.RunIsolated
				if (w+r)%3 == 0 {
					run = c.Run
				}
				res, err := run()
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Decision.Allowed {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() != capacity {
		t.Fatalf("granted %d from a bucket of %d (%d asked)", granted.Load(), capacity, workers*rounds)
	}
}

func TestRunIsolatedSteadyStateAllocatesNothing(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	keys := keysOnDistinctShards(t, g, 4)
	c := g.NewCaller()
	lim := acquire("", 1e12, 1, 1).Limit
	run := func() {
		for _, k := range keys {
			c.Add(decide.Request{Kind: decide.Acquire, Key: k, Limit: lim, Cost: 1})
		}
		if _, err := c.RunIsolated(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if allocs := testing.AllocsPerRun(200, run); allocs != 0 {
		t.Fatalf("RunIsolated allocates %v times per run, want 0", allocs)
	}
}
