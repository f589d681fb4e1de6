package shard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/testkit"
)

func newTestGroup(t *testing.T, cfg Config) (*Group, *testkit.Clock) {
	t.Helper()
	clk := testkit.NewClock()
	if cfg.Clock == nil {
		cfg.Clock, cfg.Base = clk.Now, clk.Base()
	}
	g := New(cfg)
	t.Cleanup(g.Close)
	return g, clk
}

func acquire(key string, capacity, rate, cost float64) decide.Request {
	return decide.Request{Kind: decide.Acquire, Key: []byte(key), Limit: bucket.Limit{Capacity: capacity, Rate: rate}, Cost: cost}
}

func runOne(t *testing.T, c *Caller, op decide.Request) decide.Answer {
	t.Helper()
	c.Add(op)
	res, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func TestShardCountIsPowerOfTwo(t *testing.T) {
	for in, want := range map[int]int{0: 1, 1: 1, 3: 4, 4: 4, 5: 8, 16: 16} {
		g := New(Config{Shards: in})
		if g.Len() != want {
			t.Errorf("Shards %d: got %d shards, want %d", in, g.Len(), want)
		}
		g.Close()
	}
}

func TestCallerKeepsOrderAcrossShards(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	c := g.NewCaller()
	// Key i gets capacity i+1 and spends 1, so its remaining count is i:
	// the answers identify their op whatever shard served it.
	for i := range 100 {
		c.Add(acquire(fmt.Sprintf("key-%d", i), float64(i+1), 1, 1))
	}
	res, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 100 {
		t.Fatalf("got %d results, want 100", len(res))
	}
	for i, r := range res {
		if !r.Decision.Allowed || r.Decision.Remaining != int64(i) {
			t.Fatalf("result %d = %+v, want allowed with %d remaining", i, r.Decision, i)
		}
	}
	if st := g.Stats(); st.Buckets != 100 || st.Allowed != 100 || st.Denied != 0 {
		t.Fatalf("stats %+v, want 100 live buckets and 100 allowed", st)
	}
}

func TestSameKeyInOneBatchIsSequential(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 4})
	c := g.NewCaller()
	for range 5 {
		c.Add(acquire("k", 3, 1, 1))
	}
	c.Add(decide.Request{Kind: decide.Reset, Key: []byte("k")})
	c.Add(decide.Request{Kind: decide.Reset, Key: []byte("k")})
	c.Add(acquire("k", 3, 1, 1))
	res, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, r := range res[:5] {
		got += fmt.Sprint(r.Decision.Allowed, r.Decision.Remaining, " ")
	}
	if want := "true 2 true 1 true 0 false 0 false 0 "; got != want {
		t.Fatalf("decisions %q, want %q", got, want)
	}
	if !res[5].Removed || res[6].Removed {
		t.Fatalf("reset twice: removed %v then %v, want true then false", res[5].Removed, res[6].Removed)
	}
	if d := res[7].Decision; !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after reset: %+v, want a full bucket again", d)
	}
}

// TestConcurrentAcquiresNeverOverGrant is docs/commands.md's Atomicity at the shard
// level: 2 × capacity acquires on one key from many goroutines at one
// instant allow exactly capacity.
func TestConcurrentAcquiresNeverOverGrant(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	const capacity, workers, perWorker = 500, 50, 20 // 1000 = 2 × capacity
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.NewCaller()
			for range perWorker {
				c.Add(acquire("hot", capacity, 1, 1))
				res, err := c.Run()
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
		t.Fatalf("granted %d of %d, want exactly %d (the clock did not move)", granted.Load(), workers*perWorker, capacity)
	}
}

func TestPeekAndCostZeroCreateNothing(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 2})
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 5, Rate: 1}
	d := runOne(t, c, decide.Request{Kind: decide.Peek, Key: []byte("p"), Limit: lim, Cost: 2}).Decision
	if !d.Allowed || d.Remaining != 3 {
		t.Fatalf("peek on a new key: %+v", d)
	}
	runOne(t, c, acquire("p", 5, 1, 0))
	runOne(t, c, decide.Request{Kind: decide.Peek, Key: []byte("p"), Limit: bucket.Limit{Capacity: 1, Rate: 1}, Cost: 1})
	if n := g.Stats().Buckets; n != 0 {
		t.Fatalf("peek and cost 0 created %d buckets", n)
	}
}

