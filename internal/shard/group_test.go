package shard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

func runGroup(t *testing.T, c *Caller, reqs ...decide.Request) (bool, []decide.Answer) {
	t.Helper()
	c.AddAll(reqs)
	res, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	all := true
	for _, a := range res {
		if a.Err != nil {
			t.Fatalf("group answer error: %v", a.Err)
		}
		all = all && a.Decision.Allowed
	}
	return all, append([]decide.Answer(nil), res...)
}

// TestAcquireAllIsAllOrNothing: a group takes the cost from every bucket
// when all hold it, and from none otherwise, on one shard and across
// shards; each answer says what that bucket alone could do.
func TestAcquireAllIsAllOrNothing(t *testing.T) {
	for _, shards := range []int{1, 8} {
		t.Run(fmt.Sprint(shards, " shards"), func(t *testing.T) {
			g, _ := newTestGroup(t, Config{Shards: shards})
			c := g.NewCaller()
			runOne(t, c, acquire("b", 5, 1e-9, 4)) // b holds 1
			all, res := runGroup(t, c, acquire("a", 10, 1e-9, 2), acquire("b", 5, 1e-9, 2))
			if all {
				t.Fatal("allowed though b holds 1 of 2")
			}
			if d := res[0].Decision; !d.Allowed || d.Remaining != 10 || d.RetryAfterMs != 0 {
				t.Fatalf("a alone had the tokens and keeps them: %+v", d)
			}
			if d := res[1].Decision; d.Allowed || d.Remaining != 1 || d.RetryAfterMs <= 0 {
				t.Fatalf("b alone did not: %+v", d)
			}
			if n := g.Stats().Buckets; n != 1 {
				t.Fatalf("a denied group created buckets: %d live, want only b", n)
			}
			all, res = runGroup(t, c, acquire("a", 10, 1e-9, 1), acquire("b", 5, 1e-9, 1))
			if !all || res[0].Decision.Remaining != 9 || res[1].Decision.Remaining != 0 {
				t.Fatalf("allowed group: %v %+v", all, res)
			}
			if d := runOne(t, c, acquire("a", 10, 1e-9, 0)).Decision; d.Remaining != 9 {
				t.Fatalf("a after the group: %+v", d)
			}
			st := g.Stats()
			// b's own acquire, one allowed group, the cost-0 look at a;
			// one denied group.
			if st.Allowed != 3 || st.Denied != 1 {
				t.Fatalf("counters %+v: a group is one decision", st.Stats)
			}
		})
	}
}

// TestAcquireAllDeniedChangesNothing: a denied group leaves every bucket
// exactly as it was, even where a TB.ACQUIRE would have clamped a bucket to
// a smaller capacity.
func TestAcquireAllDeniedChangesNothing(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 8, TrackChanges: 100})
	c := g.NewCaller()
	runOne(t, c, acquire("big", 100, 1, 10)) // 90 left
	for i := range g.Len() { // start with no pending changes
		if _, err := g.Collect(i, nil, 100); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(0)
	all, _ := runGroup(t, c, acquire("big", 50, 1, 1), acquire("none", 1, 1, 2)) // none: cost above capacity
	if all {
		t.Fatal("allowed a cost above a capacity")
	}
	if d := runOne(t, c, acquire("big", 100, 1, 0)).Decision; d.Remaining != 90 {
		t.Fatalf("the denied group clamped or charged big: %+v", d)
	}
	if st := g.Stats(); st.ChangesPending != 0 {
		t.Fatalf("a denied group was tracked as a change: %+v", st)
	}
}

func TestAcquireAllWrongTypeFailsTheGroup(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	c := g.NewCaller()
	q, _ := bucket.NewGCRA(4, 1, 10, 1)
	runOne(t, c, decide.Request{Kind: decide.Throttle, Key: []byte("cell"), Quota: q})
	c.AddAll([]decide.Request{acquire("x", 10, 1, 1), acquire("cell", 10, 1, 1)})
	res, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Err != decide.ErrWrongType {
		t.Fatalf("answers %+v, want ErrWrongType for cell", res)
	}
	if n := g.Stats().Buckets; n != 1 {
		t.Fatalf("%d buckets: the failed group must not create x", n)
	}
}

// TestAcquireAllNeverOverGrants is the concurrency test at the
// shard level: 50 goroutines released together, each taking one token
// from {user_i, org} as a group and one from org alone. org grants exactly
// its capacity in all, and no user bucket loses a token on a denial.
func TestAcquireAllNeverOverGrants(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8})
	const workers, rounds, orgCap = 50, 20, 300
	var orgGrants atomic.Int64
	userGrants := make([]atomic.Int64, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.NewCaller()
			user := fmt.Sprint("user", w)
			<-start
			for range rounds {
				c.AddAll([]decide.Request{acquire(user, 1e6, 1e-9, 1), acquire("org", orgCap, 1e-9, 1)})
				c.Add(acquire("org", orgCap, 1e-9, 1))
				res, err := c.Run()
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Decision.Allowed && res[1].Decision.Allowed {
					orgGrants.Add(1)
					userGrants[w].Add(1)
				}
				if res[2].Decision.Allowed {
					orgGrants.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := orgGrants.Load(); n != orgCap {
		t.Fatalf("org granted %d, capacity %d", n, orgCap)
	}
	c := g.NewCaller()
	for w := range workers {
		d := runOne(t, c, acquire(fmt.Sprint("user", w), 1e6, 1e-9, 0)).Decision
		if spent := int64(1e6) - d.Remaining; spent != userGrants[w].Load() {
			t.Fatalf("user%d spent %d tokens but was granted %d groups", w, spent, userGrants[w].Load())
		}
	}
}

func TestAcquireAllSteadyStateAllocatesNothing(t *testing.T) {
	lim := bucket.Limit{Capacity: 1e12, Rate: 1}
	for _, shards := range []int{1, 8} { // one shard's goroutine, or a unit
		g, _ := newTestGroup(t, Config{Shards: shards})
		c := g.NewCaller()
		var reqs []decide.Request
		for _, k := range keysOnDistinctShards(t, g, min(shards, 3)) {
			reqs = append(reqs, decide.Request{Kind: decide.Acquire, Key: k, Limit: lim, Cost: 1})
		}
		reqs = append(reqs, decide.Request{Kind: decide.Acquire, Key: []byte("another"), Limit: lim, Cost: 1})
		run := func() {
			c.AddAll(reqs)
			if _, err := c.Run(); err != nil {
				t.Fatal(err)
			}
		}
		run()
		if allocs := testing.AllocsPerRun(200, run); allocs != 0 {
			t.Fatalf("%d shards: a group allocates %v times per run, want 0", shards, allocs)
		}
	}
}
