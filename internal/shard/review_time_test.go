package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/testkit"
)

// keysOnShard returns n keys that live on shard i, named prefix and a number.
func keysOnShard(t *testing.T, g *Group, i, n int, prefix string) [][]byte {
	t.Helper()
	var keys [][]byte
	for k := 0; len(keys) < n; k++ {
		key := []byte(fmt.Sprint(prefix, k))
		if shardOfKey(g, key) == i {
			keys = append(keys, key)
		}
		if k > 100_000 {
			t.Fatalf("found only %d keys on shard %d", len(keys), i)
		}
	}
	return keys
}

// TestReviewEvictionInAVotedBatchNeverDecidesLater: a batch decides at the
// instant it read when it began (invariant 3), and a batch that holds a
// group across shards may wait long at the vote. The insert that takes a
// shard past its share of MaxBuckets must choose the bucket to evict at
// that same instant: chosen at a later reading, it can evict a bucket that
// is full only by then, and the batch's next request recreates that bucket
// at the batch's earlier instant, as if it had been full then too: the
// refill between the two instants is granted twice (invariant 3's bug,
// through evictOne's own clock reading).
//
// Shard A holds Y (empty at t0, full at t0+10 s) and three buckets Z (half
// full at t0, 0.6 full at t0+10 s), its share of MaxBuckets. A Run's batch
// on A begins at t0, waits at the vote while shard B is held and the clock
// moves 10 s, then creates N (a fifth bucket, so one must go) and spends 1
// from Y. At t0 Y is empty and the Zs are the closest to full: a Z must go,
// and Y must refuse. The scenario runs three times: Y is in the eviction
// sample (16 draws over four candidates) with probability 0.99 each time.
func TestReviewEvictionInAVotedBatchNeverDecidesLater(t *testing.T) {
	for round := range 3 {
		evictionRound(t, round)
	}
}

// evictionRound is one round of TestReviewEvictionInAVotedBatchNeverDecidesLater.
func evictionRound(t *testing.T, round int) {
	clk := testkit.NewClock()
	h := &hookedClock{clk: clk, read: make(chan int64, 1)}
	g := New(Config{Shards: 2, MaxBuckets: 8, SweepInterval: time.Hour, Clock: h.now, Base: clk.Base()})
	defer g.Close()
	keys := keysOnDistinctShards(t, g, 2)
	a, b := shardOfKey(g, keys[0]), shardOfKey(g, keys[1])
	onA := keysOnShard(t, g, a, 5, "a-")
	y, zs, n := onA[0], onA[1:4], onA[4]
	kB := keys[1]
	req := func(k []byte, rate, cost float64) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: k, Limit: bucket.Limit{Capacity: 10, Rate: rate}, Cost: cost}
	}
	c := g.NewCaller()
	c.Add(req(y, 1, 10)) // empty at t0, full at t0+10 s
	for _, z := range zs {
		c.Add(req(z, 0.1, 5)) // half full at t0, 6 of 10 at t0+10 s
	}
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if live := g.Stats().Buckets; live != 4 {
		t.Fatalf("%d live buckets, want 4 (Y and three Z on shard A)", live)
	}
	releaseB := hold(t, g, b)
	h.armed.Store(true) // B is held, sweeps are off: the next reading is A's, for the batch
	type res struct {
		a   []decide.Answer
		err error
	}
	done := make(chan res, 1)
	u := g.NewCaller()
	go func() {
		u.AddAll([]decide.Request{req(n, 1, 1), req(kB, 1, 1)})
		u.Add(req(y, 1, 1))
		ans, err := u.Run()
		done <- res{append([]decide.Answer(nil), ans...), err}
	}()
	select {
	case <-h.read: // A read t0 for the batch, and waits at the vote
	case <-time.After(2 * time.Second):
		t.Fatal("shard A did not begin the batch within 2 s")
	}
	h.armed.Store(false)
	clk.Advance(10 * time.Second)
	releaseB()
	var r res
	select {
	case r = <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the Run did not return within 2 s of releasing B")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.a[0].Decision.Allowed || !r.a[1].Decision.Allowed {
		t.Fatalf("round %d: the group on N and kB was refused: %+v", round, r.a[:2])
	}
	if d := r.a[2].Decision; d.Allowed {
		t.Errorf("round %d: Y, empty at the batch's instant, granted 1 (%+v): the eviction chose at a later instant "+
			"and evicted Y as full then, and the batch recreated it at its earlier instant", round, d)
	}
}

// newProbeGroup is newTestGroup for probes of hangs: its cleanup waits at
// most 5 s for Close, and fails the test instead of hanging it when a
// shard is stuck.
func newProbeGroup(t *testing.T, cfg Config) (*Group, *testkit.Clock) {
	t.Helper()
	clk := testkit.NewClock()
	if cfg.Clock == nil {
		cfg.Clock, cfg.Base = clk.Now, clk.Base()
	}
	g := New(cfg)
	t.Cleanup(func() {
		if !within(5*time.Second, g.Close) {
			t.Error("Close did not return within 5 s: a shard is stuck")
		}
	})
	return g, clk
}