func TestFullBucketsAreDeletedAndSweptOnlyWhenFull(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 4, SweepInterval: time.Hour})
	c := g.NewCaller()
	for i := range 1000 {
		c.Add(acquire(fmt.Sprint("k", i), 10, 2, 4)) // 6 left: full again after 2 s
	}
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if n := g.Stats().Buckets; n != 1000 {
		t.Fatalf("live buckets %d, want 1000", n)
	}
	clk.Advance(1999 * time.Millisecond)
	sweepEveryEntry(t, g)
	if n := g.Stats().Buckets; n != 1000 {
		t.Fatalf("a bucket not yet full was swept: %d live", n)
	}
	clk.Advance(time.Millisecond)
	sweepEveryEntry(t, g)
	if n := g.Stats().Buckets; n != 0 {
		t.Fatalf("%d buckets full again were not swept", n)
	}
	if st := g.Stats(); st.Expired != 1000 {
		t.Fatalf("expired %d, want 1000", st.Expired)
	}
	// A call that leaves a bucket full deletes it at once.
	runOne(t, c, acquire("x", 10, 1, 1))
	clk.Advance(time.Second)
	runOne(t, c, acquire("x", 10, 1, 0.0000001)) // refilled to 10, takes a sliver: not full
	runOne(t, c, decide.Request{Kind: decide.Reset, Key: []byte("x")})
	if n := g.Stats().Buckets; n != 0 {
		t.Fatalf("live %d after reset", n)
	}
}

