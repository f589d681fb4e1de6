package shard

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/testkit"
)

// TestReviewSweepNeverRunsWhileAVoteWaits: shard A checks its member of a
// group across shards and waits at the vote while shard B is held; the
// sweep timer fires on A meanwhile (every millisecond), and the clock
// moves until A's bucket would be full. A must run nothing while it waits
// (invariant 2): a sweep then would delete the bucket it checked, and its
// take would recreate it full at the batch's instant (Remaining 9 instead
// of 0, and 10 tokens at the end instead of 9). The 30 ms of real time
// are for the sweep timer to fire.
func TestReviewSweepNeverRunsWhileAVoteWaits(t *testing.T) {
	g, clk := newProbeGroup(t, Config{Shards: 2, SweepInterval: time.Millisecond})
	keys := keysOnDistinctShards(t, g, 2)
	kA, kB := keys[0], keys[1]
	a, b := shardOfKey(g, kA), shardOfKey(g, kB)
	lim := bucket.Limit{Capacity: 10, Rate: 1}
	req := func(k []byte, cost float64) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: k, Limit: lim, Cost: cost}
	}
	c := g.NewCaller()
	runOne(t, c, req(kA, 9)) // 1 token left at t0
	releaseA, releaseB := hold(t, g, a), hold(t, g, b)
	done := make(chan []decide.Answer, 1)
	go func() {
		u := g.NewCaller()
		u.AddAll([]decide.Request{req(kA, 1), req(kB, 1)})
		res, err := u.Run()
		if err != nil {
			res = []decide.Answer{{Err: err}, {Err: err}}
		}
		done <- append([]decide.Answer(nil), res...)
	}()
	testkit.Eventually(t, 5*time.Second, "the group posted to A and B", func() bool { return queued(g, a) == 1 && queued(g, b) == 1 })
	releaseA()
	testkit.Eventually(t, 5*time.Second, "A took the group's batch", func() bool { return queued(g, a) == 0 })
	time.Sleep(5 * time.Millisecond) // real time: A reads t0 and reaches the vote
	clk.Advance(20 * time.Second)    // kA would be full now
	time.Sleep(30 * time.Millisecond)
	releaseB()
	var res []decide.Answer
	select {
	case res = <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the group did not return within 2 s of releasing B")
	}
	if res[0].Err != nil || !res[0].Decision.Allowed || !res[1].Decision.Allowed {
		t.Fatalf("group answered %+v, want allowed", res)
	}
	if d := res[0].Decision; d.Remaining != 0 {
		t.Fatalf("kA answered %+v, want Remaining 0: the bucket changed while its shard waited at the vote", d)
	}
	d := runOne(t, c, req(kA, 0)).Decision
	if d.Remaining != 10 { // 0 at t0, 20 s at 1/s: full again
		t.Fatalf("kA at t0+20 s: %+v, want 10", d)
	}
}

// TestReviewVoteHoldsUpOnlyTheWorkBehindIt: shard X is held (a long
// maintenance call, say). A group over X and Y, then a group over Y and Z,
// then a plain TB.ACQUIRE on Z: shard Y waits at the first vote and Z at
// the second, so the plain call on Z waits for X too, through the votes
// (by design: a shard runs nothing while it waits at a vote, invariant 2).
// Work on a fourth shard W is answered at once; once X is released,
// everything returns. The test logs whether the call on Z waited.
func TestReviewVoteHoldsUpOnlyTheWorkBehindIt(t *testing.T) {
	g, _ := newProbeGroup(t, Config{Shards: 8, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 4)
	kX, kY, kZ, kW := keys[0], keys[1], keys[2], keys[3]
	releaseX := hold(t, g, shardOfKey(g, kX))
	defer func() {
		if releaseX != nil {
			releaseX()
		}
	}()
	start := func(add func(c *Caller)) chan error {
		ch := make(chan error, 1)
		go func() {
			c := g.NewCaller()
			add(c)
			_, err := c.Run()
			ch <- err
		}()
		return ch
	}
	v1 := start(func(c *Caller) {
		c.AddAll([]decide.Request{acquire(string(kX), 1e9, 1, 1), acquire(string(kY), 1e9, 1, 1)})
	})
	testkit.Eventually(t, 5*time.Second, "the first vote posted to X", func() bool { return queued(g, shardOfKey(g, kX)) == 1 })
	v2 := start(func(c *Caller) {
		c.AddAll([]decide.Request{acquire(string(kY), 1e9, 1, 1), acquire(string(kZ), 1e9, 1, 1)})
	})
	testkit.Eventually(t, 5*time.Second, "the second vote posted to Y", func() bool { return queued(g, shardOfKey(g, kY)) >= 1 })
	plainZ := start(func(c *Caller) { c.Add(acquire(string(kZ), 1e9, 1, 1)) })
	if !within(2*time.Second, func() {
		c := g.NewCaller()
		c.Add(acquire(string(kW), 1e9, 1, 1))
		if _, err := c.Run(); err != nil {
			t.Error(err)
		}
	}) {
		t.Fatal("a call on W, which no vote touches, waited 2 s for the held shard X")
	}
	time.Sleep(20 * time.Millisecond) // real time: what the call on Z waits for is X
	zWaited := false
	select {
	case err := <-plainZ:
		if err != nil {
			t.Fatal(err)
		}
	default:
		zWaited = true
	}
	releaseX()
	releaseX = nil
	for i, ch := range []chan error{v1, v2} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("vote %d did not return within 2 s of releasing X", i+1)
		}
	}
	if zWaited {
		select {
		case err := <-plainZ:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("the call on Z did not return within 2 s of releasing X")
		}
	}
	t.Logf("the call on Z waited for the held shard X: %v", zWaited)
}

// TestReviewMaintenanceBesideVotesGrantsExactly: groups across shards on
// hot buckets run while other goroutines walk every shard in small
// chunks, collect changes, ask Live, restore records and mark everything
// for resync. Nothing hangs, and the hot buckets lose exactly what was
// granted (maintenance never touches a bucket decided since the start).
func TestReviewMaintenanceBesideVotesGrantsExactly(t *testing.T) {
	g, _ := newProbeGroup(t, Config{Shards: 4, SweepInterval: time.Millisecond, TrackChanges: 10_000})
	keys := keysOnDistinctShards(t, g, 4)
	caps := map[string]float64{}
	for i, k := range keys {
		caps[string(k)] = float64(300 + 50*i)
	}
	req := func(k []byte) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: k, Limit: bucket.Limit{Capacity: caps[string(k)], Rate: 1}, Cost: 1}
	}
	log := &spendLog{spent: map[string]float64{}}
	var errs firstErr
	stop := make(chan struct{})
	var mwg sync.WaitGroup
	for range 2 {
		mwg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				maintain(g, keys, 1, &errs)
			}
		})
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			c := g.NewCaller()
			for r := range 100 {
				a, b := keys[(w+r)%4], keys[(w+r+1+r%3)%4]
				items := []item{
					{group: true, reqs: []decide.Request{req(a), req(b)}},
					{reqs: []decide.Request{req(keys[r%4])}},
					{group: true, reqs: []decide.Request{req(b), req(keys[(w+r+3)%4])}},
				}
				if string(b) == string(keys[(w+r+3)%4]) {
					items = items[:2]
				}
				if _, _, err := runItems(c, log, items); err != nil {
					errs.set(err)
					return
				}
			}
		})
	}
	if !within(30*time.Second, wg.Wait) {
		t.Fatalf("callers beside maintenance did not finish within 30 s; queues %v", g.QueueDepths(nil))
	}
	close(stop)
	if !within(10*time.Second, mwg.Wait) {
		t.Fatal("maintenance did not finish within 10 s")
	}
	if err := errs.get(); err != nil {
		t.Fatal(err)
	}
	checkSpent(t, g, log, caps)
}

// TestReviewMixedRunSteadyStateAllocatesNothing: a Run holding two groups
// over the same two shards in opposite key order, a group over three
// shards, a co-tagged group and plain requests before and after them
// allocates nothing once its Caller has grown its slices and votes.
func TestReviewMixedRunSteadyStateAllocatesNothing(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 3)
	lim := bucket.Limit{Capacity: 1e12, Rate: 1}
	r := func(k string) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: []byte(k), Limit: lim, Cost: 1}
	}
	a, b, x := string(keys[0]), string(keys[1]), string(keys[2])
	var a2, b2 string
	for i := 0; a2 == "" || b2 == ""; i++ {
		k := fmt.Sprint("other-", i)
		switch shardOfKey(g, []byte(k)) {
		case shardOfKey(g, keys[0]):
			a2 = k
		case shardOfKey(g, keys[1]):
			b2 = k
		}
	}
	g1, g2 := []decide.Request{r(a), r(b)}, []decide.Request{r(b2), r(a2)}
	g3, tagged := []decide.Request{r(x), r(a2 + "x"), r(b + "x")}, []decide.Request{r("{t}1"), r("{t}2")}
	ra, rb2, ra2 := r(a), r(b2), r(a2)
	c := g.NewCaller()
	run := func() {
		c.Add(ra)
		c.AddAll(g1)
		c.Add(rb2)
		c.AddAll(g2)
		c.AddAll(tagged)
		c.AddAll(g3)
		c.Add(ra2)
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if c.nvotes != 0 || len(c.votes) < 2 {
		t.Fatalf("the Run took %d votes, want at least 2", len(c.votes))
	}
	if allocs := testing.AllocsPerRun(200, run); allocs != 0 {
		t.Fatalf("a mixed Run allocates %v times per run, want 0", allocs)
	}
}