// sweepEveryEntry runs the sweeper on every shard, on the shard's own
// goroutine, until it has examined every entry once: what the ticker does
// over a few seconds, at the fake clock's current time.
func sweepEveryEntry(t *testing.T, g *Group) {
	t.Helper()
	for i := range g.Len() {
		err := g.on(i, func(s *shard, now int64) {
			for seen := s.t.len(); seen > 0; seen -= s.sweepMin {
				s.sweep(now)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestCloseAnswersQueuedAndRefusesLater(t *testing.T) {
	g := New(Config{Shards: 2})
	c := g.NewCaller()
	c.Add(acquire("a", 1, 1, 1))
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	c.Add(acquire("a", 1, 1, 1))
	if _, err := c.Run(); err != ErrClosed {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
}

func TestCallerSteadyStateAllocatesNothing(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 4})
	c := g.NewCaller()
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	lim := bucket.Limit{Capacity: 1e12, Rate: 1}
	run := func() {
		for _, k := range keys {
			c.Add(decide.Request{Kind: decide.Acquire, Key: k, Limit: lim, Cost: 1})
		}
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
	}
	run() // create the buckets and grow the slices
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Fatalf("acquire on existing keys allocates %v times per run, want 0", allocs)
	}
}

// BenchmarkShardAcquireExistingKey measures the shard path of one
// TB.ACQUIRE on an existing key: route, one hop to the owner, bucket math,
// hop back. No parsing, no network.
func BenchmarkShardAcquireExistingKey(b *testing.B) {
	g := New(Config{Shards: 4})
	defer g.Close()
	lim := bucket.Limit{Capacity: 1e15, Rate: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := g.NewCaller()
		key := []byte(fmt.Sprintf("bench-%p", c))
		for pb.Next() {
			c.Add(decide.Request{Kind: decide.Acquire, Key: key, Limit: lim, Cost: 1})
			if _, err := c.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkShardPipeline16 measures 16 pipelined acquires on random existing
// keys from one caller: one batch per shard touched.
func BenchmarkShardPipeline16(b *testing.B) {
	g := New(Config{Shards: 4})
	defer g.Close()
	lim := bucket.Limit{Capacity: 1e15, Rate: 1}
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("key:", i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := g.NewCaller()
		n := 0
		for pb.Next() {
			for range 16 {
				c.Add(decide.Request{Kind: decide.Acquire, Key: keys[n&1023], Limit: lim, Cost: 1})
				n += 7
			}
			if _, err := c.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestResetDoesNotCountRefilledBuckets(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 1, SweepInterval: time.Hour})
	c := g.NewCaller()
	runOne(t, c, acquire("k", 1, 1000, 1)) // empty; full again after 1 ms
	clk.Advance(10 * time.Millisecond)
	if r := runOne(t, c, decide.Request{Kind: decide.Reset, Key: []byte("k")}); r.Removed {
		t.Fatal("TB.RESET counted a bucket that had already refilled, unlike DEL on an expired key")
	}
	if st := g.Stats(); st.Buckets != 0 || st.Resets != 0 || st.Expired != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTrackChangesCollectAndRestore(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 1, TrackChanges: 3, SweepInterval: time.Hour})
	c := g.NewCaller()
	runOne(t, c, acquire("a", 10, 1, 4))
	runOne(t, c, acquire("a", 10, 1, 1)) // same key: one change
	runOne(t, c, acquire("b", 10, 1, 0)) // a peek changes nothing
	runOne(t, c, acquire("c", 10, 1, 1))
	runOne(t, c, decide.Request{Kind: decide.Reset, Key: []byte("c")})
	runOne(t, c, acquire("d", 10, 1, 1))
	runOne(t, c, acquire("e", 10, 1, 1)) // beyond the capacity of 3: dropped
	if st := g.Stats(); st.ChangesPending != 3 || st.ChangesDropped != 1 {
		t.Fatalf("stats %+v", st)
	}
	changes, err := g.Collect(0, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	for _, ch := range changes {
		got[ch.Key] = ch
	}
	if len(got) != 3 || got["a"].State.Tokens != 5 || got["a"].Deleted || !got["c"].Deleted || got["d"].State.Tokens != 9 {
		t.Fatalf("changes %+v", changes)
	}
	if again, _ := g.Collect(0, nil, 10); len(again) != 0 {
		t.Fatalf("collected twice: %+v", again)
	}
	// A key collected once is tracked again on its next change, and only
	// once however often it changes; "e", dropped before, is tracked now.
	for range 3 {
		runOne(t, c, acquire("a", 10, 1, 1))
		runOne(t, c, acquire("e", 10, 1, 1))
	}
	if again, _ := g.Collect(0, nil, 10); len(again) != 2 || again[0].Key == again[1].Key {
		t.Fatalf("after changing a and e again: %+v, want each once", again)
	}
	// TrackAll hands out the whole live state again.
	if err := g.TrackAll(); err != nil {
		t.Fatal(err)
	}
	if all, _ := g.Collect(0, nil, 10); len(all) != 3 { // every live key: a, d and e (even e, whose change was dropped)
		t.Fatalf("TrackAll then Collect: %+v", all)
	}
	// Restore fills in keys this process has not seen, and never
	// overwrites; a record that is full by now is left out.
	lim := bucket.Limit{Capacity: 10, Rate: 1}
	unixNow := clk.Base().UnixMicros(clk.Now()) // records carry Unix time
	n, err := g.Restore([]Record{
		{Key: "z", State: bucket.State{Tokens: 2, Last: unixNow}, Limit: lim},
		{Key: "a", State: bucket.State{Tokens: 0, Last: unixNow}, Limit: lim},
		{Key: "y", State: bucket.State{Tokens: 0, Last: unixNow - 10_000_000}, Limit: lim},
	})
	if err != nil || n != 1 {
		t.Fatalf("Restore stored %d (%v), want 1 (z)", n, err)
	}
	if st := g.Stats(); st.ChangesPending != 0 {
		t.Fatalf("restored buckets were tracked as changes: %+v", st)
	}
	if d := runOne(t, c, acquire("z", 10, 1, 0)).Decision; d.Remaining != 2 {
		t.Fatalf("loaded z: %+v", d)
	}
	if d := runOne(t, c, acquire("a", 10, 1, 0)).Decision; d.Remaining != 2 { // 10 - 5 - 3
		t.Fatalf("load overwrote a: %+v", d)
	}
}

// TestMaxBucketsEvictsTheFullest: beyond MaxBuckets, new buckets evict
// buckets close to full and keep the drained ones, which carry the most
// information.
func TestMaxBucketsEvictsTheFullest(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 1, MaxBuckets: 100, SweepInterval: time.Hour})
	c := g.NewCaller()
	for i := range 50 {
		runOne(t, c, acquire(fmt.Sprint("drained", i), 10, 0.001, 10))
		runOne(t, c, acquire(fmt.Sprint("almost", i), 10, 0.001, 0.5))
	}
	for i := range 50 {
		runOne(t, c, acquire(fmt.Sprint("new", i), 10, 0.001, 1))
	}
	st := g.Stats()
	if st.Buckets != 100 || st.Evicted != 50 {
		t.Fatalf("stats %+v, want 100 live and 50 evicted", st)
	}
	kept := 0
	for i := range 50 {
		if d := runOne(t, c, acquire(fmt.Sprint("drained", i), 10, 0.001, 0)).Decision; d.Remaining == 0 {
			kept++
		}
	}
	if kept < 45 {
		t.Fatalf("only %d of 50 drained buckets survived eviction; the nearly full ones should go first", kept)
	}
	t.Logf("%d of 50 drained buckets kept", kept)
}

// TestMaxBucketsKeepsTheNewBucket: at the cap the bucket just created is
// never the one evicted (eviction follows the insert), even in a shard of
// one bucket, and the change set gets the new state and the eviction.
func TestMaxBucketsKeepsTheNewBucket(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 1, MaxBuckets: 1, TrackChanges: 100, SweepInterval: time.Hour})
	c := g.NewCaller()
	runOne(t, c, acquire("a", 10, 0.001, 5))
	for i := range 20 { // every new key evicts the previous one
		runOne(t, c, acquire(fmt.Sprint("k", i), 10, 0.001, 3))
	}
	if st := g.Stats(); st.Buckets != 1 || st.Evicted != 20 {
		t.Fatalf("stats %+v, want 1 live and 20 evicted", st)
	}
	if d := runOne(t, c, acquire("k19", 10, 0.001, 0)).Decision; d.Remaining != 7 {
		t.Fatalf("the newest bucket: %+v, want 7 left (it must survive its own insert)", d)
	}
	if d := runOne(t, c, acquire("a", 10, 0.001, 0)).Decision; d.Remaining != 10 {
		t.Fatalf("an evicted bucket: %+v, want a full one", d)
	}
	changes, err := g.Collect(0, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	for _, ch := range changes {
		got[ch.Key] = ch
	}
	if ch := got["k19"]; ch.Deleted || ch.State.Tokens != 7 {
		t.Fatalf("change of k19: %+v, want its state", ch)
	}
	if ch := got["a"]; !ch.Deleted {
		t.Fatalf("change of a: %+v, want its eviction", ch)
	}
}

func TestWalkAndRestoreGCRA(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 2, SweepInterval: time.Hour})
	c := g.NewCaller()
	runOne(t, c, acquire("a", 10, 1, 3))
	q, _ := bucket.NewGCRA(4, 1, 10, 1)
	runOne(t, c, decide.Request{Kind: decide.Throttle, Key: []byte("t"), Quota: q})
	all := walkAll(t, g)
	if len(all) != 2 {
		t.Fatalf("dump %+v", all)
	}
	g2, _ := newTestGroup(t, Config{Shards: 2})
	c2 := g2.NewCaller()
	if n, err := g2.Restore(all); err != nil || n != 2 {
		t.Fatalf("Restore stored %d (%v), want 2", n, err)
	}
	if d := runOne(t, c2, acquire("a", 10, 1, 0)).Decision; d.Remaining != 7 {
		t.Fatalf("loaded a: %+v", d)
	}
	if r := runOne(t, c2, decide.Request{Kind: decide.Throttle, Key: []byte("t"), Quota: q}).Throttle; r.Remaining != 3 {
		t.Fatalf("loaded GCRA t: %+v", r)
	}
}
